"""store.history: a series' estimates over time and its alert transitions.

The points are written by the snapshot write script (``Snapshots.write_snapshot``)
and the transitions by the alert compare-and-set (``Alerts.alert_cas``); this
part only reads them. The encoding is ``stats.history``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from reliabilityd.stats import history
from reliabilityd.stats.history import History, Transition
from reliabilityd.store._base import Redis, _text
from reliabilityd.store._errors import boundary
from reliabilityd.store._wire import pipelined
from reliabilityd.store.keys import Keys, Series

_FIELD = "history:k"


@boundary
class Histories:
    """Reads of the history strings and the transition lists."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    async def ks(self, suite: str, *, slice: str | None = None) -> list[int]:
        """The ks the series has history at (each k written since its history began)."""
        fields = await self.client.hkeys(self.keys.snapshot(suite, slice))
        return _ks(fields)

    async def read(
        self,
        suite: str,
        *,
        slice: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> History:
        """The series' points and transitions with ``since <= t <= until``, sorted by time.

        A history string or transition this version cannot decode (another
        version wrote it) is left out.
        """
        (one,) = await self.read_many([Series(suite, slice)], since=since, until=until)
        return one

    async def read_many(
        self,
        series: Sequence[Series],
        *,
        since: float | None = None,
        until: float | None = None,
    ) -> list[History]:
        """``read`` of each series, in order, in two pipelines whatever their number: one
        connection for an index of every suite."""
        if not series:
            return []
        snapshots = [self.keys.snapshot(s.suite, s.slice) for s in series]
        pipe = self.client.pipeline(transaction=False)
        for snapshot in snapshots:
            pipe.hkeys(snapshot)
            pipe.lrange(self.keys.transitions(snapshot), 0, -1)
        replies = await pipe.execute()
        ks = [_ks(fields) for fields in replies[0::2]]
        pipe = self.client.pipeline(transaction=False)
        for snapshot, its in zip(snapshots, ks, strict=True):
            for k in its:
                pipe.get(self.keys.history(snapshot, k))
        strings = iter(await pipe.execute() if any(ks) else [])
        out = []
        for one, its, raw_transitions in zip(series, ks, replies[1::2], strict=True):
            raws: dict[int, bytes] = {}
            for k in its:
                raw = next(strings)
                # None: expired, nothing in reach; another header: another layout.
                if raw is not None and history.readable(bytes(raw)):
                    raws[k] = bytes(raw)
            out.append(
                History(
                    suite=one.suite,
                    slice=one.slice,
                    points=history.merge(raws, since=since, until=until),
                    transitions=_transitions(raw_transitions, since, until),
                )
            )
        return out

    async def pass_hat_many(
        self,
        series: Sequence[tuple[Series, int]],
        *,
        since: float | None = None,
        until: float | None = None,
        span: float | None = None,
    ) -> list[list[tuple[float, float | None, float | None, float | None]]]:
        """Each (series, k)'s pass^k samples (``history.pass_hat_samples``, the last of
        each ``span`` with one) in one round trip: one history string a series, no
        transitions, no other k."""
        if not series:
            return []
        keys = [self.keys.history(self.keys.snapshot(o.suite, o.slice), k) for o, k in series]
        raws = await pipelined(self.client, [("GET", key) for key in keys])
        out: list[list[tuple[float, float | None, float | None, float | None]]] = []
        for (_, k), raw in zip(series, raws, strict=True):
            # None: expired, nothing in reach; another header: another layout.
            if raw is None or not history.readable(bytes(raw)):
                out.append([])
            else:
                out.append(
                    history.pass_hat_samples(bytes(raw), k, since=since, until=until, span=span)
                )
        return out

    async def transitions_many(
        self,
        series: Sequence[Series],
        *,
        since: float | None = None,
        until: float | None = None,
    ) -> list[list[Transition]]:
        """Each series' alert transitions with ``since <= t <= until``, sorted by time, in
        one round trip (no points read)."""
        if not series:
            return []
        pipe = self.client.pipeline(transaction=False)
        for one in series:
            pipe.lrange(self.keys.transitions(self.keys.snapshot(one.suite, one.slice)), 0, -1)
        return [_transitions(raws, since, until) for raws in await pipe.execute()]

    async def memory(self, suite: str, *, slice: str | None = None) -> dict[str, int]:
        """Each of the series' history keys -> its ``MEMORY USAGE`` in bytes (for tools, tests)."""
        snapshot = self.keys.snapshot(suite, slice)
        names = [
            *(self.keys.history(snapshot, k) for k in await self.ks(suite, slice=slice)),
            self.keys.transitions(snapshot),
        ]
        out: dict[str, int] = {}
        for name in names:
            used: Any = await self.client.memory_usage(name, samples=0)
            if used is not None:
                out[name] = int(used)
        return out


def _ks(fields: Any) -> list[int]:
    out: list[int] = []
    for field in fields:
        name = _text(field)
        if name.startswith(_FIELD) and name[len(_FIELD) :].isdigit():
            out.append(int(name[len(_FIELD) :]))
    return sorted(out)


def _transitions(raws: Any, since: float | None, until: float | None) -> list[Transition]:
    out: list[Transition] = []
    for raw in raws:
        try:
            tr = history.decode_transition(bytes(raw))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if (since is None or tr.t >= since) and (until is None or tr.t <= until):
            out.append(tr)
    out.sort(key=lambda tr: tr.t)
    return out
