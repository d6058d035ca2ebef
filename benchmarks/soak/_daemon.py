"""The soak's daemon: its config file (written as TOML text, only documented keys), the
`reliabilityd run -c` child process, its log read as it grows, and its RSS."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmarks.soak._ledger import SLICE_KEY
from benchmarks.soak._plan import Plan

TOKEN = "soak-token"
# The rule's threshold alternates between these at each good reload: the
# suites pass about 70% of the time, so under 0.99 the rule fires (its CI's
# lower bound is below) and under 0.01 it resolves; each reload shows in the
# stored alert state. A bad file names a third, so a bad file applied in part
# would show too.
FIRES, CLEARS = 0.99, 0.01
THRESHOLDS = (CLEARS, FIRES)
BAD_THRESHOLD = 0.5
RULE = "soak-low"


@dataclass(frozen=True)
class Ports:
    redis: int
    mqtt: int
    http: int


def config_text(plan: Plan, ports: Ports, threshold: float, *, bad: bool = False) -> str:
    """The daemon's config; ``bad`` adds a value the loader refuses (stats.k = [0])."""
    ks = "[0, 5]" if bad else "[1, 5]"
    return f"""\
# The soak's daemon (benchmarks/soak): written anew before each SIGHUP.
[redis]
url = "redis://127.0.0.1:{ports.redis}/0"

[mqtt]
url = "mqtt://127.0.0.1:{ports.mqtt}"
client_id = "soak-daemon"
session_expiry = {plan.session_expiry}

[store]
dedup_ttl = {plan.dedup_ttl}

[stats]
k = {ks}

[[suites]]
match = "soak-sliced"
slice_by = ["{SLICE_KEY}"]

# Two tenants with suite quotas: every new suite goes through its grant's
# admission, and each grant's dead letters have a stream of their own.
[[grants]]
name = "http-team"
suites = ["soak-http", "soak-sliced"]
max_suites = 10

[[grants]]
name = "otlp-team"
suites = ["soak-otlp"]
max_suites = 10

[daemon]
instance = "soak"

[http]
port = {ports.http}
token = "{TOKEN}"

[http.otlp]
enabled = true
skip_labels = ["skip"]

[[alerts]]
name = "{RULE}"
suite = "soak-*"
k = 1
below = {BAD_THRESHOLD if bad else threshold}
trigger = "ci-low"
"""


# One event per log line: `... event=<name> ...`; a level word before it.
_EVENT = re.compile(r"\bevent=(\S+)")
_LEVEL = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b")


class DaemonChild:
    """`python -m reliabilityd run -c <path>`, its output in ``log``."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "reliabilityd.toml"
        self.log = workdir / "reliabilityd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._offset = 0
        self._partial = b""
        self.events: Counter[str] = Counter()
        # WARNING and worse, by event name; and the first lines of each.
        self.warnings: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.tracebacks = 0
        self.reload_lines: list[str] = []

    def write(self, text: str) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.path)  # a SIGHUP never reads a half-written file

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "reliabilityd", "run", "-c", str(self.path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> tuple[int | None, float]:
        """SIGTERM; the exit code (None when it had to be killed) and the seconds it took."""
        if self.proc is None:
            return None, 0.0
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            code = None
        self.proc = None
        return code, time.monotonic() - started

    def rss(self) -> int | None:
        """Resident bytes from /proc (Linux); None when the process is gone."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except (OSError, AssertionError):
            return None
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        return int(found[1]) * 1024 if found else None

    def read(self) -> None:
        """Take in the lines written since the last read."""
        with self.log.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            if line.startswith("Traceback"):
                self.tracebacks += 1
            found = _EVENT.search(line)
            if found is None:
                continue
            name = found[1]
            self.events[name] += 1
            if name in ("reloaded", "reload_failed"):
                self.reload_lines.append(line)
            level = _LEVEL.search(line[: found.start()])
            if level is not None:
                self.warnings[f"{level[1]} {name}"] += 1
                self.examples.setdefault(f"{level[1]} {name}", line[:400])

    async def wait_event(self, name: str, times: int, within: float) -> None:
        """Until the log holds ``times`` lines of ``name``; TimeoutError past ``within`` s."""
        end = time.monotonic() + within
        while True:
            self.read()
            if self.events[name] >= times:
                return
            if not self.alive():
                raise RuntimeError(f"the daemon exited; see {self.log}")
            if time.monotonic() > end:
                raise TimeoutError(f"no {times}th event={name} in {within} s; see {self.log}")
            await asyncio.sleep(0.1)

    async def reload(self, within: float = 30.0) -> str:
        """SIGHUP; the one `reloaded` or `reload_failed` line that answers it."""
        self.read()
        before = len(self.reload_lines)
        self.signal(signal.SIGHUP)
        end = time.monotonic() + within
        while len(self.reload_lines) == before:
            if not self.alive():
                raise RuntimeError(f"the daemon exited on SIGHUP; see {self.log}")
            if time.monotonic() > end:
                raise TimeoutError(f"no answer to SIGHUP in {within} s; see {self.log}")
            await asyncio.sleep(0.1)
            self.read()
        if len(self.reload_lines) != before + 1:
            raise RuntimeError(f"one SIGHUP, {len(self.reload_lines) - before} answers")
        return self.reload_lines[-1]
