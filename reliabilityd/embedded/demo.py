"""`reliabilityd demo`: a live fleet, the daemon and its alert on embedded servers.

Starts Redis and an MQTT broker (``embedded.py``: the system's, else the
Python packages'), the daemon with one alert rule on ``support-bot`` (the
default trigger, the change detector: pass^5 under 50%, resolved when the
value is back at 60%), and simulated agents
(``fleet.py``) publishing trials of three suites. Every number shown is read
back from Redis. The schedule:

* warm-up: every suite's numbers are UNKNOWN until its tasks have 5 runs;
* after ``REGRESS_AT`` seconds ``support-bot`` regresses (every task passes
  half its runs): its pass^5 falls and the alert fires;
* ``HOLD`` seconds after the alert fired it recovers and the alert resolves.

Ctrl-C, SIGTERM or the end of ``--duration`` stop the agents, let the daemon
count what was published, stop it and the servers, and leave no process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from reliabilityd import logs
from reliabilityd.config import Config, MqttConfig, StatsConfig, parse_mqtt_url
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.embedded import fleet, liveview
from reliabilityd.embedded._servers import EmbeddedServers, Mode
from reliabilityd.errors import ReliabilitydError
from reliabilityd.rules import Rule
from reliabilityd.store import Store

DEFAULT_DURATION = 90.0
REGRESS_AT = 10.0
HOLD = 4.0
# Give up waiting for the alert after this long in the regressed phase.
MAX_REGRESSED = 30.0
ROUND = 0.5
PLAIN_EVERY = 5.0
KS = [1, 5]
RULE = Rule(
    name="support-reliability",
    suite="support-bot",
    metric="pass^k",
    k=5,
    below=0.5,
    resolve_above=0.6,
    for_seconds=2.0,
    min_tasks=8,
    # The demo's phases last seconds: the windowed detector's scale. The default
    # trigger's references take hours to warm up.
    trigger="detector",
)


def demo_config() -> Config:
    return Config(
        mqtt=MqttConfig(client_id="reliabilityd-demo"),
        # A window of the last 10 runs per task, so a regression and a recovery
        # both show within seconds.
        stats=StatsConfig(k=KS, ci_interval=1.0, window=10, lottery_limit=5),
        alerts=[RULE],
    )


class Schedule:
    """warm-up -> regressed (support-bot) -> recovered, driven by what Redis says."""

    def __init__(self, agents: fleet.Agents) -> None:
        self.agents = agents
        self.phase = "warm-up"
        self.changed_at = 0.0
        self.fired_at: float | None = None
        self.resolved_at: float | None = None

    def describe(self) -> str:
        return {
            "warm-up": "warm-up: every agent healthy; numbers are UNKNOWN until tasks have 5 runs",
            "regressed": f"support-bot has regressed: each task now passes "
            f"{fleet.REGRESSED:.0%} of its runs",
            "recovered": "support-bot has recovered: back to its reliable self",
        }[self.phase]

    def step(self, elapsed: float, alert_state: str) -> str | None:
        """Move on when it is time; returns the new phase's description on a change."""
        if alert_state == "firing" and self.fired_at is None:
            self.fired_at = elapsed
        if alert_state == "resolved" and self.fired_at is not None and self.resolved_at is None:
            self.resolved_at = elapsed
        support = self.agents.suite("support-bot")
        if self.phase == "warm-up" and elapsed >= REGRESS_AT:
            self.phase, support.regressed = "regressed", True
        elif self.phase == "regressed" and (
            (self.fired_at is not None and elapsed >= self.fired_at + HOLD)
            or elapsed >= self.changed_at + MAX_REGRESSED
        ):
            self.phase, support.regressed = "recovered", False
        else:
            return None
        self.changed_at = elapsed
        return self.describe()


async def _counted(store: Store) -> int:
    total = 0
    for suite in await store.reads.suites():
        total += (await store.reads.read_state(suite)).counters.trials
    return total


async def _run(servers: EmbeddedServers, duration: float, live: bool) -> int:
    config = servers.configure(demo_config())
    say: Callable[[str], None] = functools.partial(print, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    daemon_stop = asyncio.Event()
    daemon = Daemon(config)
    daemon_task = asyncio.create_task(daemon.run(daemon_stop), name="daemon")
    store = daemon.store
    agents = fleet.Agents(fleet.default_fleet())
    schedule = Schedule(agents)
    log: list[str] = []
    page = f"open {servers.http_url}/suites/{RULE.suite} in a browser: the suite's page, live"
    footer = [page, liveview.rule_line(RULE), *servers.describe(config), "Ctrl-C stops everything"]
    live_view = None
    if live:
        from rich.console import Console
        from rich.live import Live

        live_view = Live(console=Console(), refresh_per_second=4, transient=False)
        say = log.append
        print(page, flush=True)  # stays above the live view, for a click or a copy
    else:
        for line in footer[:-1]:
            print(line, flush=True)
    try:
        await asyncio.wait_for(daemon.subscribed.wait(), 30)
        endpoint = parse_mqtt_url(config.mqtt.url)
        started = time.monotonic()
        seen_notes = 0
        last_plain = -PLAIN_EVERY
        say(f"t=  0.0s {schedule.describe()}")
        with live_view if live_view is not None else contextlib.nullcontext():
            async with fleet.client(
                endpoint.host, endpoint.port, config.mqtt.protocol, "demo-agents"
            ) as client:
                while not stop.is_set():
                    elapsed = time.monotonic() - started
                    if elapsed >= duration:
                        break
                    await agents.publish(client, agents.round())
                    views = await liveview.read(store, config.alerts)
                    state = next(
                        (
                            liveview.state_name(s)
                            for v in views
                            for _, s in v.alerts
                            if v.suite == "support-bot"
                        ),
                        "inactive",
                    )
                    for note in await liveview.new_notes(store, config.alerts_key, seen_notes):
                        seen_notes += 1
                        say(f"t={elapsed:5.1f}s {liveview.note_line(note)}")
                    change = schedule.step(elapsed, state)
                    if change:
                        say(f"t={elapsed:5.1f}s {change}")
                    if live_view is not None:
                        live_view.update(
                            liveview.render(
                                views,
                                KS,
                                header=f"reliabilityd demo  {elapsed:4.0f} s of {duration:.0f} s"
                                f"   {agents.published} trials published",
                                phase=schedule.describe(),
                                log=log,
                                footer=footer,
                            )
                        )
                    elif elapsed - last_plain >= PLAIN_EVERY:
                        last_plain = elapsed
                        for view in views:
                            print(liveview.plain(view, KS, elapsed), flush=True)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), ROUND)
        # Exactly once: everything published is counted, nothing twice.
        deadline = time.monotonic() + 10
        counted = await _counted(store)
        while counted < agents.published and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            counted = await _counted(store)
        print(f"published {agents.published} trial events; Redis counted {counted}")
        if schedule.fired_at is not None:
            print(f"alert fired at t={schedule.fired_at:.1f}s", end="")
            if schedule.resolved_at is not None:
                print(f", resolved at t={schedule.resolved_at:.1f}s")
            else:
                print(", not resolved before the end (try a longer --duration)")
        return 0
    finally:
        daemon_stop.set()
        try:
            await asyncio.wait_for(daemon_task, 15)
        finally:
            await store.client.aclose()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)


def _want_live(no_live: bool) -> bool:
    if no_live or not sys.stdout.isatty():
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        print("(plain lines: the live view needs rich: pip install 'reliabilityd[embedded]')")
        return False
    return True


def main(
    *,
    duration: float = DEFAULT_DURATION,
    no_live: bool = False,
    mode: Mode = "auto",
    data_dir: Path | None = None,
) -> int:
    logs.setup("ERROR")  # the demo shows what matters itself
    live = _want_live(no_live)
    datadir = data_dir or Path(tempfile.mkdtemp(prefix="reliabilityd-demo-"))
    servers = EmbeddedServers(datadir, mode=mode)
    # SIGTERM before the loop's handler exists must still stop the servers.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print("starting Redis and an MQTT broker ...", flush=True)
    try:
        try:
            servers.start()
        except ReliabilitydError as exc:
            print(f"reliabilityd: {exc}", file=sys.stderr)
            return 1
        return asyncio.run(_run(servers, duration, live))
    except KeyboardInterrupt:  # Ctrl-C while the servers were starting
        return 130
    finally:
        servers.stop()
        signal.signal(signal.SIGTERM, previous)
        if data_dir is None:
            shutil.rmtree(datadir, ignore_errors=True)
