"""The retained snapshot publisher's throughput beside aiomqtt awaiting each PUBACK.

5,000 retained QoS 1 messages of 1.5 KB (a snapshot's size), one a topic, to
a private mosquitto: the daemon's ``Publisher`` (``WINDOW`` in flight, their
PUBACKs awaited together) from its queue, and aiomqtt publishing the same
messages one awaited publish at a time (what a publisher without a window
does), alternately for a few rounds; each keeps its best wall time, with its
CPU. aiomqtt comes with the dev extra: without it the figure says so.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path

from reliabilityd.alerting.publisher import WINDOW, Publisher
from reliabilityd.config import MqttConfig
from reliabilityd.embedded.processes import Mosquitto, free_port

MESSAGES = 5000
PAYLOAD = b'{"pad": "' + b"y" * 1500 + b'"}'


async def _ours(port: int, rnd: int) -> tuple[float, float]:
    pub = Publisher(MqttConfig(url=f"mqtt://127.0.0.1:{port}", client_id="bench-pub"), "bench")
    stop = asyncio.Event()
    task = asyncio.create_task(pub.run(stop))
    try:
        # The publisher signals neither: its state polled, as a reader would.
        while pub._conn is None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(MESSAGES):
            pub.publish(f"bench/{rnd}/ours/{i}", PAYLOAD)
        while pub._pending:  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        stop.set()
        await task


async def _aiomqtt(port: int, rnd: int) -> tuple[float, float]:
    import aiomqtt

    async with aiomqtt.Client("127.0.0.1", port, identifier="bench-aiomqtt") as client:
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(MESSAGES):
            await client.publish(f"bench/{rnd}/aiomqtt/{i}", PAYLOAD, qos=1, retain=True)
        return time.perf_counter() - wall, time.process_time() - cpu


async def figures(workdir: Path, rounds: int = 3) -> None:
    broker = Mosquitto("mosquitto", workdir / "publish", free_port())
    broker.workdir.mkdir(parents=True)
    broker.start()
    try:
        best: dict[str, tuple[float, float]] = {}
        have_aiomqtt = importlib.util.find_spec("aiomqtt") is not None
        for rnd in range(rounds):
            runs = [("ours", _ours)] + ([("aiomqtt", _aiomqtt)] if have_aiomqtt else [])
            for label, run in runs:
                got = await run(broker.port, rnd)
                if label not in best or got[0] < best[label][0]:
                    best[label] = got
        wall, cpu = best["ours"]
        print(
            f"the retained publisher, {MESSAGES:,} snapshots of {len(PAYLOAD):,} bytes at QoS 1"
            f" ({WINDOW} in flight): {MESSAGES / wall:7,.0f} a second, {cpu / MESSAGES * 1e6:5.1f}"
            " us CPU each"
        )
        if "aiomqtt" in best:
            base_wall, base_cpu = best["aiomqtt"]
            print(
                f"  aiomqtt, each publish awaited:                     {MESSAGES / base_wall:7,.0f}"
                f" a second, {base_cpu / MESSAGES * 1e6:5.1f} us CPU each"
                f"  (ours {base_wall / wall:.2f}x the rate, {cpu / base_cpu:.2f}x the CPU)"
            )
        else:
            print("  aiomqtt is not installed (pip install '.[dev]'): no baseline")
    finally:
        broker.stop()
