"""The suite lines of ``/metrics`` as they were written before the column-at-a-time
text of ``daemon._metrics_text``: one line at a time, each number by ``repr``.

Kept as the baseline ``bench_ci`` and ``bench_reads`` print beside the
daemon's text, and as the reference its unit test holds the daemon's bytes to.
``LineText`` keeps each series' lines by ``updated_at``, as the daemon did.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import inf, isnan
from typing import NamedTuple

from reliabilityd.alerting.notify import parse_time
from reliabilityd.daemon._metrics_text import ALERT_STATES, SuiteView, Summary
from reliabilityd.rules import AlertState
from reliabilityd.store import Gauges, Row, Series

Four = tuple[int, float | None, float | None, float | None]


def _estimates(summary: Summary, metric: str) -> list[Four]:
    """(k, value, low, high) of each k of one metric, from a row or a snapshot."""
    if isinstance(summary, Row | Gauges):
        return [c[:4] for c in getattr(summary, metric)]
    out: list[Four] = []
    for est in getattr(summary, metric):
        lo, hi = (None, None) if est.ci is None else est.ci
        out.append((est.k, est.value, lo, hi))
    return out


def _safe_time(text: str | None) -> float | None:
    """An RFC 3339 time from a snapshot, None when absent or unreadable."""
    try:
        return parse_time(text)
    except ValueError:
        return None


def _number(x: float) -> str:
    """A sample value as the text exposition format writes it."""
    if isnan(x):
        return "NaN"
    if x in (inf, -inf):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


def _label(value: str) -> str:
    """A label value escaped for the text exposition format."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, text: str, lines: Iterable[str]) -> str:
    return f"# HELP {name} {text}\n# TYPE {name} gauge\n" + "".join(lines)


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
# The families after the estimates, each with one line per snapshot at most.
_SUITE_FAMILIES = [
    ("reliabilityd_tasks", "Tasks in the suite's pool (n > 0)"),
    (
        "reliabilityd_slice_overflow_events",
        "Events counted in the suite but in no slice (past its most slices), as of its"
        " newest snapshot",
    ),
    ("reliabilityd_slices", "Slices of the suite, as of its newest snapshot"),
]
_SLICE_FAMILIES = [("reliabilityd_slice_tasks", "Tasks in the slice's pool (n > 0)")]


def _suite_lines(snap: Summary) -> list[str]:
    """One series' lines of each of its families but the age (it moves with the clock).

    A suite's: the estimate families, then ``_SUITE_FAMILIES``; a slice's
    (``snap.slice``): the ``reliabilityd_slice_*`` ones, then ``_SLICE_FAMILIES``.
    """
    out: list[str] = []
    suite = _label(snap.suite)
    series = f'suite="{suite}"'
    families = _ESTIMATE_FAMILIES
    if snap.slice is not None:
        series += f',slice="{_label(snap.slice)}"'
        families = _SLICE_ESTIMATE_FAMILIES
    for metric, names in families:
        value, low, high, unknown = [], [], [], []
        (v_name, _), (lo_name, _), (hi_name, _), (u_name, _) = names
        for k, v, lo, hi in _estimates(snap, metric):
            labels = f'{{{series},k="{k}"}} '
            if v is None:
                unknown.append(f"{u_name}{labels}1.0\n")
            else:
                unknown.append(f"{u_name}{labels}0.0\n")
                value.append(f"{v_name}{labels}{_number(v)}\n")
            if lo is not None and hi is not None:
                low.append(f"{lo_name}{labels}{_number(lo)}\n")
                high.append(f"{hi_name}{labels}{_number(hi)}\n")
        out.extend("".join(lines) for lines in (value, low, high, unknown))
    if snap.slice is not None:
        out.append(f"reliabilityd_slice_tasks{{{series}}} {float(snap.tasks)}\n")
        return out
    out.append(f"reliabilityd_tasks{{{series}}} {float(snap.tasks)}\n")
    if snap.slices or snap.slice_overflow:
        out.append(f"reliabilityd_slice_overflow_events{{{series}}} {float(snap.slice_overflow)}\n")
        out.append(f"reliabilityd_slices{{{series}}} {float(snap.slices)}\n")
    else:
        out += ["", ""]
    return out


def _state_name(state: AlertState | str) -> str:
    return state if isinstance(state, str) else state.state


class _Kept(NamedTuple):
    """One series' formatted lines, kept while its snapshot stays the same."""

    updated_at: str
    lines: list[str]
    # The age family's line without its value, and the time it counts from.
    age_prefix: str
    last_trial_at: float | None


class LineText:
    """The suite gauges as exposition text, from the view the last ``refresh`` read.

    Each series' lines (a suite's, a slice's) are formatted once per
    snapshot (kept by series and ``updated_at``) and the whole text once per
    view, so a scrape with nothing new serves the bytes it served before and
    one after a tick formats only the series that tick changed.
    """

    def __init__(self) -> None:
        self.view: SuiteView | None = None
        self._lines: dict[Series, _Kept] = {}
        self._alerts: dict[tuple[str, str, str], str] = {}
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
                [f"reliabilityd_redis_up {up}\n"],
            )
        ]
        if view is not None:
            parts += self._suite_families(view)
        body = "".join(parts).encode()
        self._rendered = (view, body)
        return body

    def _kept(self, snapshots: Sequence[Summary], fresh: dict[Series, _Kept]) -> list[_Kept]:
        """Each snapshot's lines: the kept ones while its snapshot stays, else formatted."""
        out: list[_Kept] = []
        for snap in snapshots:
            series = Series(snap.suite, snap.slice)
            kept = self._lines.get(series)
            if kept is None or kept.updated_at != snap.updated_at:
                kept = _Kept(
                    snap.updated_at,
                    _suite_lines(snap),
                    f'reliabilityd_last_trial_age_seconds{{suite="{_label(snap.suite)}"}} ',
                    _safe_time(snap.last_trial_at),
                )
            fresh[series] = kept
            out.append(kept)
        return out

    def _suite_families(self, view: SuiteView) -> list[str]:
        fresh: dict[Series, _Kept] = {}
        kept_all = self._kept(view.snapshots, fresh)
        slices_all = self._kept(view.slice_snapshots, fresh)
        # Series gone from the view drop their lines.
        self._lines = fresh
        names = [n for _, family in _ESTIMATE_FAMILIES for n in family]
        suite_names = [*names, *_SUITE_FAMILIES]
        parts = [
            _family(name, text, (kept.lines[i] for kept in kept_all))
            for i, (name, text) in enumerate(suite_names)
            if i < len(names) + 1  # tasks; the slice counts follow the age
        ]
        at = view.read_at
        age = [
            f"{kept.age_prefix}{_number(max(0.0, at - kept.last_trial_at))}\n"
            for kept in kept_all
            if kept.last_trial_at is not None
        ]
        parts.append(
            _family(
                "reliabilityd_last_trial_age_seconds",
                "Seconds since the suite's last counted trial, as of its newest snapshot",
                age,
            )
        )
        slice_names = [
            *(n for _, family in _SLICE_ESTIMATE_FAMILIES for n in family),
            *_SLICE_FAMILIES,
        ]
        parts += [
            _family(name, text, (kept.lines[i] for kept in slices_all))
            for i, (name, text) in enumerate(slice_names)
        ]
        parts += [
            _family(name, text, (kept.lines[i] for kept in kept_all))
            for i, (name, text) in enumerate(suite_names)
            if i > len(names)
        ]
        # A rule's four lines are formatted once per state it is in, and kept.
        alert_lines: dict[tuple[str, str, str], str] = {}
        for suite, rule, current in view.alerts:
            key = (suite, rule, _state_name(current))
            lines = self._alerts.get(key)
            if lines is None:
                labels = f'reliabilityd_alert_state{{suite="{_label(suite)}",rule="{_label(rule)}",'
                lines = "".join(
                    f'{labels}state="{s}"}} {1.0 if key[2] == s else 0.0}\n' for s in ALERT_STATES
                )
            alert_lines[key] = lines
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
                    f'reliabilityd_outbox_depth{{sink="{_label(sink)}"}} {float(depth)}\n'
                    for sink, depth in sorted(view.outbox.items())
                ),
            )
        )
        return parts
