"""The soak's producers: a foreign MQTT publisher (paho-mqtt), POST /v1/trials, POST /v1/logs.

Each one enters a trial in the ledger when it first sends it and marks it
acknowledged when the edge says so (a PUBACK; a 200 after the commit). paho
keeps a QoS 1 message until its PUBACK and sends it again after a reconnect
(a broker restart): a possible duplicate the daemon must count once. The
HTTP producers retry a 503 and a broken connection with the same body. All
three also repeat, now and then, something already acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from typing import Any

import aiohttp
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion

from benchmarks.soak._ledger import MODELS, Ledger, Trial
from benchmarks.soak._plan import BATCH, RESEND_SHARE

TASKS = 40
TOPIC = "reliability/trials"
OTLP_EVENT = "gen_ai.evaluation.result"
# Acknowledged payloads a producer may repeat: the last ones, at least a
# second old (so the first send has had a chance to commit), and younger than
# a third of the dedup TTL (so the repeat always meets the dedup record).
RECENT = 500
RESEND_AFTER = 1.0


class Trials:
    """New trials of some suites: a skill per task, a few errors and skips, unique ids."""

    def __init__(self, rng: random.Random, source: str, suites: tuple[str, ...], sliced: str):
        self.rng = rng
        self.source = source
        self.suites = suites
        self.sliced = sliced
        self.made = 0
        self.skill = {(s, t): rng.betavariate(2, 0.8) for s in suites for t in range(TASKS)}

    def __call__(self, suite: str | None = None) -> Trial:
        suite = suite or self.rng.choice(self.suites)
        task = self.rng.randrange(TASKS)
        self.made += 1
        u = self.rng.random()
        if u < 0.03:
            outcome = "error"
        elif u < 0.05:
            outcome = "skip"
        else:
            outcome = "pass" if self.rng.random() < self.skill[suite, task] else "fail"
        model = self.rng.choice(MODELS) if suite == self.sliced else None
        return Trial(suite, f"task {task}", f"{self.source}-{self.made}", outcome, model)


class Recent:
    """Acknowledged sends, to repeat on purpose within the dedup TTL."""

    def __init__(self, rng: random.Random, dedup_ttl: int) -> None:
        self.rng = rng
        self.horizon = dedup_ttl / 3
        self.items: deque[tuple[float, bytes, list[Trial]]] = deque(maxlen=RECENT)

    def add(self, body: bytes, trials: list[Trial]) -> None:
        self.items.append((time.monotonic(), body, trials))

    def pick(self) -> tuple[bytes, list[Trial]] | None:
        now = time.monotonic()
        while self.items and now - self.items[0][0] > self.horizon:
            self.items.popleft()
        ready = [(body, trials) for at, body, trials in self.items if now - at >= RESEND_AFTER]
        return self.rng.choice(ready) if ready else None


class Paced:
    """A steady pace: ``wait`` sleeps until the next tick of ``rate`` per second."""

    def __init__(self, rate: float) -> None:
        self.period = 1 / rate
        self.next = time.monotonic()

    async def wait(self) -> None:
        self.next = max(self.next + self.period, time.monotonic() - 5 * self.period)
        await asyncio.sleep(max(0.0, self.next - time.monotonic()))


class MqttProducer:
    """paho-mqtt at QoS 1 over MQTT 3.1.1: one event per message, a fifth of them arrays."""

    source = "mqtt"

    def __init__(
        self, port: int, ledger: Ledger, rng: random.Random, rate: float, dedup_ttl: int
    ) -> None:
        self.port = port
        self.ledger = ledger
        self.rng = rng
        self.rate = rate
        self.trials = Trials(
            rng, "mqtt", ("soak-mqtt-0", "soak-mqtt-1", "soak-sliced"), "soak-sliced"
        )
        self.recent = Recent(rng, dedup_ttl)
        # mid -> what the message carries, until its PUBACK; the mids paho's network
        # thread saw acknowledged (a deque: appends are atomic, no lock is shared
        # with paho, whose own lock is held while it calls on_publish).
        self.pending: dict[int, tuple[bytes, list[Trial], bool]] = {}
        self.acked: deque[int] = deque()
        self.connects = 0
        self.problems: list[str] = []
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id="soak-publisher",
            protocol=MQTTProtocolVersion.MQTTv311,
            clean_session=True,
        )
        self.client.max_inflight_messages_set(100)
        self.client.reconnect_delay_set(1, 2)
        self.client.on_connect = self._connected
        self.client.on_publish = self._published

    # paho's network thread calls these two.
    def _connected(self, *_: Any) -> None:
        self.connects += 1

    def _published(self, _client: Any, _userdata: Any, mid: int, *_: Any) -> None:
        self.acked.append(mid)

    def start(self) -> None:
        self.client.connect_async("127.0.0.1", self.port, keepalive=10)
        self.client.loop_start()

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def _publish(self, body: bytes, trials: list[Trial], topic: str, resend: bool) -> bool:
        # paho keeps a QoS 1 message published while it is disconnected (rc NO_CONN)
        # and sends it once connected; only a full queue refuses it.
        info = self.client.publish(topic, body, qos=1)
        if info.rc == MQTTErrorCode.MQTT_ERR_QUEUE_SIZE:
            return False
        self.pending[info.mid] = (body, trials, resend)
        return True

    def sweep(self) -> None:
        """Move what the broker acknowledged from pending to the ledger."""
        while self.acked:
            mid = self.acked.popleft()
            item = self.pending.pop(mid, None)
            if item is None:  # the marker's, or a PUBACK paho passed on twice
                continue
            body, trials, resend = item
            self.ledger.ack(trials, self.source, resend=resend)
            if not resend:
                self.recent.add(body, trials)

    def step(self) -> None:
        again = self.recent.pick() if self.rng.random() < RESEND_SHARE else None
        if again is not None:
            body, trials = again
            self._publish(body, trials, f"{TOPIC}/{trials[0].suite}", resend=True)
            return
        if self.rng.random() < 0.2:
            trials = [self.trials() for _ in range(self.rng.randint(2, 5))]
            body = json.dumps([t.wire() for t in trials]).encode()
            topic = f"{TOPIC}/mixed"
        else:
            trials = [self.trials()]
            body = json.dumps(trials[0].wire()).encode()
            topic = f"{TOPIC}/{trials[0].suite}"
        if self._publish(body, trials, topic, resend=False):
            for t in trials:
                self.ledger.add(t, self.source)

    async def run(self, until: float) -> None:
        pace = Paced(self.rate)
        while time.monotonic() < until:
            self.sweep()
            self.step()
            await pace.wait()

    async def drain(self, within: float) -> None:
        """Until every message has its PUBACK; TimeoutError past ``within`` seconds."""
        end = time.monotonic() + within
        while True:
            self.sweep()
            if not self.pending:
                return
            if time.monotonic() > end:
                raise TimeoutError(f"{len(self.pending)} MQTT messages never acknowledged")
            await asyncio.sleep(0.2)

    def publish_marker(self, trial: Trial) -> paho.MQTTMessageInfo:
        return self.client.publish(f"{TOPIC}/{trial.suite}", json.dumps(trial.wire()), qos=1)


class HttpProducer:
    """POST /v1/trials: BATCH events a request, with the bearer token; a 503 is retried."""

    source = "http"
    path = "/v1/trials"
    suites: tuple[str, ...] = ("soak-http", "soak-sliced")
    content_type = "application/json"

    def __init__(
        self,
        base: str,
        token: str,
        ledger: Ledger,
        rng: random.Random,
        rate: float,
        *,
        dedup_ttl: int,
    ) -> None:
        self.url = base + self.path
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": self.content_type}
        self.ledger = ledger
        self.rng = rng
        self.rate = rate
        self.trials = Trials(rng, self.source, self.suites, "soak-sliced")
        self.recent = Recent(rng, dedup_ttl)
        self.statuses: dict[int, int] = {}
        self.retries = 0
        self.problems: list[str] = []

    def body(self, trials: list[Trial]) -> bytes:
        return json.dumps([t.wire() for t in trials]).encode()

    def answer_problem(self, answer: bytes, trials: list[Trial]) -> str | None:
        """What is wrong with a 200's body, None when it accepted every element."""
        doc = json.loads(answer)
        if doc.get("accepted") != len(trials) or doc.get("rejected"):
            return f"200 accepted {doc.get('accepted')} of {len(trials)}: {answer[:300]!r}"
        return None

    async def _post(self, http: aiohttp.ClientSession, body: bytes, trials: list[Trial]) -> bool:
        """Send until a 200 (True); False after five answers that are neither 200 nor 503."""
        odd = 0
        while True:
            try:
                async with http.post(
                    self.url, data=body, headers=self.headers, timeout=aiohttp.ClientTimeout(60)
                ) as resp:
                    answer = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.retries += 1
                self.statuses[0] = self.statuses.get(0, 0) + 1
                if len(self.problems) < 20 and not isinstance(exc, aiohttp.ClientConnectionError):
                    self.problems.append(f"{self.path}: {exc!r}")
                await asyncio.sleep(0.5)
                continue
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status == 200:
                problem = self.answer_problem(answer, trials)
                if problem is not None:
                    self.problems.append(f"{self.path}: {problem}")
                return True
            if status == 503:
                self.retries += 1
                await asyncio.sleep(0.5)
                continue
            self.problems.append(f"{self.path}: {status}: {answer[:300]!r}")
            odd += 1
            if odd >= 5:
                return False
            await asyncio.sleep(1.0)

    async def run(self, until: float) -> None:
        pace = Paced(self.rate)
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < until:
                again = self.recent.pick() if self.rng.random() < RESEND_SHARE else None
                if again is not None:
                    body, trials = again
                    if await self._post(http, body, trials):
                        self.ledger.ack(trials, self.source, resend=True)
                else:
                    trials = [self.trials() for _ in range(BATCH)]
                    body = self.body(trials)
                    for t in trials:
                        self.ledger.add(t, self.source)
                    if await self._post(http, body, trials):
                        self.ledger.ack(trials, self.source)
                        self.recent.add(body, trials)
                await pace.wait()


def _attribute(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


class OtlpProducer(HttpProducer):
    """POST /v1/logs: OTLP/JSON ``gen_ai.evaluation.result`` records (docs/opentelemetry.md).

    The suite is the resource's ``service.name``, the task the evaluation
    name, the trial the response id; the verdict a label (pass, fail, skip)
    or, for an error, an ``error.type`` attribute.
    """

    source = "otlp"
    path = "/v1/logs"
    suites = ("soak-otlp",)

    def body(self, trials: list[Trial]) -> bytes:
        records = []
        for t in trials:
            attributes = [
                _attribute("gen_ai.evaluation.name", t.task),
                _attribute("gen_ai.response.id", t.trial),
            ]
            if t.outcome == "error":
                attributes.append(_attribute("error.type", "timeout"))
            else:
                attributes.append(_attribute("gen_ai.evaluation.score.label", t.outcome))
            records.append(
                {
                    "timeUnixNano": str(time.time_ns()),
                    "eventName": OTLP_EVENT,
                    "attributes": attributes,
                }
            )
        service = {"attributes": [_attribute("service.name", trials[0].suite)]}
        doc = {"resourceLogs": [{"resource": service, "scopeLogs": [{"logRecords": records}]}]}
        return json.dumps(doc).encode()

    def answer_problem(self, answer: bytes, trials: list[Trial]) -> str | None:
        partial = json.loads(answer or b"{}").get("partialSuccess") or {}
        if int(partial.get("rejectedLogRecords", 0)):
            return f"200 with rejected records: {answer[:300]!r}"
        return None
