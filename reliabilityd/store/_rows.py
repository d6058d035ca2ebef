"""Summary rows: what the list-wide reads show of each series, paged in a few round trips.

After each tick's snapshots the daemon writes one compact row per series it
wrote (``Row``: the headline value and interval, the rules' states, the last
trial, a day's trend of a handful of points) into one hash per deployment,
and keeps every suite in a name index and in the index of its state. A page
of the on-call index is then a range of an index and one HMGET of its rows,
whatever the number of suites. A suite in the name index without a row has
no snapshot yet, and says so. Every key shares the tag ``{/rows}``
(``keys``), so each script runs on one Redis Cluster slot.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import msgspec

from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.estimators import ESTIMATOR_NAME, Metric
from reliabilityd.store._base import Redis, _count, _text
from reliabilityd.store._documents import Undecodable
from reliabilityd.store._errors import boundary
from reliabilityd.store._scripts import DROP_ROWS, ROW_STATES, WRITE_ROWS
from reliabilityd.store.keys import ROW_STATES as STATES
from reliabilityd.store.keys import Keys, Series, glob_escape

__all__ = ["Gauges", "Row", "RowPage", "Rows", "compact", "no_gc"]

# Index entries read per ZSCAN call when a page filters by a substring.
SCAN_COUNT = 5000
# The most trend points a row keeps: a day's, one an hour.
TREND_POINTS = 24
# The dead letters a page counts: the last hour's, by minute (``keys.rejected_minute``).
REJECTED_MINUTES = 60


# An estimate in a row: (k, value, low, high, runs, tasks, left out).
Compact = tuple[int, float | None, float | None, float | None, int, int, int]


# gc=False: a row holds only scalars, strings and tuples of them (no cycles), and a scrape
# decodes thousands at once, which would otherwise run the cyclic collector again and again.
class Row(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True, gc=False):
    """One series as the list-wide reads show it, as of its newest snapshot.

    ``k``: the headline k (the first pass^k rule's, else the largest), with its
    ``value`` and ``ci`` (None while UNKNOWN); ``below``: the highest threshold
    a rule judges that value against; ``rules``: (rule, state, the suite that
    holds its state) of every rule that reads the series, kept current by
    every tick; ``trend``: (t, value, low, high) points of the last day at the
    headline k; ``pass_at_k`` and ``pass_hat_k``: the snapshot's estimates at
    every k, compact (``compact``; what ``/metrics`` and ``status`` show, read
    back by ``estimates``), ``trials`` its count.
    """

    suite: str
    slice: str | None
    version: int
    updated_at: str
    k: int | None
    value: float | None
    ci: tuple[float, float] | None
    tasks: int
    last_trial_at: str | None
    below: float | None = None
    rules: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    trend: list[tuple[float, float | None, float | None, float | None]] = msgspec.field(
        default_factory=list
    )
    unknown_reason: str | None = None
    pass_at_k: list[Compact] = msgspec.field(default_factory=list)
    pass_hat_k: list[Compact] = msgspec.field(default_factory=list)
    slices: int = 0
    slice_overflow: int = 0
    trials: int = 0

    def estimates(self, metric: Metric) -> list[Estimate]:
        """The row's estimates of ``metric`` at every k (without their CI's method)."""
        name = ESTIMATOR_NAME[metric]
        return [
            Estimate(
                k=k,
                value=value,
                ci=None if lo is None or hi is None else (lo, hi),
                estimator=name,
                runs=runs,
                tasks=tasks,
                left_out=left_out,
            )
            for k, value, lo, hi, runs, tasks, left_out in (
                self.pass_at_k if metric == "pass@k" else self.pass_hat_k
            )
        ]


def compact(est: Estimate) -> Compact:
    """An estimate as a row keeps it: (k, value, low, high, runs, tasks, left out)."""
    lo, hi = (None, None) if est.ci is None else est.ci
    return (est.k, est.value, lo, hi, est.runs, est.tasks, est.left_out)


_NONE = msgspec.Raw(b"\xc0")
_EMPTY = msgspec.Raw(b"\x90")


class Gauges(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The fields of a ``Row`` that ``/metrics`` formats, decoded from the same bytes.

    A row is an array; each field here sits at its ``Row`` position (a test holds
    them together), and the ones ``/metrics`` does not show (the headline, the
    trend) stay undecoded bytes (``msgspec.Raw``), so a scrape builds no objects
    for a day's trend of every series.
    """

    suite: str
    slice: str | None
    version: int
    updated_at: str
    k: msgspec.Raw
    value: msgspec.Raw
    ci: msgspec.Raw
    tasks: int
    last_trial_at: str | None
    below: msgspec.Raw = _NONE
    rules: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    trend: msgspec.Raw = _EMPTY
    unknown_reason: msgspec.Raw = _NONE
    pass_at_k: list[Compact] = msgspec.field(default_factory=list)
    pass_hat_k: list[Compact] = msgspec.field(default_factory=list)
    slices: int = 0
    slice_overflow: int = 0


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic collector held off while a synchronous step builds many objects.

    Decoding thousands of rows allocates lists and tuples by the hundred thousand,
    which would run the collector over and over for nothing (they hold no cycles).
    The collector is the process's: a step in a worker thread (the ``/metrics``
    text) puts it off for the event loop too, for the step's tens of milliseconds;
    it is only put off, and the first step in turns it back on (where it was on).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class RowPage(msgspec.Struct, frozen=True):
    """One page of the index: each suite with its row (None: no snapshot yet) and state.

    ``total``: how many suites match the filter; ``state`` of a suite is one of
    ``ROW_STATES`` (None while the daemon has not judged it yet); ``rejected``: each
    suite's dead letters in the last ``REJECTED_MINUTES``, and ``unattributed`` those
    that named no suite, read with the page's rows.
    """

    suites: list[str]
    rows: list[Row | Undecodable | None]
    states: list[str | None]
    total: int
    offset: int
    rejected: list[int] = msgspec.field(default_factory=list)
    unattributed: int = 0


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Row).decode
T = TypeVar("T", Row, Gauges)
_ROWS = (_decode, msgspec.msgpack.Decoder(list[Row]).decode)
_GAUGES = (msgspec.msgpack.Decoder(Gauges).decode, msgspec.msgpack.Decoder(list[Gauges]).decode)


def _packed(values: Sequence[bytes]) -> bytes:
    """Encoded values as one msgpack array (an array32 header, then each in turn)."""
    return b"\xdd" + len(values).to_bytes(4, "big") + b"".join(values)


def _row_of(key: str, raw: Any) -> Row | Undecodable | None:
    if raw is None:
        return None
    try:
        return _decode(raw)
    except msgspec.DecodeError as exc:
        return Undecodable("row", key, str(exc))


def _upper(prefix: str) -> bytes:
    """The exclusive lex bound after every name that starts with ``prefix``."""
    return b"[" + prefix.encode() + b"\xff"


@boundary
class Rows:
    """The summary rows, their name and state indexes, and the pages read from them."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def _state_keys(self) -> list[str]:
        return [self.keys.row_state(s) for s in STATES]

    async def write(self, rows: Sequence[Row]) -> int:
        """Write each row unless a newer one is stored (one script call); how many were."""
        if not rows:
            return 0
        args: list[Any] = []
        for row in rows:
            member = Series(row.suite, row.slice).member
            args += [member, row.version, _encode(row), "1" if row.slice is None else "0"]
        k = self.keys
        return int(
            await self.client.eval(WRITE_ROWS, 3, k.rows, k.row_versions, k.row_names, *args)
        )

    async def set_states(self, states: Mapping[str, str]) -> None:
        """Each suite's state (one of ``ROW_STATES``), in the state indexes; indexes the
        suite by name too, so one without a snapshot is listed."""
        if not states:
            return
        args: list[Any] = []
        for suite, state in states.items():
            args += [suite, STATES.index(state) + 1]
        k = self.keys
        keys = [k.row_states, k.row_names, *self._state_keys()]
        await self.client.eval(ROW_STATES, len(keys), *keys, *args)

    async def drop(self, suites: Sequence[str], slices: Sequence[Series] = ()) -> None:
        """Take suites (and the given slices' rows) out of the rows and their indexes."""
        if not suites and not slices:
            return
        k = self.keys
        keys = [k.rows, k.row_versions, k.row_states, k.row_names, *self._state_keys()]
        args = [*suites, "", *(s.member for s in slices)]
        await self.client.eval(DROP_ROWS, len(keys), *keys, *args)

    async def indexed(self) -> list[str]:
        """Every suite in the name index (the daemon's sweep of suites gone)."""
        names: list[Any] = await self.client.zrange(self.keys.row_names, 0, -1)
        return [_text(m) for m in names]

    async def series(self) -> list[Series]:
        """Every series that has a row (the daemon's sweep of suites gone)."""
        members: list[Any] = await self.client.hkeys(self.keys.row_versions)
        return [Series.of_member(_text(m)) for m in members]

    async def read(self, series: Sequence[Series]) -> list[Row | Undecodable | None]:
        """The rows of the given series, in one round trip."""
        if not series:
            return []
        raw = await self.client.hmget(self.keys.rows, [s.member for s in series])
        return [_row_of(self.keys.rows, r) for r in raw]

    async def every(self) -> list[Row | Undecodable]:
        """Every row of the deployment (suites and slices), read by HSCAN in pages."""
        return await self._every(*_ROWS)

    async def gauges(self) -> list[Gauges | Undecodable]:
        """What ``/metrics`` shows of every row (``every``'s read, less decoded)."""
        return await self._every(*_GAUGES)

    async def _every(
        self, one: Callable[[bytes], T], many: Callable[[bytes], list[T]]
    ) -> list[T | Undecodable]:
        """Every row, each decoded by ``one``; ``many`` decodes an array of them.

        The values are decoded as one array in one call; when one of them does not
        decode, each is decoded on its own and that one is ``Undecodable``. A member
        HSCAN returns twice (the hash grew while it was read) is kept once.
        """
        # HSCAN a page at a time (not ``hscan_iter``: an async step per member).
        raw: dict[Any, bytes] = {}
        cursor: int = 0
        while True:
            cursor, page = await self.client.hscan(self.keys.rows, cursor, count=SCAN_COUNT)
            raw.update(cast(dict[Any, bytes], page))
            if not cursor:
                break
        values = list(raw.values())
        with no_gc():
            try:
                return list(many(_packed(values)))
            except msgspec.DecodeError:
                pass
            out: list[T | Undecodable] = []
            for value in values:
                try:
                    out.append(one(value))
                except msgspec.DecodeError as exc:
                    out.append(Undecodable("row", self.keys.rows, str(exc)))
            return out

    async def page(
        self,
        *,
        offset: int = 0,
        limit: int = 100,
        state: str | None = None,
        prefix: str = "",
        contains: str = "",
        readable: Any = None,
        now: float | None = None,
    ) -> RowPage:
        """A page of suites by name: in ``state`` (one of ``ROW_STATES``), whose names start
        with ``prefix`` and hold ``contains``, ``limit`` from ``offset``, with their rows.

        Without ``contains`` (and ``readable``) a range of the index and its count, then the
        page's rows: two round trips. With them the index entries that match are scanned
        (ZSCAN MATCH, ``SCAN_COUNT`` a call) before the page's rows are read. ``readable``:
        a callable that keeps the names a token may read.

        The page's dead letters come in the round trip of its rows: each minute's count
        of the page's suites (and of none named) as of ``now`` (None: the clock's), so a
        page reads ``REJECTED_MINUTES`` x (its suites + 1) counts whatever the number of
        suites. A count moves with every dead letter and every minute, which a row,
        written when its snapshot or its rules' states move, would not follow.
        """
        index = self.keys.row_names if state is None else self.keys.row_state(state)
        if not contains and readable is None:
            low: bytes = b"-" if not prefix else b"[" + prefix.encode()
            high: bytes = b"+" if not prefix else _upper(prefix)
            pipe = self.client.pipeline(transaction=False)
            pipe.zrangebylex(index, low, high, start=offset, num=limit)
            pipe.zlexcount(index, low, high)
            names_raw, total = await pipe.execute()
            names = [_text(n) for n in names_raw]
        else:
            pattern = glob_escape(prefix) + "*"
            if contains:
                pattern += glob_escape(contains) + "*"
            found = sorted(
                {
                    _text(m)
                    async for m, _ in self.client.zscan_iter(index, match=pattern, count=SCAN_COUNT)
                }
            )
            if readable is not None:
                found = list(readable(found))
            total = len(found)
            names = found[offset : offset + limit]
        last = int((time.time() if now is None else now) // 60)
        minutes = range(last - REJECTED_MINUTES + 1, last + 1)
        pipe = self.client.pipeline(transaction=False)
        if names:
            pipe.hmget(self.keys.rows, names)
            pipe.hmget(self.keys.row_states, names)
        for minute in minutes:
            pipe.hmget(self.keys.rejected_minute(minute), [*names, ""])
        replies = await pipe.execute()
        counts = [0] * (len(names) + 1)
        for minute_counts in replies[2 if names else 0 :]:
            for i, raw in enumerate(minute_counts):
                counts[i] += _count(raw)
        if not names:
            return RowPage([], [], [], int(total), offset, [], counts[-1])
        rows_raw, states_raw = replies[0], replies[1]
        states: list[str | None] = []
        for raw in states_raw:
            try:
                states.append(STATES[int(raw) - 1] if raw is not None else None)
            except (ValueError, IndexError):
                states.append(None)
        rows = [_row_of(self.keys.rows, r) for r in rows_raw]
        return RowPage(names, rows, states, int(total), offset, counts[:-1], counts[-1])
