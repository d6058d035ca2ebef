"""Alert notifications: their content, the sinks, and at-least-once delivery.

A transition is decided once (compare-and-set in Redis) and, in the same
atomic step, queued in one outbox list per sink under the suite's hash tag.
Each outbox is drained by whichever daemon holds its lease, head first, and
an entry leaves the outbox only after its sink accepted it. A sink that is
down is retried with capped backoff in its own task, so it never blocks
ingest or the other sinks, and a daemon that dies mid-delivery leaves the
entry for the next lease holder. Receivers can drop the rare repeat by the
notification ``id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote

import aiomqtt
import msgspec
import redis.exceptions

from reliabilityd.alerts import AlertState, Rule
from reliabilityd.config import Config
from reliabilityd.errors import ReliabilitydError
from reliabilityd.estimate import Estimate
from reliabilityd.logs import emit
from reliabilityd.lottery import LotteryCase
from reliabilityd.mqtt import Publisher
from reliabilityd.snapshot import Snapshot, rfc3339
from reliabilityd.store import Store

LEASE_TTL = 30.0
BACKOFF_MAX = 20.0


class SinkError(ReliabilitydError):
    """A sink refused or could not take a notification; it will be retried."""


class Notification(msgspec.Struct, frozen=True, kw_only=True):
    """What a person paged needs: the numbers, the thresholds, where to look first."""

    id: str
    rule: str
    suite: str
    metric: str
    k: int
    state: Literal["firing", "resolved"]
    repeat: bool = False
    reason: str | None
    value: float | None
    ci_low: float | None
    ci_high: float | None
    below: float
    resolve_above: float
    tasks: int
    runs: int
    started_at: str | None
    ended_at: str | None = None
    severity: str
    lottery: list[LotteryCase]
    at: str
    generator_url: str | None = None


def parse_time(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def generator_url(config: Config, suite: str, rule: str) -> str | None:
    if not config.external_url:
        return None
    base = config.external_url.rstrip("/")
    return f"{base}/suites/{quote(suite, safe='')}?rule={quote(rule, safe='')}"


def _pct(x: float | None) -> str:
    return "UNKNOWN" if x is None else f"{x:.3f}"


def describe(n: Notification) -> str:
    label = n.metric.replace("k", str(n.k))
    head = (
        f"{label} of suite {n.suite!r} = {_pct(n.value)}, "
        f"CI [{_pct(n.ci_low)}, {_pct(n.ci_high)}] over {n.tasks} tasks ({n.runs}+ runs each)"
    )
    if n.state == "resolved":
        return f"{head}: lower bound back at or above {n.resolve_above:.3f}"
    if n.reason == "stale":
        return f"{head}: no counted trial for too long (stale suite)"
    if n.reason == "unknown":
        return f"{head}: the value is UNKNOWN (too few trials for k={n.k})"
    return f"{head}: lower bound below {n.below:.3f}"


def alertmanager_alert(n: Notification, *, now: float, resend_interval: float) -> dict[str, Any]:
    """One alert in the shape of Alertmanager's POST /api/v2/alerts body."""
    alert: dict[str, Any] = {
        "labels": {
            "alertname": n.rule,
            "suite": n.suite,
            "metric": n.metric,
            "k": str(n.k),
            "severity": n.severity,
        },
        "annotations": {
            "summary": describe(n),
            "value": _pct(n.value),
            "ci_low": _pct(n.ci_low),
            "ci_high": _pct(n.ci_high),
            "below": f"{n.below:.3f}",
            "resolve_above": f"{n.resolve_above:.3f}",
            "tasks": str(n.tasks),
            "runs": str(n.runs),
            "lottery_cases": ", ".join(f"{c.task} ({c.c}/{c.n})" for c in n.lottery) or "none",
        },
    }
    if n.started_at:
        alert["startsAt"] = n.started_at
    if n.state == "resolved":
        alert["endsAt"] = n.ended_at or n.at
    else:
        # A firing alert that stops being re-sent resolves by itself after
        # this, as with Prometheus: a dead reliabilityd cannot page forever.
        alert["endsAt"] = rfc3339(now + 4 * resend_interval)
    if n.generator_url:
        alert["generatorURL"] = n.generator_url
    return alert


def _post_json(url: str, body: bytes, timeout: float) -> None:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the response's socket
        raise SinkError(f"{url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SinkError(f"{url} unreachable: {exc}") from None
    if not 200 <= status < 300:
        raise SinkError(f"{url} answered HTTP {status}")


async def post_json(url: str, body: bytes, seconds: float) -> None:
    """POST JSON from a worker thread, giving up after `seconds`."""
    await asyncio.to_thread(_post_json, url, body, seconds)


Sink = Callable[[bytes], Awaitable[None]]


class Notifier:
    """Builds notifications and drains the outboxes to the configured sinks."""

    def __init__(
        self, config: Config, store: Store, publisher: Publisher | None, instance: str
    ) -> None:
        self.config = config
        self.store = store
        self.publisher = publisher
        self.instance = instance
        self.sinks: dict[str, Sink] = {}
        if publisher is not None:
            self.sinks["mqtt"] = self._to_mqtt
        if config.sinks.redis.enabled:
            self.sinks["redis"] = self._to_redis
        if config.sinks.alertmanager.url:
            self.sinks["alertmanager"] = self._to_alertmanager
        if config.sinks.webhook.url:
            self.sinks["webhook"] = self._to_webhook
        self._drains: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._resends: set[asyncio.Task[None]] = set()
        self._next_resend_check: dict[tuple[str, str], float] = {}

    # --- content ----------------------------------------------------------

    def build(
        self,
        *,
        rule: Rule,
        suite: str,
        state: AlertState,
        estimate: Estimate,
        snap: Snapshot,
        now: float,
        repeat: bool = False,
    ) -> Notification:
        if state.state not in ("firing", "resolved"):
            raise ValueError(f"only firing and resolved states notify, not {state.state!r}")
        return Notification(
            id=f"{suite}/{rule.name}/{state.seq}",
            rule=rule.name,
            suite=suite,
            metric=rule.metric,
            k=rule.k,
            state=state.state,
            repeat=repeat,
            reason=state.reason,
            value=estimate.value,
            ci_low=estimate.ci_low,
            ci_high=estimate.ci_high,
            below=rule.below,
            resolve_above=rule.resolve_at,
            tasks=estimate.tasks,
            runs=estimate.runs,
            started_at=None if state.started_at is None else rfc3339(state.started_at),
            ended_at=None if state.ended_at is None else rfc3339(state.ended_at),
            severity=rule.severity,
            lottery=snap.lottery.rows[:3],
            at=rfc3339(now),
            generator_url=generator_url(self.config, suite, rule.name),
        )

    # --- sinks ------------------------------------------------------------

    async def _to_mqtt(self, payload: bytes) -> None:
        assert self.publisher is not None
        n = msgspec.json.decode(payload, type=Notification)
        topic = f"{self.config.sinks.mqtt.topic}/{n.suite}/{n.rule}"
        await self.publisher.send(topic, payload, retain=True)

    async def _to_redis(self, payload: bytes) -> None:
        await self.store.append_alert_history(
            self.config.alerts_key, payload, self.config.sinks.redis.maxlen
        )

    async def _to_alertmanager(self, payload: bytes) -> None:
        n = msgspec.json.decode(payload, type=Notification)
        am = self.config.sinks.alertmanager
        body = msgspec.json.encode(
            [alertmanager_alert(n, now=time.time(), resend_interval=am.resend_interval)]
        )
        await post_json(am.url.rstrip("/") + "/api/v2/alerts", body, am.timeout)
        if n.state == "firing":
            # Just sent: the periodic re-send starts one interval from now.
            await self.store.client.set(
                self._resend_key(n), self.instance, px=int(am.resend_interval * 1000)
            )

    def _resend_key(self, n: Notification) -> str:
        return self.store.alert_key(n.suite, n.rule) + ":am-resend"

    async def _to_webhook(self, payload: bytes) -> None:
        hook = self.config.sinks.webhook
        await post_json(hook.url, payload, hook.timeout)

    # --- delivery ---------------------------------------------------------

    def kick(self, suite: str, rule: str, sink: str) -> None:
        """Make sure this daemon tries to drain that outbox (if it gets the lease)."""
        key = (suite, rule, sink)
        task = self._drains.get(key)
        if task is None or task.done():
            self._drains[key] = asyncio.create_task(self._drain(suite, rule, sink))

    async def _drain(self, suite: str, rule: str, sink: str) -> None:
        lease = self.store.outbox_key(suite, rule, sink) + ":lease"
        if not await self.store.lease(lease, self.instance, LEASE_TTL):
            return  # another daemon delivers this outbox
        backoff = 0.5
        try:
            while True:
                head = await self.store.outbox_head(suite, rule, sink)
                if head is None:
                    return
                try:
                    await asyncio.wait_for(self.sinks[sink](head), LEASE_TTL / 2)
                except (
                    SinkError,
                    aiomqtt.MqttError,
                    OSError,
                    TimeoutError,
                    redis.exceptions.RedisError,
                ) as exc:
                    emit(
                        logging.WARNING,
                        "sink_failed",
                        sink=sink,
                        suite=suite,
                        rule=rule,
                        error=exc,
                        retry_in=backoff,
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
                else:
                    await self.store.outbox_pop(suite, rule, sink, head)
                    backoff = 0.5
                if not await self.store.lease_keep(lease, self.instance, LEASE_TTL):
                    return  # lease lost (we stalled past it): the new holder goes on
        finally:
            # Best effort: an unreleased lease expires by itself.
            with contextlib.suppress(redis.exceptions.RedisError, OSError):
                await asyncio.shield(self.store.lease_release(lease, self.instance))

    def resend_firing(self, suite: str, rule: str, build: Callable[[], Notification]) -> None:
        """Re-send a firing alert to Alertmanager (its clients must, or it resolves).

        Checked a few times per ``resend_interval`` by this daemon, not every
        tick; the lease in ``_resend`` makes it once per interval across replicas.
        """
        if "alertmanager" not in self.sinks:
            return
        now = time.monotonic()
        if now < self._next_resend_check.get((suite, rule), 0.0):
            return
        self._next_resend_check[(suite, rule)] = (
            now + self.config.sinks.alertmanager.resend_interval / 4
        )
        task = asyncio.create_task(self._resend(build()))
        self._resends.add(task)
        task.add_done_callback(self._resends.discard)

    async def _resend(self, n: Notification) -> None:
        am = self.config.sinks.alertmanager
        if await self.store.outbox_head(n.suite, n.rule, "alertmanager") is not None:
            return  # a notification is still on its way; it counts as the send
        # One re-send per interval across all replicas.
        if not await self.store.lease(self._resend_key(n), self.instance, am.resend_interval):
            return
        try:
            await self._to_alertmanager(msgspec.json.encode(n))
        except SinkError as exc:
            emit(logging.WARNING, "alertmanager_resend_failed", rule=n.rule, error=exc)

    async def close(self) -> None:
        tasks = [*self._drains.values(), *self._resends]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
