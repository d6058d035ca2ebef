"""`reliabilityd demo`: the whole path on this machine, in about ten seconds.

Starts a private redis-server and mosquitto (deploy/ settings), runs the
daemon with one alert rule (pass^5 CI lower bound below 0.75, the seed's
gate), publishes the seed document's 20 tasks x 5 trials over MQTT, and
prints the snapshot from Redis and the alert that comes out.
"""

from __future__ import annotations

import asyncio
import signal
import tempfile
import time
from pathlib import Path

import msgspec

from reliabilityd import logs
from reliabilityd.alerts import Rule
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon import Daemon
from reliabilityd.devservers import Mosquitto, RedisServer, free_port
from reliabilityd.events import TrialEvent
from reliabilityd.mqtt_client import connect

SEED_PASSES = [4, 2, 5, 3, 1, 2, 3, 5, 2, 1, 4, 3, 3, 2, 2, 3, 4, 2, 3, 2]
SUITE = "deploy-bot"


def seed_events() -> list[TrialEvent]:
    """The seed's suite: task i passes SEED_PASSES[i] of its 5 runs."""
    return [
        TrialEvent(
            SUITE,
            f"deploy service {i}",
            f"run-{i}-{j}",
            "pass" if j < passes else "fail",
            ts=1764460800.0 + j,
        )
        for i, passes in enumerate(SEED_PASSES)
        for j in range(5)
    ]


def _pct(x: str) -> str:
    return "UNKNOWN" if x == "" else f"{float(x):.0%}"


async def _run(workdir: Path, *, serve: bool) -> int:
    redis = RedisServer("redis", workdir, free_port())
    broker = Mosquitto("mosquitto", workdir, free_port())
    redis.start()
    broker.start()
    try:
        config = Config(
            redis=RedisConfig(url=redis.url),
            mqtt=MqttConfig(url=broker.url, client_id="reliabilityd-demo"),
            stats=StatsConfig(k=[1, 5], ci_interval=1.0),
            alerts=[Rule(name="deploy-reliability", k=5, below=0.75)],
        )
        print(f"redis-server on port {redis.port}, mosquitto on port {broker.port}")
        daemon = Daemon(config)
        stop = asyncio.Event()
        task = asyncio.create_task(daemon.run(stop))
        await asyncio.wait_for(daemon.subscribed.wait(), 20)

        events = seed_events()
        publisher = await connect(config.mqtt, identifier="demo-agent", persistent=False)
        try:
            for event in events:
                await publisher.publish(
                    "reliability/trials/deploy-bot",
                    msgspec.json.encode(event),
                    retain=False,
                )
        finally:
            await publisher.close()
        print(f"published {len(events)} trial events (20 tasks x 5 runs), one per message, e.g.")
        print(f"  {msgspec.json.encode(events[0]).decode()}")

        store = daemon.store
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            snap = await store.snapshot(SUITE)
            notes = await store.alert_history(config.alerts_key)
            if "json" in snap and msgspec.json.decode(snap["json"])["trials"] == 100 and notes:
                break
            await asyncio.sleep(0.1)
        else:
            print("no snapshot and alert within 30 s")
            return 1

        print(f"\n$ redis-cli -p {redis.port} HGETALL 'rel:{{{SUITE}}}:snapshot'   (excerpt)")
        for field in ("tasks", "trials", "pass@5", "pass^5", "pass^5:ci_low", "pass^5:ci_high"):
            print(f"  {field:<16} {snap[field]}")
        print(
            f"\npass@5 = {_pct(snap['pass@5'])} "
            f"[{_pct(snap['pass@5:ci_low'])}, {_pct(snap['pass@5:ci_high'])}]"
            "  capability: at least one of 5 tries succeeds"
        )
        print(
            f"pass^5 = {_pct(snap['pass^5'])} "
            f"[{_pct(snap['pass^5:ci_low'])}, {_pct(snap['pass^5:ci_high'])}]"
            "  reliability: all 5 tries succeed"
        )
        doc = msgspec.json.decode(snap["json"])
        for row in doc["lottery"]["rows"][:3]:
            print(f"lottery case: {row['task']!r} ({row['c']}/{row['n']} runs)")

        note = msgspec.json.decode(notes[0])
        print(f"\nalert on MQTT reliability/alerts/{SUITE}/deploy-reliability and in rel:alerts:")
        shown = {
            k: note[k]
            for k in (
                "rule",
                "suite",
                "state",
                "metric",
                "k",
                "value",
                "ci_low",
                "ci_high",
                "below",
                "tasks",
                "runs",
                "started_at",
                "lottery",
            )
        }
        print("  " + msgspec.json.encode(shown).decode())
        if serve:
            print("\nThe daemon keeps running; try it (Ctrl-C stops everything):")
            print(
                f"  mosquitto_pub -p {broker.port} -q 1 -t reliability/trials/x -m "
                '\'{"suite":"my-suite","task":"t1","trial":"1","outcome":"pass"}\''
            )
            print(f"  redis-cli -p {redis.port} HGETALL 'rel:{{my-suite}}:snapshot'")
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        stop.set()
        await task
        await store.client.aclose()
        return 0
    finally:
        broker.stop(signal.SIGTERM)
        redis.stop(signal.SIGTERM)


def main(*, serve: bool = False) -> int:
    logs.setup("ERROR")  # the demo prints what matters itself
    with tempfile.TemporaryDirectory(prefix="reliabilityd-demo-") as tmp:
        return asyncio.run(_run(Path(tmp), serve=serve))
