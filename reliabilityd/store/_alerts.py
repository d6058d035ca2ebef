"""Alerting's records: rule states by compare-and-set, outboxes and their drain leases,
the Alertmanager re-send timer, the alert history stream.

The evaluator and the outbox drainer call these, and never name a key
themselves. A stored state that does not decode (another version wrote it)
comes back as ``Undecodable`` (``_documents``) with its sequence number, so
the caller can log it and overwrite it by compare-and-set instead of stopping.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from reliabilityd.rules import AlertState
from reliabilityd.rules.canary import CanaryView
from reliabilityd.stats import history
from reliabilityd.stats.history import Transition
from reliabilityd.store._base import Redis
from reliabilityd.store._documents import Undecodable, alert_state_of
from reliabilityd.store._errors import boundary
from reliabilityd.store._scripts import ALERT_CAS, LEASE, OUTBOX_POP
from reliabilityd.store.keys import Keys, Series


class Cas(msgspec.Struct, frozen=True):
    """How a compare-and-set went: won, or refused because the state or snapshot moved on."""

    won: bool
    stale_snapshot: bool = False


# A canary's difference over time: one point per minute (the last comparison of that
# minute), a day of them kept.
CANARY_POINT_SECONDS = 60
CANARY_POINTS_KEPT = 1440
CanaryPoint = tuple[float, float | None, float | None, float | None]
_canary_view = msgspec.json.Decoder(CanaryView)
_canary_point = msgspec.msgpack.Decoder(tuple[float, float | None, float | None, float | None])


class Baseline(msgspec.Struct, frozen=True):
    """Every task's (n, c) as they stood when a rule's latest breach began at ``at``."""

    at: float
    tasks: dict[str, tuple[int, int]]


@boundary
class Alerts:
    """Alert states, outboxes and leases."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def _alert_key(self, suite: str, rule: str) -> str:
        return self.keys.alert(suite, rule)

    def _outbox_key(self, suite: str, rule: str, sink: str) -> str:
        return self.keys.outbox(suite, rule, sink)

    async def alert_states(
        self, pairs: Sequence[tuple[str, str]]
    ) -> list[AlertState | Undecodable]:
        """The stored state of each (suite, rule), in one round trip: inactive when none is
        stored, ``Undecodable`` when the stored one does not decode."""
        if not pairs:
            return []
        keys = [self._alert_key(suite, rule) for suite, rule in pairs]
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(key, ["seq", "snap", "doc"])
        return [
            alert_state_of(key, *fields)
            for key, fields in zip(keys, await pipe.execute(), strict=True)
        ]

    async def alert_cas(
        self,
        suite: str,
        rule: str,
        *,
        expected_seq: int,
        new: AlertState,
        notification: bytes | None,
        sinks: Sequence[str],
        transition: Transition | None = None,
        breach_started: float | None = None,
        slice: str | None = None,
    ) -> Cas:
        """Store ``new`` if the stored seq is still ``expected_seq`` and ``new`` rests on a
        snapshot at least as new as the stored state's; queue the notification.

        ``transition`` (a state change) is recorded on the series' history (the
        suite's, or with ``slice`` the slice's, whose rule it is) in the same
        call, so it is recorded exactly when the state is stored.
        ``breach_started``: this transition starts a breach at that time; every
        task's counts of the series are copied into the rule's baseline in the
        same call.
        """
        keys = [
            self._alert_key(suite, rule),
            self.keys.transitions(self.keys.snapshot(suite, slice)),
            self.keys.series(Series(suite, slice), "tasks"),
            self.keys.baseline(suite, rule),
            *(self._outbox_key(suite, rule, s) for s in sinks),
        ]
        doc = msgspec.json.encode(msgspec.structs.replace(new, seq=expected_seq + 1))
        won = int(
            await self.client.eval(
                ALERT_CAS,
                len(keys),
                *keys,
                expected_seq,
                new.snapshot_version,
                doc,
                notification or b"",
                b"" if transition is None else history.encode_transition(transition),
                history.TRANSITIONS_KEPT,
                history.KEY_TTL * 1000,
                "" if breach_started is None else repr(breach_started),
            )
        )
        return Cas(won=won == 1, stale_snapshot=won == -1)

    async def baseline(self, suite: str, rule: str) -> Baseline | None:
        """Every task's (n, c) when the rule's latest breach began; None before any breach."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self._alert_key(suite, rule), "baseline_at")
        pipe.hgetall(self.keys.baseline(suite, rule))
        at_raw, raw = await pipe.execute()
        if at_raw is None:
            return None
        tasks: dict[str, tuple[int, int]] = {}
        for task, value in raw.items():
            n, c = _text(value).split(":")[:2]
            tasks[_text(task)] = (int(n), int(c))
        return Baseline(at=float(_text(at_raw)), tasks=tasks)

    async def write_canary_view(self, suite: str, rule: str, view: CanaryView) -> None:
        """Keep a canary's latest comparison, and make it its minute's point of the
        difference over time (a hash field per minute: the last write of a minute stands,
        whichever replica wrote it). Past ``CANARY_POINTS_KEPT`` minutes the oldest go."""
        low, high = (None, None) if view.ci is None else view.ci
        key = self.keys.canary_points(suite, rule)
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.keys.canary_view(suite, rule), msgspec.json.encode(view))
        pipe.hset(
            key,
            str(int(view.at // CANARY_POINT_SECONDS)),
            msgspec.msgpack.encode((view.at, view.value, low, high)),
        )
        pipe.hlen(key)
        *_, length = await pipe.execute()
        if int(length) > CANARY_POINTS_KEPT + 60:  # trimmed an hour at a time
            minutes = sorted(int(_text(f)) for f in await self.client.hkeys(key))
            await self.client.hdel(key, *map(str, minutes[: len(minutes) - CANARY_POINTS_KEPT]))

    async def drop_canary_views(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Delete each (suite, canary rule)'s latest comparison and its points over time
        (a rule gone from the config: nothing judges them again)."""
        if not pairs:
            return
        pipe = self.client.pipeline(transaction=False)
        for suite, rule in pairs:
            pipe.delete(self.keys.canary_view(suite, rule))
            pipe.delete(self.keys.canary_points(suite, rule))
        await pipe.execute()

    async def canary_views(self, pairs: Sequence[tuple[str, str]]) -> list[CanaryView | None]:
        """Each (suite, canary rule)'s latest comparison in one round trip; None before the
        first, or when the stored one does not decode (the next judge replaces it)."""
        if not pairs:
            return []
        pipe = self.client.pipeline(transaction=False)
        for suite, rule in pairs:
            pipe.get(self.keys.canary_view(suite, rule))
        out: list[CanaryView | None] = []
        for raw in await pipe.execute():
            try:
                out.append(None if raw is None else _canary_view.decode(raw))
            except (msgspec.DecodeError, msgspec.ValidationError):
                out.append(None)
        return out

    async def canary_points(
        self, suite: str, rule: str, *, since: float | None = None
    ) -> list[CanaryPoint]:
        """A canary's difference over time, oldest first: ``(t, value, lo, hi)``."""
        raws: Any = await self.client.hvals(self.keys.canary_points(suite, rule))
        out: list[CanaryPoint] = []
        for raw in raws:
            try:
                point = _canary_point.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if since is None or point[0] >= since:
                out.append(point)
        out.sort(key=lambda p: p[0])
        return out

    async def outbox_lengths(self, triples: Sequence[tuple[str, str, str]]) -> list[int]:
        if not triples:
            return []
        pipe = self.client.pipeline(transaction=False)
        for suite, rule, sink in triples:
            pipe.llen(self._outbox_key(suite, rule, sink))
        return [int(n) for n in await pipe.execute()]

    async def outbox_head(self, suite: str, rule: str, sink: str) -> bytes | None:
        head: Any = await self.client.lindex(self._outbox_key(suite, rule, sink), 0)
        return None if head is None else bytes(head)

    async def outbox_pop(self, suite: str, rule: str, sink: str, entry: bytes) -> bool:
        key = self._outbox_key(suite, rule, sink)
        return bool(int(await self.client.eval(OUTBOX_POP, 1, key, entry)))

    async def outbox_set_aside(
        self, suite: str, rule: str, sink: str, entry: bytes, reason: str, *, maxlen: int
    ) -> None:
        """Move an outbox head that cannot be delivered to the outbox dead-letter stream."""
        await self.client.xadd(
            self.keys.outbox_deadletter,
            {
                "entry": entry[:4096],
                "reason": reason,
                "suite": suite,
                "rule": rule,
                "sink": sink,
                "time": repr(time.time()),
            },
            maxlen=maxlen,
            approximate=True,
        )
        # Written first, popped second: a crash in between repeats the record, never loses it.
        await self.outbox_pop(suite, rule, sink, entry)

    async def outbox_deadletters(self, count: int = 100) -> list[dict[str, str]]:
        entries: Any = await self.client.xrange(self.keys.outbox_deadletter, count=count)
        return [{_text(k): _text(v) for k, v in fields.items()} for _, fields in entries]

    async def outbox_lease(self, suite: str, rule: str, sink: str, owner: str, ttl: float) -> bool:
        """Take the lease to drain one outbox for ``ttl`` seconds; False while another holds it."""
        key = self.keys.outbox_lease(suite, rule, sink)
        return bool(await self.client.set(key, owner, nx=True, px=int(ttl * 1000)))

    async def outbox_lease_keep(
        self, suite: str, rule: str, sink: str, owner: str, ttl: float
    ) -> bool:
        """Extend ``owner``'s drain lease by ``ttl``; False when it was lost meanwhile."""
        key = self.keys.outbox_lease(suite, rule, sink)
        return bool(int(await self.client.eval(LEASE, 1, key, owner, int(ttl * 1000))))

    async def outbox_lease_release(self, suite: str, rule: str, sink: str, owner: str) -> None:
        """Give the drain lease back, if ``owner`` still holds it."""
        await self.client.eval(LEASE, 1, self.keys.outbox_lease(suite, rule, sink), owner, 0)

    async def resend_wait(self, suite: str, rule: str, owner: str, interval: float) -> None:
        """The firing alert was just sent to Alertmanager: no re-send for ``interval`` seconds."""
        await self.client.set(self.keys.am_resend(suite, rule), owner, px=int(interval * 1000))

    async def resend_turn(self, suite: str, rule: str, owner: str, interval: float) -> bool:
        """Take this ``interval``'s one re-send of a firing alert; False when it is taken (or
        the alert was sent less than ``interval`` ago)."""
        key = self.keys.am_resend(suite, rule)
        return bool(await self.client.set(key, owner, nx=True, px=int(interval * 1000)))

    async def append_alert_history(self, key: str, notification: bytes, maxlen: int) -> None:
        await self.client.xadd(key, {"notification": notification}, maxlen=maxlen, approximate=True)

    async def alert_history(self, key: str, count: int = 1000) -> list[bytes]:
        """The oldest `count` notifications in the alert history stream."""
        entries: Any = await self.client.xrange(key, count=count)
        return [bytes(fields[b"notification"]) for _, fields in entries]


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
