"""Whether this daemon can judge: Redis health, and the blind-daemon notice.

Alert states and outboxes live in Redis, so when Redis is unusable (down,
out of memory, read-only, busy) no rule can page. ``RedisHealth`` records
which of the daemon's Redis activities fail, since when and why; once they
have failed for ``daemon.blind_after`` seconds, ``BlindWatch`` sends a
``BlindNotice`` straight to the sinks that do not need Redis (Alertmanager,
webhook, MQTT), re-sends it to Alertmanager while it lasts, and sends the
resolved notice when Redis is usable again. For a daemon that is gone
altogether, the optional always-firing ``ReliabilitydWatchdog`` alert goes
to Alertmanager every ``resend_interval`` while the daemon can judge: route
it to a dead man's switch, whose silence then pages (README: Watchdog).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from reliabilityd.alerting.notify import BlindNotice, watchdog_alert
from reliabilityd.alerting.sinks import AlertmanagerSink, Sink, SinkError, attempt
from reliabilityd.backoff import Backoff
from reliabilityd.logs import RateLimited, emit
from reliabilityd.stats.snapshot import rfc3339

TICK = 0.25


def describe(exc: BaseException) -> str:
    """A Redis error as a person reads it: its class and Redis's own words."""
    text = str(exc).strip() or "no message"
    return f"{type(exc).__name__}: {text}"


class RedisHealth:
    """Which Redis activities (ingest, heartbeat) fail now, since when and why."""

    def __init__(self) -> None:
        self._failing: dict[str, tuple[float, str]] = {}

    def failed(self, what: str, exc: BaseException) -> None:
        since, _ = self._failing.get(what, (time.time(), ""))
        self._failing[what] = (since, describe(exc))

    def ok(self, what: str) -> None:
        self._failing.pop(what, None)

    @property
    def since(self) -> float | None:
        """When the oldest current failure began; None while Redis is usable."""
        return min((since for since, _ in self._failing.values()), default=None)

    @property
    def reason(self) -> str:
        return "; ".join(f"{what}: {why}" for what, (_, why) in sorted(self._failing.items()))


class BlindWatch:
    """Sends the blind notice to the Redis-free sinks, and its resolution."""

    def __init__(
        self,
        health: RedisHealth,
        sinks: dict[str, Sink],
        instance: str,
        *,
        blind_after: float,
        resend_interval: float,
        severity: str = "page",
        watchdog: bool = False,
    ) -> None:
        self.health = health
        self.instance = instance
        self.blind_after = blind_after
        self.severity = severity
        self.notice: BlindNotice | None = None  # the firing notice while blind
        self._undelivered: dict[str, BlindNotice] = {}
        self._retry: dict[str, tuple[float, Backoff]] = {}
        self._last_am_send = 0.0
        self._failures = RateLimited(10.0)
        self.sinks: dict[str, Sink] = {}
        self.configure(sinks, resend_interval=resend_interval, watchdog=watchdog)
        self._next_watchdog = 0.0

    def configure(self, sinks: dict[str, Sink], *, resend_interval: float, watchdog: bool) -> None:
        """The sinks to tell (at start, and on a reload): a sink no longer configured
        is forgotten, and one added gets the firing notice, if any."""
        before = set(self.sinks)
        self.sinks = {name: s for name, s in sinks.items() if not s.needs_redis}
        for name in list(self._undelivered):
            if name not in self.sinks:
                del self._undelivered[name]
                self._retry.pop(name, None)
        if self.notice is not None:
            for name in self.sinks.keys() - before:
                self._undelivered[name] = self.notice
        self.resend_interval = resend_interval
        am = self.sinks.get("alertmanager")
        self._watchdog = am if watchdog and isinstance(am, AlertmanagerSink) else None

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.tick(time.time())
            await self._deliver()
            await self._heartbeat_alert()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK)

    def tick(self, now: float) -> None:
        """Decide whether a notice (firing or resolved) is due."""
        since = self.health.since
        if self.notice is None and since is not None and now - since >= self.blind_after:
            self.notice = BlindNotice(
                id=f"blind/{self.instance}/{since:.3f}",
                instance=self.instance,
                state="firing",
                reason=self.health.reason,
                since=rfc3339(since),
                severity=self.severity,
                at=rfc3339(now),
            )
            emit(logging.ERROR, "blind", since=self.notice.since, reason=self.notice.reason)
            self._queue(self.notice)
        elif self.notice is not None and since is None:
            resolved = BlindNotice(
                id=self.notice.id + "/resolved",
                instance=self.instance,
                state="resolved",
                reason=self.notice.reason,
                since=self.notice.since,
                ended_at=rfc3339(now),
                severity=self.severity,
                at=rfc3339(now),
            )
            emit(logging.WARNING, "blind_resolved", since=resolved.since)
            self.notice = None
            self._queue(resolved)
        elif (
            self.notice is not None
            and "alertmanager" in self.sinks
            and "alertmanager" not in self._undelivered
            and now - self._last_am_send >= self.resend_interval
        ):
            # Alertmanager resolves an alert its client stops re-sending.
            self._undelivered["alertmanager"] = self.notice

    async def _heartbeat_alert(self) -> None:
        """The always-firing watchdog alert, only while this daemon can judge."""
        now = time.time()
        if self._watchdog is None or self.health.since is not None or now < self._next_watchdog:
            return
        self._next_watchdog = now + self.resend_interval
        alert = watchdog_alert(self.instance, now=now, resend_interval=self.resend_interval)
        try:
            await asyncio.wait_for(self._watchdog.send_alert(alert), 15.0)
        except (SinkError, TimeoutError, OSError) as exc:
            self._next_watchdog = now + min(5.0, self.resend_interval)
            self._failures.emit(logging.WARNING, "watchdog_alert_failed", error=exc)

    def _queue(self, notice: BlindNotice) -> None:
        for name in self.sinks:
            self._undelivered[name] = notice  # a newer notice replaces an undelivered one
            self._retry.pop(name, None)

    async def _deliver(self) -> None:
        now = time.monotonic()
        for name, notice in list(self._undelivered.items()):
            due, pace = self._retry.get(name, (0.0, Backoff(0.5, 30.0)))
            if now < due:
                continue
            failed = await attempt(self.sinks[name], notice, 15.0)
            if failed is not None:
                self._retry[name] = (now + pace.next_delay(), pace)
                self._failures.emit(logging.WARNING, "blind_notice_failed", sink=name, error=failed)
                continue
            if self._undelivered.get(name) is notice:
                del self._undelivered[name]
            self._retry.pop(name, None)
            if name == "alertmanager":
                self._last_am_send = time.time()
