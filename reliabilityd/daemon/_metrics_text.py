"""The suite and slice lines of ``/metrics``: formatted a family at a time, and kept.

A scrape reads the summary rows (``store.Row``, as ``store.Gauges``: written
after each tick), so its cost is a few HSCAN pages whatever the number of
suites; a ``Snapshot`` formats the same lines. The text is built a column at
a time rather than a line at a time: every series' estimates are laid out as
columns (k, value, low, high), every number of the view is written by one
msgspec JSON encode (``_texts``), and each family is one ``bytes.join`` over
its labels and its numbers, so a scrape runs a handful of C loops over the
series and no Python code per sample. The text is bytes from the encode on:
no decode, no final encode, and each family's lines are copied once into the
body. ``SuiteText`` keeps the families while
the view's series and their ``updated_at`` stay the same; only the ages (they
move with the clock) are written again.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from itertools import chain, compress, repeat
from math import inf, isnan
from operator import add, and_, attrgetter, is_not, itemgetter
from typing import NamedTuple

import msgspec
import numpy as np

from reliabilityd.alerting.notify import parse_time
from reliabilityd.rules import AlertState
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Gauges, Row
from reliabilityd.store._rows import no_gc

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ALERT_STATES = ("inactive", "pending", "firing", "resolved")
# Redis round trips are milliseconds; a commit that waits out an outage is seconds.
COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The kinds of source a dead letter comes from (its source is "<kind>:<where>").
SOURCES = ("mqtt", "stream", "http")
CI_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


Summary = Snapshot | Row | Gauges


class SuiteView(msgspec.Struct, frozen=True):
    """What one scrape read from Redis: each series' row (or snapshot), the rules' states."""

    snapshots: list[Summary]
    alerts: list[tuple[str, str, AlertState | str]]  # (suite, rule, state or its name)
    outbox: dict[str, int]  # sink -> entries waiting, over every suite and rule
    redis_up: bool
    read_at: float
    # The slices' rows or snapshots (each names its suite and slice).
    slice_snapshots: list[Summary] = msgspec.field(default_factory=list)


Four = tuple[int, float | None, float | None, float | None]


def _estimates(summary: Summary, metric: str) -> Sequence[Sequence[object]]:
    """(k, value, low, high, ...) of each k of one metric, from a row or a snapshot."""
    if isinstance(summary, Row | Gauges):
        ests: Sequence[Sequence[object]] = getattr(summary, metric)
        return ests
    out: list[Four] = []
    for est in getattr(summary, metric):
        lo, hi = (None, None) if est.ci is None else est.ci
        out.append((est.k, _float(est.value), _float(lo), _float(hi)))
    return out


def _float(x: float | None) -> float | None:
    return None if x is None else float(x)


def _safe_time(text: str | None) -> float | None:
    """An RFC 3339 time from a snapshot, None when absent or unreadable."""
    try:
        return parse_time(text)
    except ValueError:
        return None


def _number(x: float) -> bytes:
    """A sample value as the text exposition format writes it."""
    if isnan(x):
        return b"NaN"
    if x in (inf, -inf):
        return b"+Inf" if x > 0 else b"-Inf"
    return repr(float(x)).encode()


def _texts(numbers: list[float]) -> list[bytes]:
    """Each number as ``_number`` writes it, then a newline: all in one encode.

    msgspec's JSON text of a float is Python's ``repr`` of it at 0 and from 1e-4
    up to 1e16 (the values a gauge here takes); the others (an exponent, a
    negative, NaN or an infinity, which JSON writes as null) are written again
    one at a time; all of them are when one is no ``float``. A text with a
    point in every number and no exponent, null, string or run of four zeros
    after a point holds only floats of that range, and is taken whole.
    """
    if not numbers:
        return []
    try:
        text = msgspec.json.encode(numbers)
    except TypeError:  # no JSON number: written one at a time below
        text = b"null"
    out = text[1:-1].replace(b",", b"\n,").split(b",")
    out[-1] += b"\n"
    if (
        text.count(b".") == len(numbers)
        and len(out) == len(numbers)
        and not any(mark in text for mark in (b"e", b"n", b'"', b".0000"))
    ):
        return out
    if not set(map(type, numbers)) <= {float}:  # an int, a bool, a numpy scalar
        return [_number(float(x)) + b"\n" for x in numbers]
    values = np.asarray(numbers, dtype=float)
    with np.errstate(invalid="ignore"):
        plain = (values == 0.0) | ((values >= 1e-4) & (values < 1e16))
    for i in np.flatnonzero(~plain).tolist():
        out[i] = _number(numbers[i]) + b"\n"
    return out


def _label(value: str) -> str:
    """A label value escaped for the text exposition format."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(values: list[str]) -> list[bytes]:
    """``_label`` of each value, as UTF-8, in three replaces over all of them joined."""
    joined = "\x00".join(values)
    if joined.count("\x00") != len(values) - 1:  # a NUL in a value: one at a time
        return [_label(v).encode() for v in values]
    return _label(joined).encode().split(b"\x00") if values else []


def _header(name: str, text: str) -> bytes:
    return f"# HELP {name} {text}\n# TYPE {name} gauge\n".encode()


def _family(name: str, text: str, lines: Iterable[bytes]) -> bytes:
    return b"".join(chain((_header(name, text),), lines))


def _estimate_families(prefix: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """The per-(series, k) families, in exposition order: (name, help) by metric."""
    return [
        (
            metric,
            [
                (
                    f"{prefix}{metric}_ratio",
                    f"{label} point estimate of the newest snapshot (absent while UNKNOWN)",
                ),
                (
                    f"{prefix}{metric}_ci_lower_ratio",
                    f"Lower bound of the {label} cluster-bootstrap CI (absent while UNKNOWN)",
                ),
                (
                    f"{prefix}{metric}_ci_upper_ratio",
                    f"Upper bound of the {label} cluster-bootstrap CI (absent while UNKNOWN)",
                ),
                (
                    f"{prefix}{metric}_unknown",
                    f"1 while {label} is UNKNOWN (too few trials for k): visible, never a pass",
                ),
            ],
        )
        for metric, label in (("pass_at_k", "pass@k"), ("pass_hat_k", "pass^k"))
    ]


_ESTIMATE_FAMILIES = _estimate_families("reliabilityd_")
_SLICE_ESTIMATE_FAMILIES = _estimate_families("reliabilityd_slice_")
_TASKS = ("reliabilityd_tasks", "Tasks in the suite's pool (n > 0)")
_OVERFLOW = (
    "reliabilityd_slice_overflow_events",
    "Events counted in the suite but in no slice (past its most slices), as of its newest snapshot",
)
_SLICES = ("reliabilityd_slices", "Slices of the suite, as of its newest snapshot")
_SLICE_TASKS = ("reliabilityd_slice_tasks", "Tasks in the slice's pool (n > 0)")
_AGE = (
    "reliabilityd_last_trial_age_seconds",
    "Seconds since the suite's last counted trial, as of its newest snapshot",
)


_UNKNOWN = (b"1.0\n", b"0.0\n")  # by whether the value is known


def _decoded(summary: Summary) -> bool:
    return isinstance(summary, Row | Gauges)


@functools.cache
def _k_label(k: int) -> bytes:
    return f',k="{k}"}} '.encode()


def _joined(name: str, *columns: Iterable[bytes]) -> bytes:
    """The lines of one family: ``name`` then a string of each column, in one join."""
    return b"".join(chain.from_iterable(zip(repeat(name.encode()), *columns)))


def _series_families(snaps: Sequence[Summary], slices: bool) -> list[bytes]:
    """The lines of each family of ``snaps`` (suites', or slices' with ``slices``), in
    exposition order: the estimate families, then the tasks (then, for suites, the
    slice counts), each a series at a time and within one its estimates by k."""
    series = [b'{suite="' + s + b'"' for s in _labels([s.suite for s in snaps])]
    if slices:
        names = _labels([s.slice or "" for s in snaps])
        series = [a + b',slice="' + b + b'"' for a, b in zip(series, names, strict=True)]
    families = _SLICE_ESTIMATE_FAMILIES if slices else _ESTIMATE_FAMILIES
    out: list[bytes] = []
    decoded = all(map(_decoded, snaps))
    for metric, names4 in families:
        if decoded:
            ests: list[Sequence[Sequence[object]]] = list(map(attrgetter(metric), snaps))
        else:
            ests = [_estimates(s, metric) for s in snaps]
        flat = list(chain.from_iterable(ests))
        if not flat:
            out += [b"", b"", b"", b""]
            continue
        ks, values, lows, highs = (list(map(itemgetter(i), flat)) for i in range(4))
        # Each line's labels in two parts: its series' (one string a series), its k's.
        owners = list(chain.from_iterable(map(repeat, series, map(len, ests))))
        k_labels = list(map(_k_label, ks))
        known = list(map(is_not, values, repeat(None)))
        bounded = list(map(and_, map(is_not, lows, repeat(None)), map(is_not, highs, repeat(None))))
        texts = _texts(
            [*compress(values, known), *compress(lows, bounded), *compress(highs, bounded)]
        )
        n_known, n_bounded = sum(known), sum(bounded)
        (v_name, _), (lo_name, _), (hi_name, _), (u_name, _) = names4
        for name, mask, written in (
            (v_name, known, texts[:n_known]),
            (lo_name, bounded, texts[n_known : n_known + n_bounded]),
            (hi_name, bounded, texts[n_known + n_bounded :]),
        ):
            out.append(_joined(name, compress(owners, mask), compress(k_labels, mask), written))
        out.append(_joined(u_name, owners, k_labels, map(_UNKNOWN.__getitem__, known)))
    plain = [s + b"} " for s in series]  # a series' labels, closed
    counted = [bool(s.slices or s.slice_overflow) for s in snaps]
    numbers = [float(s.tasks) for s in snaps]
    if not slices:
        numbers += [float(s.slice_overflow) for s in compress(snaps, counted)]
        numbers += [float(s.slices) for s in compress(snaps, counted)]
    texts = _texts(numbers)
    n, m = len(snaps), sum(counted)
    out.append(_joined(_SLICE_TASKS[0] if slices else _TASKS[0], plain, texts[:n]))
    if not slices:
        out.append(_joined(_OVERFLOW[0], compress(plain, counted), texts[n : n + m]))
        out.append(_joined(_SLICES[0], compress(plain, counted), texts[n + m :]))
    return out


def _state_name(state: AlertState | str) -> str:
    return state if isinstance(state, str) else state.state


@functools.lru_cache(maxsize=64)  # states are a handful; a row could hold any string
def _state_lines(current: str) -> tuple[bytes, ...]:
    """What follows a rule's labels on each of its four lines, in ``current``."""
    return tuple(f'state="{s}"}} {1.0 if current == s else 0.0}\n'.encode() for s in ALERT_STATES)


class _Kept(NamedTuple):
    """The families of one view's series, kept while its series and snapshots stay."""

    key: list[tuple[str, str | None, str]]  # (suite, slice, updated_at) of each series
    suites: list[bytes]  # the estimate families and the tasks, of the suites
    counts: list[bytes]  # the slice counts, of the suites
    slices: list[bytes]  # every family of the slices
    # The age family's label of each suite with a last trial, and its time.
    ages: list[tuple[bytes, float]]


def _key(view: SuiteView) -> list[tuple[str, str | None, str]]:
    return [(s.suite, s.slice, s.updated_at) for s in (*view.snapshots, *view.slice_snapshots)]


class SuiteText:
    """The suite gauges as exposition text, from the view the last ``refresh`` read.

    The series' families are formatted once per set of snapshots (kept while
    every series and its ``updated_at`` stay) and the whole text once per view,
    so a scrape with nothing new writes only the ages again.
    """

    def __init__(self) -> None:
        self.view: SuiteView | None = None
        self._kept: _Kept | None = None
        self._times: dict[str, float | None] = {}
        self._alerts: dict[tuple[str, str, str], bytes] = {}
        self._rendered: tuple[SuiteView | None, bytes] | None = None

    def render(self) -> bytes:
        view = self.view
        if self._rendered is not None and self._rendered[0] is view:
            return self._rendered[1]
        up = 1.0 if view is not None and view.redis_up else 0.0
        parts = [
            _family(
                "reliabilityd_redis_up",
                "1 when this scrape could read the suites from Redis",
                [f"reliabilityd_redis_up {up}\n".encode()],
            )
        ]
        if view is not None:
            with no_gc():
                parts += self._suite_families(view)
        body = b"".join(parts)
        self._rendered = (view, body)
        return body

    def _families(self, view: SuiteView) -> _Kept:
        """The view's families: the kept ones while its series and snapshots stay."""
        key = _key(view)
        kept = self._kept
        if kept is not None and kept.key == key:
            return kept
        suites = _series_families(view.snapshots, slices=False)
        times = {t: self._times.get(t) for t in {s.last_trial_at for s in view.snapshots} if t}
        for text, at in times.items():
            times[text] = at if at is not None else _safe_time(text)
        self._times = times
        ages = [
            (b'reliabilityd_last_trial_age_seconds{suite="' + label + b'"} ', at)
            for s, label in zip(
                view.snapshots, _labels([s.suite for s in view.snapshots]), strict=True
            )
            if s.last_trial_at and (at := times[s.last_trial_at]) is not None
        ]
        self._kept = _Kept(
            key, suites[:9], suites[9:], _series_families(view.slice_snapshots, slices=True), ages
        )
        return self._kept

    def _suite_families(self, view: SuiteView) -> list[bytes]:
        kept = self._families(view)
        # Each family's header, then its lines: the body's join copies them once.
        names = [n for _, family in _ESTIMATE_FAMILIES for n in family]
        parts: list[bytes] = []
        for (name, text), lines in zip([*names, _TASKS], kept.suites, strict=True):
            parts += (_header(name, text), lines)
        at = view.read_at
        ages = _texts([max(0.0, at - t) for _, t in kept.ages])
        parts.append(_family(*_AGE, map(add, (label for label, _ in kept.ages), ages)))
        slice_names = [n for _, family in _SLICE_ESTIMATE_FAMILIES for n in family]
        for (name, text), lines in zip([*slice_names, _SLICE_TASKS], kept.slices, strict=True):
            parts += (_header(name, text), lines)
        for (name, text), lines in zip((_OVERFLOW, _SLICES), kept.counts, strict=True):
            parts += (_header(name, text), lines)
        # A rule's four lines are formatted once per state it is in, and kept.
        alert_lines: dict[tuple[str, str, str], bytes] = {}
        for suite, rule, current in view.alerts:
            key = (suite, rule, _state_name(current))
            four = self._alerts.get(key)
            if four is None:
                labels = f'reliabilityd_alert_state{{suite="{_label(suite)}",rule="{_label(rule)}",'
                labels_bytes = labels.encode()
                four = labels_bytes + labels_bytes.join(_state_lines(key[2]))
            alert_lines[key] = four
        self._alerts = alert_lines
        parts.append(
            _family(
                "reliabilityd_alert_state",
                "1 for the alert rule's current state on the suite, 0 for the others",
                alert_lines.values(),
            )
        )
        parts.append(
            _family(
                "reliabilityd_outbox_depth",
                "Notifications queued for a sink and not yet accepted by it",
                (
                    f'reliabilityd_outbox_depth{{sink="{_label(sink)}"}} {float(depth)}\n'.encode()
                    for sink, depth in sorted(view.outbox.items())
                ),
            )
        )
        return parts
