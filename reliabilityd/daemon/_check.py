"""``reliabilityd check``: is this instance's daemon alive and ingesting?"""

from __future__ import annotations

import time

from reliabilityd.alerting.watchdog import describe
from reliabilityd.config import Config
from reliabilityd.daemon._provable import unprovable_rules
from reliabilityd.logs import redact
from reliabilityd.store import Store, StoreError, connect

__all__ = ["UNREACHABLE", "check"]

# The command line's exit code for "Redis unreachable or unusable"
# (reliabilityd.cli._common.EXIT_UNREACHABLE; the daemon layer cannot import it).
UNREACHABLE = 4


async def check(config: Config, *, where: str | None = None) -> int:
    """0 when this instance's heartbeat is fresh and its ingest is not paused, 1 when it is
    not, 4 when Redis itself is unreachable or unusable.

    ``where`` names the Redis asked in the unhealthy lines (default: its URL);
    neither ever shows the URL's credentials.
    """
    store = Store(
        connect(config.redis.url, cluster=config.redis.cluster, timeout=3.0), config.redis.prefix
    )
    asked = redact(where or config.redis.url)
    try:
        return await _check(config, store, asked)
    except StoreError as exc:
        print(redact(f"unhealthy: Redis unusable, ingest paused: {describe(exc)} ({asked})"))
        return UNREACHABLE
    finally:
        await store.client.aclose()


async def _check(config: Config, store: Store, where: str) -> int:
    instance = config.instance
    # A small write first: under OOM, READONLY or BUSY the daemon's ingest is
    # paused and it cannot even write its heartbeat; this names the reason.
    await store.admin.probe_write(instance)
    info = await store.admin.heartbeat_info(instance)
    age = None if info is None else max(0.0, time.time() - float(info.get("at", 0.0)))
    if info is None or age is None or age > config.daemon.heartbeat_ttl:
        print(f"unhealthy: no fresh heartbeat for instance {instance!r} in {where}")
        return 1
    if info.get("paused_since") is not None:
        paused = time.time() - float(info["paused_since"])
        print(
            f"unhealthy: instance {instance!r} has paused ingest for {paused:.0f} s: "
            f"{redact(str(info.get('redis_error')))}"
        )
        return 1
    print(f"healthy: instance {instance!r} beat {age:.1f} s ago")
    for line in _mqtt_notes(info.get("mqtt"), config.mqtt.client_id):
        print(line)
    for rule, found in await unprovable_rules(config, store):
        print(f"warning: {found.message(rule)}")
    return 0


def _mqtt_notes(watch: object, client_id: str) -> list[str]:
    """What ``check`` says of the broker session, from the heartbeat's ``mqtt`` part."""
    if not isinstance(watch, dict):
        return []
    notes = []
    lost, taken = watch.get("sessions_lost") or 0, watch.get("takeovers") or 0
    if lost:
        notes.append(
            f"warning: the broker had lost this instance's MQTT session on {lost} reconnect(s), "
            f"last {_ago(watch.get('session_lost_at'))}: the QoS 1 messages it had queued are "
            "gone (check the broker's persistence and mqtt.session_expiry)"
        )
    if taken:
        notes.append(
            f"warning: the MQTT session of client id {client_id!r} was taken over {taken} "
            f"time(s), last {_ago(watch.get('taken_over_at'))}: another client connects with "
            "this mqtt.client_id"
        )
    return notes


def _ago(at: object) -> str:
    return f"{time.time() - at:.0f} s ago" if isinstance(at, int | float) else "at an unknown time"
