"""The one outbox drainer: at-least-once delivery of decided transitions.

A transition is decided once (compare-and-set in Redis) and, in the same
atomic step, queued in one outbox list per sink under the suite's hash tag.
Each outbox is drained by whichever daemon holds its lease, head first, and
an entry leaves the outbox only after its sink accepted it. A sink that is
down is retried with capped backoff in its own task, so it never blocks
ingest or the other sinks; a daemon that dies mid-delivery leaves the entry
for the next lease holder. An entry that does not decode (written by another
version, say), or that its sink refuses for good (``SinkRefused``: an MQTT
topic the broker will not take), can never be delivered: it is moved to the
outbox dead-letter stream with its reason, and the outbox goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import msgspec

from reliabilityd.alerting.notify import Notification
from reliabilityd.alerting.sinks import Sink, SinkError, SinkRefused, attempt
from reliabilityd.backoff import Backoff
from reliabilityd.config import Config
from reliabilityd.logs import RateLimited, emit, kv, log
from reliabilityd.store import Store, StoreError

LEASE_TTL = 30.0
BACKOFF_MAX = 20.0
# On stop, a delivery in flight may finish (and leave its outbox) this long,
# so a restart does not send it again.
CLOSE_GRACE = 1.0
OUTBOX_DEADLETTER_MAXLEN = 10_000

_decoder = msgspec.json.Decoder(Notification)


class Outbox:
    """Drains the outboxes of (suite, rule, sink) and re-sends firing alerts to Alertmanager."""

    def __init__(self, config: Config, store: Store, sinks: dict[str, Sink], instance: str) -> None:
        self.store = store
        self.configure(config, sinks)
        self.instance = instance
        self._drains: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._resends: set[asyncio.Task[None]] = set()
        self._next_resend_check: dict[tuple[str, str], float] = {}
        self._failures = RateLimited()
        self._closing = asyncio.Event()

    def configure(self, config: Config, sinks: dict[str, Sink]) -> None:
        """The sinks to deliver to (at start, and on a reload). The outbox of a sink
        no longer configured keeps its entries in Redis, undelivered, until it is again."""
        self.config = config
        self.sinks = sinks

    def kick(self, suite: str, rule: str, sink: str) -> None:
        """Make sure this daemon tries to drain that outbox (if it gets the lease)."""
        if self._closing.is_set():
            return
        key = (suite, rule, sink)
        task = self._drains.get(key)
        if task is None or task.done():
            self._drains[key] = asyncio.create_task(self._drain_safely(suite, rule, sink))

    async def _drain_safely(self, suite: str, rule: str, sink: str) -> None:
        try:
            await self._drain(suite, rule, sink)
        except StoreError as exc:
            # The next evaluation sees the outbox still full and kicks it again.
            self._failures.emit(logging.WARNING, "outbox_redis_error", sink=sink, error=exc)
        except Exception:
            log.exception("%s", kv("outbox_failed", suite=suite, rule=rule, sink=sink))

    async def _drain(self, suite: str, rule: str, sink: str) -> None:
        alerts = self.store.alerts
        if not await alerts.outbox_lease(suite, rule, sink, self.instance, LEASE_TTL):
            return  # another daemon delivers this outbox
        pace = Backoff(0.5, BACKOFF_MAX)
        try:
            while not self._closing.is_set():
                head = await alerts.outbox_head(suite, rule, sink)
                if head is None:
                    return
                try:
                    note = _decoder.decode(head)
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    reason = f"undecodable outbox entry: {exc}"
                    emit(logging.WARNING, "outbox_entry_set_aside", sink=sink, reason=reason)
                    await alerts.outbox_set_aside(
                        suite, rule, sink, head, reason, maxlen=OUTBOX_DEADLETTER_MAXLEN
                    )
                    continue
                target = self.sinks.get(sink)
                if target is None:
                    return  # no longer configured (a reload): the entries wait in Redis
                failed = await attempt(target, note, LEASE_TTL / 2)
                if isinstance(failed, SinkRefused):
                    # Refused for good (a topic the broker will never take):
                    # retrying it at the head would block this outbox for ever.
                    reason = str(failed)
                    emit(logging.WARNING, "outbox_entry_set_aside", sink=sink, reason=reason)
                    await alerts.outbox_set_aside(
                        suite, rule, sink, head, reason, maxlen=OUTBOX_DEADLETTER_MAXLEN
                    )
                    continue
                if failed is not None:
                    delay = pace.next_delay()
                    emit(
                        logging.WARNING,
                        "sink_failed",
                        sink=sink,
                        suite=suite,
                        rule=rule,
                        error=failed,
                        retry_in=round(delay, 2),
                    )
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._closing.wait(), delay)
                else:
                    if sink == "alertmanager" and note.state == "firing":
                        # Just sent: the periodic re-send starts one interval from now.
                        # Set before the head leaves the outbox: a replica's re-send
                        # check sees either the head or this timer, never neither.
                        am = self.config.sinks.alertmanager
                        await alerts.resend_wait(suite, rule, self.instance, am.resend_interval)
                    await alerts.outbox_pop(suite, rule, sink, head)
                    pace.reset()
                if not await alerts.outbox_lease_keep(suite, rule, sink, self.instance, LEASE_TTL):
                    return  # lease lost (we stalled past it): the new holder goes on
        finally:
            # Also when cancelled (a stopping daemon): the next daemon then drains
            # at once instead of waiting out the lease. Best effort: an unreleased
            # lease expires by itself.
            with contextlib.suppress(StoreError):
                await alerts.outbox_lease_release(suite, rule, sink, self.instance)

    def resend_firing(self, suite: str, rule: str, build: Callable[[], Notification]) -> None:
        """Re-send a firing alert to Alertmanager (its clients must, or it resolves).

        Checked a few times per ``resend_interval`` by this daemon, not every
        tick; the lease in ``_resend`` makes it once per interval across replicas.
        """
        if "alertmanager" not in self.sinks or self._closing.is_set():
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
        try:
            if await self.store.alerts.outbox_head(n.suite, n.rule, "alertmanager") is not None:
                return  # a notification is still on its way; it counts as the send
            # One re-send per interval across all replicas.
            if not await self.store.alerts.resend_turn(
                n.suite, n.rule, self.instance, am.resend_interval
            ):
                return
            am_sink = self.sinks.get("alertmanager")
            if am_sink is not None:
                await am_sink.send(n)
        except (SinkError, StoreError) as exc:
            emit(logging.WARNING, "alertmanager_resend_failed", rule=n.rule, error=exc)

    async def close(self) -> None:
        """Let deliveries in flight finish (briefly), then stop every drain."""
        self._closing.set()
        tasks = [t for t in (*self._drains.values(), *self._resends) if not t.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_GRACE)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
