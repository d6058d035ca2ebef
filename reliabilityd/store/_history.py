"""store.history: a series' estimates over time and its alert transitions.

The points are written by the snapshot write script (``Snapshots.write_snapshot``)
and the transitions by the alert compare-and-set (``Alerts.alert_cas``); this
part only reads them. The encoding is ``stats.history``'s.
"""

from __future__ import annotations

from typing import Any

import msgspec

from reliabilityd.stats import history
from reliabilityd.stats.history import History, Transition
from reliabilityd.store._base import Redis, _text
from reliabilityd.store._errors import boundary
from reliabilityd.store.keys import Keys

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
        snapshot = self.keys.snapshot(suite, slice)
        pipe = self.client.pipeline(transaction=False)
        pipe.hkeys(snapshot)
        pipe.lrange(self.keys.transitions(snapshot), 0, -1)
        fields, raw_transitions = await pipe.execute()
        ks = _ks(fields)
        raws: dict[int, bytes] = {}
        if ks:
            pipe = self.client.pipeline(transaction=False)
            for k in ks:
                pipe.get(self.keys.history(snapshot, k))
            for k, raw in zip(ks, await pipe.execute(), strict=True):
                # None: expired, nothing in reach; another length: another layout.
                if raw is not None and len(raw) == history.SERIES_BYTES:
                    raws[k] = bytes(raw)
        transitions: list[Transition] = []
        for raw in raw_transitions:
            try:
                tr = history.decode_transition(bytes(raw))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if (since is None or tr.t >= since) and (until is None or tr.t <= until):
                transitions.append(tr)
        transitions.sort(key=lambda tr: tr.t)
        return History(
            suite=suite,
            slice=slice,
            points=history.merge(raws, since=since, until=until),
            transitions=transitions,
        )

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
