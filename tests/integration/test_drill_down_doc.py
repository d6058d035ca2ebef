"""docs/drill-down.md's first steps work as printed, against real servers.

Every config the section writes loads (each key exists, each value checks),
every ``reliabilityd`` and ``inspect view`` command line parses with the
options it names, and the two Python examples run as a reader runs them:
the OpenTelemetry one against a daemon with the section's ``[http.otlp]``
settings (with an SDK tracer provider standing in for the one Langfuse's SDK
sets up), the Emitter one against mosquitto, each trial then holding the
link and the run the section says.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from reliabilityd.cli._main import build_parser
from reliabilityd.config import Config, HttpConfig, load
from reliabilityd.store import TrialRecord, link
from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import wait_until
from tests.support.otlp import otlp_config
from tests.support.servers import Mosquitto, RedisServer, free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "drill-down.md"
SECTION = DOC.read_text()[
    DOC.read_text().index("## First steps") : DOC.read_text().index("## Links and runs")
]
STEPS = dict(re.findall(r"### (.+?)\n(.*?)(?=\n### |\Z)", SECTION, re.S))
BIN = Path(sys.executable).parent


def _blocks(step: str, kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", STEPS[step], re.S)


def _config_of(step: str, tmp_path: Path) -> Path:
    """The config the step's shell block writes (its ``cat > reliabilityd.toml`` heredoc)."""
    (shell,) = _blocks(step, "sh")
    (toml,) = re.findall(r"<<'EOF'\n(.*?)EOF\n", shell, re.S)
    path = tmp_path / f"{step.split(maxsplit=1)[0].lower()}.toml"
    path.write_text(toml)
    return path


def _commands(step: str, program: str) -> list[list[str]]:
    """Each ``program`` command of the step's shell blocks (a line's, or one in ``$(...)``),
    as its arguments."""
    out = []
    for shell in _blocks(step, "sh"):
        for line in shell.replace("\\\n", " ").splitlines():
            found = re.findall(rf"\$\(({program} [^)]*)\)", line)
            command = line.split(" &")[0].strip()
            if command.startswith(program + " "):
                found.append(command)
            out += [shlex.split(c)[1:] for c in found]
    return out


def test_the_first_steps_cover_inspect_langfuse_otlp_and_the_emitter() -> None:
    assert set(STEPS) == {"Inspect AI", "OTLP from a Langfuse-instrumented agent", "The Emitter"}
    # Near the top: the page's first section, right after its introduction.
    assert re.findall(r"^## .*", DOC.read_text(), re.M)[0] == "## First steps"


def test_every_reliabilityd_and_inspect_view_command_parses(tmp_path: Path) -> None:
    parser = build_parser()
    lines = [argv for step in STEPS for argv in _commands(step, "reliabilityd")]
    assert {argv[0] for argv in lines} >= {"run", "endpoints", "trials", "emit"}
    for argv in lines:
        if "$(" not in " ".join(argv):
            parser.parse_args(argv)  # an option that does not exist exits 2
    (view,) = _commands("Inspect AI", "inspect")[1:]
    assert view[0] == "view"
    helped = subprocess.run(
        [str(BIN / "inspect"), "view", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for option in (a for a in view if a.startswith("--")):
        assert option in helped, option


def test_the_inspect_config_resolves_a_samples_route_in_the_viewer(tmp_path: Path) -> None:
    cfg = load(_config_of("Inspect AI", tmp_path))
    base, template = cfg.links("gsm8k@openai_gpt-4o")
    assert (base, template) == ("http://127.0.0.1:7575/", "")
    assert cfg.links("deploy-bot") == ("", "")  # only the hook's suites
    assert "`#/logs/<log>.eval/samples/sample/<id>/<epoch>`" in STEPS["Inspect AI"]
    route = "#/logs/2026-12-02T18-00-00_gsm8k_abc.eval/samples/sample/17/3"
    resolved = link(suite="s", task="17", trial="e/3", run=None, url=route, base=base)
    assert resolved == "http://127.0.0.1:7575/" + route


async def _record(cfg: Config, suite: str, task: str) -> TrialRecord:
    found: list[TrialRecord] = []
    async with store_for(cfg) as store:

        async def there() -> bool:
            found[:] = await store.reads.trials(suite, task)
            return bool(found)

        await wait_until(there, 30)
    (record,) = found
    return record


@pytest.mark.timeout(120)
async def test_the_langfuse_otlp_example_links_its_trial_to_its_trace(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    step = "OTLP from a Langfuse-instrumented agent"
    documented = load(_config_of(step, tmp_path))
    assert documented.http.port == 4318
    cfg = otlp_config(redis_server, prefix)
    port = free_port()
    cfg = msgspec.structs.replace(cfg, http=HttpConfig(port=port, otlp=documented.http.otlp))
    (example,) = _blocks(step, "python")
    # What Langfuse's SDK does first: an OpenTelemetry tracer provider of its own.
    stand_in = (
        "from opentelemetry import trace as _trace\n"
        "from opentelemetry.sdk.trace import TracerProvider as _Provider\n"
        "_trace.set_tracer_provider(_Provider())\n"
    )
    env = {**os.environ, "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": f"http://127.0.0.1:{port}/v1/logs"}
    async with running(cfg) as daemon:
        await asyncio.wait_for(daemon.http_listening.wait(), 10)
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", stand_in + example],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        record = await _record(cfg, "support-agent", "refund policy")
    assert (record.trial, record.outcome, record.run) == ("resp-7", "fail", "nightly-2026-12-02")
    assert record.url is not None
    match = re.fullmatch(
        r"https://cloud\.langfuse\.com/project/cm4x2k9pq0001/traces/([0-9a-f]{32})", record.url
    )
    assert match is not None, record.url
    assert int(match[1], 16) != 0  # the span's trace, not an empty context


@pytest.mark.timeout(120)
async def test_the_emitter_example_and_the_emit_command_carry_link_and_run(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    # The Emitter's and `emit`'s default topic, under the daemon's default subscription.
    cfg = msgspec.structs.replace(
        cfg, mqtt=msgspec.structs.replace(cfg.mqtt, topic="reliability/trials/#")
    )
    (example,) = _blocks("The Emitter", "python")
    (emit,) = _commands("The Emitter", "reliabilityd")[:1]
    env = {
        **os.environ,
        "RELIABILITYD_MQTT_URL": mosquitto.url,
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    async with running(cfg):
        for argv in ([sys.executable, "-c", example], [str(BIN / "reliabilityd"), *emit]):
            done = await asyncio.to_thread(
                subprocess.run,
                argv,
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr
        async with store_for(cfg) as store:

            async def both() -> bool:
                return len(await store.reads.trials("deploy-bot", "deploy service 3")) == 2

            await wait_until(both, 30)
            rows = await store.reads.trials("deploy-bot", "deploy service 3")
    assert [(r.trial, r.outcome, r.url, r.run) for r in rows] == [
        ("run-49", "fail", "https://traces.example/t/a41e", "nightly-2026-12-02"),
        ("run-48", "fail", "https://traces.example/t/9f2c", "nightly-2026-12-02"),
    ]
