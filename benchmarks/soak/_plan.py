"""The soak's schedule and limits: fault intervals, the dedup TTL and the warm point,
scaled to the duration so a ten-minute run meets every fault at least once."""

from __future__ import annotations

import math
from dataclasses import dataclass

# The defaults of a two-hour run: a Redis restart and a broker restart every
# half hour each (the broker's half a period before Redis's), a SIGHUP every
# three minutes.
RESTART_EVERY = 1800.0
RELOAD_EVERY = 180.0
# Every fourth SIGHUP finds a file that must be refused.
BAD_RELOAD_EVERY = 4
# The dedup TTL bounds the records Redis holds; a short one lets them cycle
# many times in a run. Between these bounds, a twentieth of the run.
MIN_DEDUP_TTL = 60
MAX_DEDUP_TTL = 300

# Growth allowed from the warm point to the end, the larger of an absolute
# and a relative bound. The daemon's RSS: a leak of 300 bytes per event
# passes 16 MiB in ten minutes at the default rates.
RSS_GROWTH_BYTES = 16 << 20
RSS_GROWTH_SHARE = 0.15
# Redis once the dedup records have cycled: the counts of a fixed set of
# tasks and capped streams stay flat, the history strings grow until their
# tiers are full (the 10 s tier within an hour: at most 7.2 KB per series and
# k; the minute tier 1.2 KB per series and k an hour), and the dedup records
# follow the steady rate. Dedup records that never expired
# would pass 1 MiB in under five minutes at the default rates.
REDIS_GROWTH_BYTES = 1 << 20
REDIS_GROWTH_SHARE = 0.25

# The steady load: MQTT messages per second (a fifth are arrays of 2 to 5
# events), HTTP and OTLP requests per second of BATCH events or records each.
MQTT_RATE = 30.0
HTTP_RATE = 2.0
OTLP_RATE = 1.0
BATCH = 10
# A share of MQTT messages and of HTTP and OTLP requests that repeat one
# already acknowledged, on purpose.
RESEND_SHARE = 0.05


@dataclass(frozen=True)
class Plan:
    seconds: float
    reload_every: float
    redis_restart_every: float
    broker_restart_every: float
    dedup_ttl: int
    # The first time the end is compared with: the dedup records written in
    # the first seconds have expired twice over, and a quarter of the run is over.
    warm_at: float
    sample_every: float
    report_every: float
    mqtt_rate: float = MQTT_RATE
    http_rate: float = HTTP_RATE
    otlp_rate: float = OTLP_RATE

    @property
    def session_expiry(self) -> int:
        """The daemon's MQTT session expiry: the config requires it under the dedup TTL."""
        return self.dedup_ttl // 2

    def times(self, every: float, offset: float = 0.0) -> list[float]:
        """Seconds into the run at which a fault recurring ``every`` falls, before the end."""
        out, t = [], offset + every
        while t < self.seconds - 1:
            out.append(t)
            t += every
        return out

    @property
    def redis_restarts(self) -> list[float]:
        return self.times(self.redis_restart_every)

    @property
    def broker_restarts(self) -> list[float]:
        return self.times(self.broker_restart_every, -self.broker_restart_every / 2)

    @property
    def reloads(self) -> list[float]:
        return self.times(self.reload_every)


def plan_for(
    seconds: float,
    *,
    restart_every: float | None = None,
    reload_every: float | None = None,
    dedup_ttl: int | None = None,
    rate: float = 1.0,
) -> Plan:
    """The plan of a run of ``seconds``; ``rate`` scales every producer's pace."""
    restart = restart_every or min(RESTART_EVERY, seconds / 3)
    reload = reload_every or min(RELOAD_EVERY, seconds / 10)
    ttl = dedup_ttl or int(min(MAX_DEDUP_TTL, max(MIN_DEDUP_TTL, seconds // 20)))
    # A bucket of records lives its width (a quarter of the TTL) past the TTL.
    cycle = 2 * (ttl + math.ceil(ttl / 4))
    return Plan(
        seconds=seconds,
        reload_every=reload,
        redis_restart_every=restart,
        broker_restart_every=restart,
        dedup_ttl=ttl,
        warm_at=min(max(cycle, seconds / 4), seconds * 0.75),
        sample_every=min(30.0, max(5.0, seconds / 120)),
        report_every=min(300.0, max(30.0, seconds / 20)),
        mqtt_rate=MQTT_RATE * rate,
        http_rate=HTTP_RATE * rate,
        otlp_rate=OTLP_RATE * rate,
    )


def allowed_growth(warm: float, absolute: int, share: float) -> float:
    """The growth allowed past ``warm``: the larger of the two bounds."""
    return max(float(absolute), warm * share)
