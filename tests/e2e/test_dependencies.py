"""The package runs without the third-party MQTT clients that only the dev extra installs.

Each check runs a fresh interpreter in which importing aiomqtt, gmqtt or paho
fails, as in an environment with `pip install reliabilityd` and nothing else.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.support.servers import Mosquitto

# Put None into sys.modules: `import aiomqtt` raises ImportError, find_spec returns None.
WITHOUT_DEV_CLIENTS = (
    "import sys\nfor name in ('aiomqtt', 'gmqtt', 'paho'):\n    sys.modules[name] = None\n"
)


def run_without_dev_clients(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_DEV_CLIENTS + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_module_imports_without_them() -> None:
    proc = run_without_dev_clients(
        """
        import importlib, pkgutil, reliabilityd
        for info in pkgutil.walk_packages(reliabilityd.__path__, "reliabilityd."):
            if info.name != "reliabilityd.__main__":  # it runs the command line
                importlib.import_module(info.name)
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_the_emitter_publishes_without_them(mosquitto: Mosquitto) -> None:
    proc = run_without_dev_clients(
        f"""
        from reliabilityd import Emitter
        with Emitter("{mosquitto.url}", topic="deps/trials/emit") as em:
            em.emit("deps", "task", "pass")
            em.flush(30)
            print(em.acknowledged)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"


@pytest.mark.parametrize(
    ("what", "needs"), [("ingest", "gmqtt, aiomqtt, paho-mqtt"), ("import", "aiomqtt")]
)
def test_a_benchmark_without_its_baselines_says_so_in_one_line(what: str, needs: str) -> None:
    proc = run_without_dev_clients(
        f"""
        from benchmarks.bench_{what} import main
        main()
        """
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"make bench-{what}: ")
    assert needs in line
    assert "pip install 'reliabilityd[dev]'" in line
