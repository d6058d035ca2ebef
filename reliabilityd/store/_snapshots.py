"""Snapshots and their schedule: the stored documents, and which suites need a new one.

A series is a suite as a whole or one slice of it (``keys.Series``); each
has its own snapshot hash under the suite's hash tag. A commit marks its
series changed (by ``Series.member``); a replica claims marks, writes the
series' snapshots, and releases its claims. A claim whose replica died
expires back into the marks. A series is computed by one replica at a time:
a mark whose series is claimed stays a mark until the claim is released, and
the reconcile (``mark_stale``) does not mark a series that is claimed, or
whose claim was released after it read the versions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from reliabilityd.stats import history
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store._base import Redis, _text
from reliabilityd.store._documents import Undecodable, snapshot_of
from reliabilityd.store._errors import boundary
from reliabilityd.store._scripts import CLAIM, MARK_UNCLAIMED, RELEASE_CLAIMS, WRITE_SNAPSHOT
from reliabilityd.store._wire import pipelined
from reliabilityd.store.keys import Keys, Series

SeriesLike = str | Series


def _series(x: SeriesLike) -> Series:
    """A series, or its mark (``Series.member``: a suite name is its whole)."""
    return x if isinstance(x, Series) else Series.of_member(x)


def _stamp(version: bytes | str, updated: bytes | str) -> tuple[int, str] | None:
    """(version, updated_at) of a stored document; None when the version does not parse."""
    try:
        return int(version), _text(updated)
    except ValueError:
        return None


# The snapshot hash field holding the fingerprint of the settings its CI part
# was computed under (written with the CI part; see Snapshots.mark_stale).
SETTINGS_FIELD = "settings"
# How long a released claim is remembered (ms): longer than a reconcile takes to read the
# versions it judges, so a snapshot written meanwhile is not marked stale again.
RELEASE_MEMORY_MS = 60_000


class SnapshotWrite(msgspec.Struct, frozen=True):
    """One series' snapshot write: ``Snapshots.write_snapshot``'s arguments."""

    suite: str
    version: int
    ci_fields: Mapping[str, str | int | float]
    value_fields: Mapping[str, str | int | float]
    settings: str | None = None
    # The snapshot's history point, written with the CI part.
    point: history.Point | None = None
    # The slice's id for one slice's snapshot, None for the suite as a whole.
    slice: str | None = None


@boundary
class Snapshots:
    """Snapshot documents, version checks and change marks."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def _key(self, series: SeriesLike) -> str:
        return self.keys.series(_series(series), "snapshot")

    async def fields(self, suite: str, *, slice: str | None = None) -> dict[str, str]:
        """The series' snapshot hash as ``redis-cli HGETALL`` shows it: the flat fields.

        For tools and tests that check what is stored; the document itself is
        read, decoded, by ``document``.
        """
        raw = await self.client.hgetall(self._key(Series(suite, slice)))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def snapshot_json(self, suite: str, *, slice: str | None = None) -> bytes | None:
        """The snapshot document's bytes exactly as stored, for ``GET /suites/<suite>`` alone.

        The HTTP answer is the stored document byte for byte; every other
        reader takes the decoded record (``document``).
        """
        raw: Any = await self.client.hget(self._key(Series(suite, slice)), "json")
        return None if raw is None else bytes(raw)

    async def snapshot_jsons(self, series: Sequence[Series]) -> list[bytes | None]:
        """``snapshot_json`` of each series, in one round trip."""
        if not series:
            return []
        pipe = self.client.pipeline(transaction=False)
        for one in series:
            pipe.hget(self._key(one), "json")
        return [None if raw is None else bytes(raw) for raw in await pipe.execute()]

    async def document(
        self, suite: str, *, slice: str | None = None
    ) -> Snapshot | Undecodable | None:
        """The series' newest stored snapshot; None before any, ``Undecodable`` when it does
        not decode (``documents``)."""
        return (await self.documents([Series(suite, slice)]))[0]

    async def documents(
        self,
        suites: Sequence[SeriesLike],
        *,
        known: Mapping[Series, Snapshot] | None = None,
    ) -> list[Snapshot | Undecodable | None]:
        """The newest stored snapshot of each series, decoded, in one round trip.

        None for a series without one; ``Undecodable`` (with the decode error)
        for one written by another version or damaged. With ``known`` (records
        the caller holds, by series), a series whose stored document is the
        known one (the same version and ``updated_at``, both written with it)
        gets that record back without its document being read or decoded; the
        documents of the others among them take one more round trip.
        """
        if not suites:
            return []
        series = [_series(s) for s in suites]
        held = known or {}
        commands: list[tuple[str, ...]] = [
            ("HMGET", self._key(one), "version", "updated_at")
            if one in held
            else ("HGET", self._key(one), "json")
            for one in series
        ]
        out: list[Snapshot | Undecodable | None] = []
        moved: list[int] = []
        replies = await pipelined(self.client, commands)
        for i, (one, reply) in enumerate(zip(series, replies, strict=True)):
            snap = held.get(one)
            if snap is None:
                out.append(snapshot_of(self._key(one), reply))
                continue
            version, updated = reply
            if version is None or updated is None:
                out.append(None)  # both are written with the document, never without it
            elif _stamp(version, updated) == (snap.version, snap.updated_at):
                out.append(snap)
            else:
                out.append(None)
                moved.append(i)
        if moved:
            again = await pipelined(
                self.client, [("HGET", self._key(series[i]), "json") for i in moved]
            )
            for i, raw in zip(moved, again, strict=True):
                out[i] = snapshot_of(self._key(series[i]), raw)
        return out

    async def write_snapshot(
        self,
        suite: str,
        version: int,
        ci_fields: Mapping[str, str | int | float],
        value_fields: Mapping[str, str | int | float],
        *,
        settings: str | None = None,
        point: history.Point | None = None,
        slice: str | None = None,
    ) -> tuple[bool, bool]:
        """Write the CI part and the value part, each unless a newer one is stored.

        ``settings`` (the fingerprint of what the CI part was computed under)
        is written with the CI part, and so is ``point`` (the snapshot's
        estimates for the history, ``stats.history``): in the same script
        call, and for each k once per version. With ``slice``, the slice's
        snapshot (the same call for every series). Returns (ci part written,
        value part written).
        """
        write = SnapshotWrite(suite, version, ci_fields, value_fields, settings, point, slice)
        return (await self.write_snapshots([write]))[0]

    async def write_snapshots(self, writes: Sequence[SnapshotWrite]) -> list[tuple[bool, bool]]:
        """``write_snapshot`` of each write, in one round trip (one script call each)."""
        if not writes:
            return []
        commands: list[tuple[Any, ...]] = []
        for write in writes:
            keys, args = self._write_call(write)
            commands.append(("EVAL", WRITE_SNAPSHOT, len(keys), *keys, *args))
        return [
            (bool(int(r) & 1), bool(int(r) & 2)) for r in await pipelined(self.client, commands)
        ]

    def _write_call(self, w: SnapshotWrite) -> tuple[list[str], list[Any]]:
        """The write script's KEYS and ARGV for one write (see write_snapshot.lua)."""
        ci_fields = w.ci_fields
        if w.settings is not None and ci_fields:
            ci_fields = {**ci_fields, SETTINGS_FIELD: w.settings}
        # History keys derive from the series' snapshot key (Keys.history).
        key = self._key(Series(w.suite, w.slice))
        point = w.point if ci_fields else None
        records = history.encode_point(point) if point is not None else {}
        args: list[Any] = [w.version, len(ci_fields), len(records)]
        if point is not None and records:
            args += [int(point.t), history.KEY_TTL * 1000, len(history.TIERS)]
            for tier in history.TIERS:
                args += [tier.resolution, tier.capacity]
            args += [history.RECORD_SIZE, history.LAYOUT]
            for k, record in records.items():
                args += [k, record]
        for field, value in ci_fields.items():
            args += [field, value]
        for field, value in w.value_fields.items():
            args += [field, value]
        return [key, *(self.keys.history(key, k) for k in records)], args

    async def versions(self, suites: Sequence[SeriesLike]) -> list[tuple[int, int, str | None]]:
        """(data version, snapshot version, snapshot settings) per series.

        The snapshot version is -1 when there is none; the settings are the
        fingerprint its CI part was computed under (``SETTINGS_FIELD``).
        """
        if not suites:
            return []
        pipe = self.client.pipeline(transaction=False)
        for suite in suites:
            series = _series(suite)
            pipe.hget(self.keys.series(series, "meta"), "version")
            pipe.hmget(self.keys.series(series, "snapshot"), ["version", SETTINGS_FIELD])
        raw = await pipe.execute()
        out: list[tuple[int, int, str | None]] = []
        for i in range(0, len(raw), 2):
            snap, settings = raw[i + 1]
            out.append(
                (
                    int(raw[i] or 0),
                    int(snap) if snap is not None else -1,
                    None if settings is None else _text(settings),
                )
            )
        return out

    async def mark_changed(self, suites: Sequence[SeriesLike]) -> None:
        """Mark series for a new snapshot (the next claim picks them up)."""
        if suites:
            await self.client.sadd(self.keys.changed, *(_series(s).member for s in suites))

    async def mark_stale(
        self, suites: Sequence[str], settings: Callable[[str], str] | None = None
    ) -> list[str]:
        """Mark the series whose snapshot is behind their data or their settings; returns them.

        Every suite named and each of its slices (the returned names are
        ``Series.member``: the suite, or ``<suite>/<slice id>``).

        Stale means the data version is ahead of the snapshot's, or (with
        ``settings``, the fingerprint each suite's snapshot should be computed
        under) the stored snapshot was computed under other settings: a new k,
        a new rule, another interval or window is judged on the data already
        stored, without waiting for a trial. The marks are the fast path; this
        scan finds what they cannot (data written by a version without marks,
        a mark lost with a crashed Redis, a restart with a changed config).
        """
        every: list[Series] = [Series(s) for s in suites]
        # Redis' time before the versions are read: a claim released after it wrote a
        # snapshot these reads may predate (mark_unclaimed.lua).
        since, _ = await self._mark_unclaimed(-1, [])
        if suites:
            pipe = self.client.pipeline(transaction=False)
            for suite in suites:
                pipe.hkeys(self.keys.slices(suite))
            for suite, ids in zip(suites, await pipe.execute(), strict=True):
                every += [Series(suite, _text(sid)) for sid in ids]
        stale = [
            series.member
            for series, (data, snap, stored) in zip(every, await self.versions(every), strict=True)
            if data > snap
            or (settings is not None and snap >= 0 and stored != settings(series.suite))
        ]
        if not stale:
            return []
        _, added = await self._mark_unclaimed(since, stale)
        return added

    async def _mark_unclaimed(self, since: int, members: Sequence[str]) -> tuple[int, list[str]]:
        """(Redis time in ms, the members marked): each of ``members`` not claimed now and
        not released at or after ``since``."""
        now, added = await self.client.eval(
            MARK_UNCLAIMED,
            3,
            self.keys.changed,
            self.keys.claims,
            self.keys.released,
            since,
            *members,
        )
        return int(now), [_text(s) for s in added or []]

    async def claim_changed(self, count: int, lifetime: float) -> list[str]:
        """Take up to ``count`` change marks for ``lifetime`` seconds (expired claims return).

        Each mark is a ``Series.member``: ``Series.of_member`` reads it.
        """
        return (await self.claim_marks(count, lifetime))[0]

    async def claim_marks(
        self, count: int, lifetime: float, members: Sequence[str] = ()
    ) -> tuple[list[str], int]:
        """``claim_changed``, and how many marks of those popped were held back because
        another claim on their series is live (they stay marks for a later claim).

        With ``members``, those of them still marked instead of ``count`` at random.
        """
        held, got = await self.client.eval(
            CLAIM,
            3,
            self.keys.changed,
            self.keys.claims,
            self.keys.released,
            int(lifetime * 1000),
            count,
            RELEASE_MEMORY_MS,
            *members,
        )
        return sorted(_text(s) for s in got or []), int(held)

    async def release_claims(self, suites: Sequence[str]) -> None:
        """The series' snapshots are written: drop this replica's claims on them (members)."""
        if suites:
            await self.client.eval(RELEASE_CLAIMS, 2, self.keys.claims, self.keys.released, *suites)

    async def changed(self) -> list[str]:
        return sorted(_text(s) for s in await self.client.smembers(self.keys.changed))

    async def some_changed(self, limit: int) -> list[str]:
        """At most ``limit`` of the marks, drawn at random when there are more (a bounded
        read: ``SRANDMEMBER``, not the whole set)."""
        got = await self.client.srandmember(self.keys.changed, limit)
        # With a count the reply is a list, empty when there are no marks.
        return [_text(s) for s in got] if isinstance(got, list) else []
