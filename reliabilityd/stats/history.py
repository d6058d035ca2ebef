"""A series' history: its estimates over time and its alert transitions (pure, no I/O).

The read API (``store.history.read``) returns these Structs::

    History(suite, slice, points, transitions)
    Point(t, values, tier, minima)
                                values: {"pass^k@5": (point, lo, hi), "pass@k@5": ...}
                                minima: {"pass^k@5": lowest point of the bucket, ...}
                                an element None = UNKNOWN
    Transition(t, rule, state, severity, reason)

``points`` are sorted by ``t`` with no duplicates across tiers: a coarser
tier's points appear only before the oldest time a finer tier still reaches.
``label(metric, k)`` builds the keys of ``Point.values``.

Storage, one string per series and k that grows with its points: a header
(``HEADER``: the layout's tag, the number of tiers, then per tier its record
count and the index of its oldest record) and each tier's records one after
another. A record (``RECORD_SIZE`` bytes) is the snapshot's time as a
big-endian uint32 of unix seconds, then pass@k (point, lo, hi) and pass^k
(point, lo, hi), then the lowest pass@k and pass^k point of its bucket, each
a big-endian uint16 of the value times ``SCALE`` (``UNKNOWN_CODE`` =
UNKNOWN). The point is rounded to the nearest code, the lower bound down and
the upper bound up, so a stored interval always contains the computed one
and the error is at most 1/``SCALE``. A point in a tier's newest bucket
replaces that record's snapshot and lowers its minimum; a point in a new
bucket appends a record until the tier holds ``capacity`` of them, then
overwrites its oldest: each tier keeps the last snapshot and the minimum of
each of its buckets, ages out by itself, and the string costs what it holds
up to its budget (``SERIES_BYTES``).

Alert transitions are stored as MessagePack arrays ``[t, rule, state,
severity, reason]`` in a list capped at ``TRANSITIONS_KEPT``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, TypeAlias

import msgspec
import numpy as np
import numpy.typing as npt

from reliabilityd.stats.estimate import Estimate

__all__ = [
    "HEADER",
    "KEY_TTL",
    "LAYOUT",
    "RECORD_SIZE",
    "SCALE",
    "SERIES_BYTES",
    "TIERS",
    "TRANSITIONS_KEPT",
    "UNKNOWN_CODE",
    "Estimate3",
    "History",
    "Level",
    "Point",
    "Tier",
    "Transition",
    "decode_points",
    "decode_transition",
    "encode_point",
    "encode_transition",
    "label",
    "merge",
    "point_of",
    "readable",
    "time_mean",
]

Estimate3: TypeAlias = tuple[float | None, float | None, float | None]

METRICS: Final = ("pass@k", "pass^k")


class Point(msgspec.Struct, frozen=True):
    """One snapshot's estimates at the time it was computed."""

    # Unix seconds the snapshot was computed at (whole seconds).
    t: float
    # label(metric, k) -> (point, lo, hi); None = UNKNOWN.
    values: dict[str, Estimate3]
    # The tier the point was read from: 0 is the finest.
    tier: int = 0
    # label(metric, k) -> the lowest point estimate of the point's bucket (a dip shorter
    # than the bucket shows here); None = UNKNOWN. Empty for a point not read from a tier.
    minima: dict[str, float | None] = msgspec.field(default_factory=dict)


class Transition(msgspec.Struct, frozen=True):
    """An alert rule's state change, recorded with the compare-and-set that made it."""

    t: float
    rule: str
    # "inactive", "pending", "firing" or "resolved" (rules.State).
    state: str
    severity: str | None = None
    # Why it breaches ("below", "unknown", "stale"), None when not breaching.
    reason: str | None = None


class History(msgspec.Struct, frozen=True):
    """A series' points (sorted by time) and its alert transitions (sorted by time)."""

    suite: str
    slice: str | None
    points: list[Point]
    transitions: list[Transition]


class Tier(msgspec.Struct, frozen=True):
    """A region of a history string: one slot per ``resolution`` seconds, ``capacity`` slots."""

    resolution: int
    capacity: int

    @property
    def span(self) -> int:
        """Seconds this tier reaches back (its current bucket included)."""
        return self.resolution * self.capacity


# Per 10 s for an hour, per minute for 6 hours, per hour for 7 days, per day for 420 days:
# 1,308 records, a string that fits jemalloc's 28 KiB size class once every tier is full.
TIERS: Final = (Tier(10, 360), Tier(60, 360), Tier(3_600, 168), Tier(86_400, 420))
RECORD_SIZE: Final = 20
SCALE: Final = 65_534
UNKNOWN_CODE: Final = 65_535
# The header's first byte: another value is another layout (read as no history).
LAYOUT: Final = 2
HEADER: Final = 2 + 4 * len(TIERS)
# Bytes of one series' history string per k once every tier is full: 26,178.
SERIES_BYTES: Final = HEADER + RECORD_SIZE * sum(tier.capacity for tier in TIERS)
# A history key outlives its last write by the longest span (then nothing in it is in reach).
KEY_TTL: Final = max(tier.span for tier in TIERS) + 86_400
TRANSITIONS_KEPT: Final = 100

# A bound a rounding error puts this far outside [0, 1] is stored at the end it passed.
_SLACK = 1e-9
_RECORD = struct.Struct(">I8H")
_HEADER = struct.Struct(">BB")
_COUNTS = struct.Struct(">HH")


def label(metric: str, k: int) -> str:
    """The key of ``Point.values`` for ``metric`` ("pass@k" or "pass^k") at ``k``."""
    return f"{metric}@{k}"


class Level(msgspec.Struct, frozen=True):
    """A series' time-weighted mean of one value over a span of its history."""

    value: float
    points: int  # the points with a known value in the span
    seconds: float  # the time those points held their values (UNKNOWN stretches left out)


def time_mean(points: Sequence[Point], key: str, until: float) -> Level | None:
    """The mean of ``values[key]``'s point estimate over time, each point holding until
    the next (or ``until``), from the first point with a known value; None when no point
    has one or they span no time. An UNKNOWN point holds no value: its time is left
    out."""
    known = [(p.t, p.values.get(key, (None, None, None))[0]) for p in sorted(points, key=_t)]
    if not known:
        return None
    total = weight = 0.0
    counted = 0
    first: float | None = None
    for (t, v), nxt in zip(known, [*(t for t, _ in known[1:]), until], strict=True):
        if v is None:
            continue
        first = t if first is None else first
        span = max(0.0, min(nxt, until) - t)
        total += v * span
        weight += span
        counted += 1
    if first is None or weight <= 0.0:
        return None
    return Level(total / weight, counted, weight)


def _t(point: Point) -> float:
    return point.t


def point_of(estimates: Iterable[Estimate], t: float) -> Point:
    """The point a snapshot's estimates make at time ``t``."""
    return Point(
        t=float(math.floor(t)),
        values={label(e.metric, e.k): (e.value, e.ci_low, e.ci_high) for e in estimates},
    )


def _code(x: float | None, rounding: str) -> int:
    if x is None or math.isnan(x):
        return UNKNOWN_CODE
    if not -_SLACK <= x <= 1.0 + _SLACK:
        raise ValueError(f"a history value must be within [0, 1], got {x!r}")
    scaled = min(1.0, max(0.0, x)) * SCALE
    if rounding == "down":
        return math.floor(scaled)
    if rounding == "up":
        return math.ceil(scaled)
    return round(scaled)


def _value(code: int) -> float | None:
    return None if code == UNKNOWN_CODE else code / SCALE


def _codes(triple: Estimate3 | None) -> tuple[int, int, int]:
    p, lo, hi = (None, None, None) if triple is None else triple
    return _code(p, "nearest"), _code(lo, "down"), _code(hi, "up")


def encode_point(point: Point) -> dict[int, bytes]:
    """k -> the point's record for that k's history string (both metrics in one record)."""
    ks = sorted({int(name.rpartition("@")[2]) for name in point.values})
    t = int(point.t)
    if not 0 < t < 2**32:
        raise ValueError(f"a history time must be unix seconds in (0, 2**32), got {point.t!r}")
    out: dict[int, bytes] = {}
    for k in ks:
        at = _codes(point.values.get(label("pass@k", k)))
        hat = _codes(point.values.get(label("pass^k", k)))
        # A new bucket's minimum is its first point.
        out[k] = _RECORD.pack(t, *at, *hat, at[0], hat[0])
    return out


_DTYPE = np.dtype([("t", ">u4"), ("v", ">u2", (6,)), ("m", ">u2", (2,))])
assert _DTYPE.itemsize == RECORD_SIZE


def _tiers_of(raw: bytes) -> list[npt.NDArray[np.void]]:
    """Each tier's records (in storage order) of one k's history string.

    Raises ValueError when ``raw`` is not a history string of this layout.
    """
    if len(raw) < HEADER:
        raise ValueError(f"a history string holds at least {HEADER} bytes, got {len(raw)}")
    layout, tiers = _HEADER.unpack_from(raw)
    if (layout, tiers) != (LAYOUT, len(TIERS)):
        raise ValueError(f"a history string of layout {layout} with {tiers} tiers")
    counts = [_COUNTS.unpack_from(raw, 2 + 4 * i)[0] for i in range(len(TIERS))]
    if any(c > t.capacity for c, t in zip(counts, TIERS, strict=True)) or len(
        raw
    ) != HEADER + RECORD_SIZE * sum(counts):
        raise ValueError(f"a history string's counts {counts} do not match its {len(raw)} bytes")
    records = np.frombuffer(raw, dtype=_DTYPE, offset=HEADER)
    out = []
    offset = 0
    for count in counts:
        out.append(records[offset : offset + count])
        offset += count
    return out


def readable(raw: bytes) -> bool:
    """Whether ``raw`` is a history string of this layout (``merge`` can read it)."""
    try:
        _tiers_of(raw)
    except ValueError:
        return False
    return True


def _triples(codes: npt.NDArray[np.uint16]) -> list[list[float | None]]:
    """Rows of codes -> rows of values, None for UNKNOWN."""
    values = np.where(codes == UNKNOWN_CODE, np.nan, codes / SCALE).tolist()
    return [[None if math.isnan(x) else x for x in row] for row in values]


def _values(k: int, row: list[float | None]) -> dict[str, Estimate3]:
    return {
        label("pass@k", k): (row[0], row[1], row[2]),
        label("pass^k", k): (row[3], row[4], row[5]),
    }


def _minima(k: int, row: list[float | None]) -> dict[str, float | None]:
    return {label("pass@k", k): row[0], label("pass^k", k): row[1]}


def decode_points(raw: bytes, k: int) -> list[list[Point]]:
    """Each tier's points (in time order) of one k's history string.

    Raises ValueError when ``raw`` is not a history string of this layout.
    """
    out: list[list[Point]] = []
    for index, records in enumerate(_tiers_of(raw)):
        used = np.sort(records, order="t")
        out.append(
            [
                Point(t=float(t), values=_values(k, row), tier=index, minima=_minima(k, low))
                for t, row, low in zip(
                    used["t"].tolist(), _triples(used["v"]), _triples(used["m"]), strict=True
                )
            ]
        )
    return out


def pass_hat_samples(
    raw: bytes,
    k: int,
    *,
    since: float | None = None,
    until: float | None = None,
    span: float | None = None,
) -> list[tuple[float, float | None, float | None, float | None]]:
    """(t, pass^k, low, high) of one k's history string with ``since <= t <= until``, in
    time order: the pass^k values ``merge({k: raw})`` gives, without building its points.
    With ``span`` (and ``since``), only the last of each span of that length counted from
    ``since``.

    The summary rows' trend after every tick reads this (one string a series,
    decoded by numpy), not the whole history. Raises ValueError when ``raw`` is
    not a history string of this layout.
    """
    tiers = _tiers_of(raw)
    newest = max((int(r["t"].max()) for r in tiers if len(r)), default=0)
    if newest == 0:
        return []
    reach = [(newest // tier.resolution - tier.capacity + 1) * tier.resolution for tier in TIERS]
    times: list[npt.NDArray[np.int64]] = []
    codes: list[npt.NDArray[np.uint16]] = []
    for index, records in enumerate(tiers):
        t = records["t"].astype(np.int64)
        keep = _kept(t, index, reach, since, until)
        times.append(t[keep])
        codes.append(records["v"][keep][:, 3:6])
    t_all = np.concatenate(times)
    order = np.argsort(t_all, kind="stable")
    t_all, c_all = t_all[order], np.concatenate(codes)[order]
    if span is not None and since is not None and t_all.size:
        # Floor division as Python takes it (the rows bucket their trend the same way).
        bucket = (t_all - since) // span
        last = np.ones(t_all.size, dtype=bool)
        last[:-1] = bucket[1:] != bucket[:-1]
        t_all, c_all = t_all[last], c_all[last]
    rows = _triples(c_all)
    return [(float(t), row[0], row[1], row[2]) for t, row in zip(t_all.tolist(), rows, strict=True)]


def pass_hat_sample(point: Point, k: int) -> tuple[float, float | None, float | None, float | None]:
    """(t, pass^k, low, high) of ``point`` at ``k`` as ``pass_hat_samples`` reads it back
    once written (its values rounded to the stored codes)."""
    p, lo, hi = (_value(code) for code in _codes(point.values.get(label("pass^k", k))))
    return (point.t, p, lo, hi)


def _kept(
    t: npt.NDArray[np.int64],
    index: int,
    reach: Sequence[int],
    since: float | None,
    until: float | None,
) -> npt.NDArray[np.bool_]:
    """Which of tier ``index``'s records count: written, within the tier's reach, before
    every finer tier's reach (so no time appears twice), and within [since, until]."""
    keep = (t > 0) & (t >= reach[index])
    if index > 0:
        keep &= t < min(reach[:index])
    if since is not None:
        keep &= t >= since
    if until is not None:
        keep &= t <= until
    out: npt.NDArray[np.bool_] = keep
    return out


def merge(
    raws: Mapping[int, bytes],
    *,
    since: float | None = None,
    until: float | None = None,
) -> list[Point]:
    """One time-sorted list of points from each k's history string (k -> its bytes).

    Tier i's reach starts at the start of the oldest bucket it can hold,
    counted back from the newest point of the series; a record older than
    that is a leftover of a sparse past and is dropped. A tier's points count
    only before the reach of every finer tier, so no time appears twice.
    Points of the same time from different ks are one point. Raises
    ValueError when a string is not a history string of this layout.
    """
    decoded = {k: _tiers_of(raw) for k, raw in raws.items()}
    newest = max(
        (int(r["t"].max()) for tiers in decoded.values() for r in tiers if len(r)), default=0
    )
    if newest == 0:
        return []
    reach = [(newest // tier.resolution - tier.capacity + 1) * tier.resolution for tier in TIERS]
    by_time: dict[int, tuple[int, dict[str, Estimate3], dict[str, float | None]]] = {}
    for k, tiers in decoded.items():
        for index, records in enumerate(tiers):
            t = records["t"].astype(np.int64)
            kept = records[_kept(t, index, reach, since, until)]
            for when, row, low in zip(
                kept["t"].tolist(), _triples(kept["v"]), _triples(kept["m"]), strict=True
            ):
                tier, values, minima = by_time.setdefault(when, (index, {}, {}))
                values.update(_values(k, row))
                minima.update(_minima(k, low))
                if index < tier:
                    by_time[when] = (index, values, minima)
    return [
        Point(
            t=float(t),
            values=dict(sorted(values.items())),
            tier=tier,
            minima=dict(sorted(minima.items())),
        )
        for t, (tier, values, minima) in sorted(by_time.items())
    ]


def encode_transition(transition: Transition) -> bytes:
    return msgspec.msgpack.encode(
        (
            transition.t,
            transition.rule,
            transition.state,
            transition.severity,
            transition.reason,
        )
    )


_transition_decoder = msgspec.msgpack.Decoder(tuple[float, str, str, str | None, str | None])


def decode_transition(raw: bytes) -> Transition:
    """One stored transition; msgspec.DecodeError / ValidationError when it is not one."""
    t, rule, state, severity, reason = _transition_decoder.decode(raw)
    return Transition(t=t, rule=rule, state=state, severity=severity, reason=reason)
