"""Server-side SVG charts: an estimate over time with its interval as a band, and sparklines.

Pure string building, no I/O. Each history point is one ``circle.pt`` (an
UNKNOWN point is a hollow marker on the axis, ``circle.pt.unknown``), so a
reader (or a browser test) counts the points drawn against the history. A
gap in the value or the interval breaks the line and the band: nothing is
drawn where the history has no number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import NamedTuple

WIDTH = 720
HEIGHT = 240
PAD_LEFT = 56
PAD_RIGHT = 12
PAD_TOP = 12
PAD_BOTTOM = 28
SPARK_WIDTH = 120
SPARK_HEIGHT = 28


# A bucket's minimum this far under its last value is drawn (less is rounding).
DIP_SHOWN = 0.001


class Sample(NamedTuple):
    """One point of a series: time (unix s), value, interval; None = UNKNOWN or no CI.

    ``low``: the lowest value of the history bucket the point stands for (a dip shorter
    than the bucket); None when unknown or not from a history."""

    t: float
    value: float | None
    lo: float | None
    hi: float | None
    low: float | None = None


class Mark(NamedTuple):
    """An alert transition drawn on a chart."""

    t: float
    rule: str
    state: str


class Threshold(NamedTuple):
    """A rule's firing threshold drawn as a dashed line."""

    rule: str
    below: float


def pct(x: float) -> str:
    """A ratio as the pages and the CLI print it: ``85.0%``."""
    return f"{100 * x:.1f}%"


def _fmt(x: float) -> str:
    return f"{x:.1f}"


def clock(t: float, span: float) -> str:
    """An axis label: the time of day for spans under two days, else the date (UTC)."""
    moment = datetime.fromtimestamp(t, UTC)
    return moment.strftime("%H:%M") if span < 2 * 86400 else moment.strftime("%m-%d")


def utc(t: float) -> str:
    """A timestamp for people: ``2026-12-01 13:05:09 UTC``."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class _Frame:
    """Maps (t, value) into the drawing area of a chart."""

    def __init__(
        self,
        t0: float,
        t1: float,
        width: float,
        height: float,
        pad: tuple[float, ...],
        *,
        domain: tuple[float, float] = (0.0, 1.0),
    ):
        self.t0 = t0
        self.t1 = t1 if t1 > t0 else t0 + 1.0
        left, right, top, bottom = pad
        self.x0, self.x1 = left, width - right
        # The domain's low end at the bottom, its high end at the top.
        self.y0, self.y1 = height - bottom, top
        self.low, self.high = domain

    def x(self, t: float) -> float:
        return self.x0 + (t - self.t0) / (self.t1 - self.t0) * (self.x1 - self.x0)

    def y(self, v: float) -> float:
        share = (min(max(v, self.low), self.high) - self.low) / (self.high - self.low)
        return self.y0 + share * (self.y1 - self.y0)


def runs(samples: Iterable[Sample], present: str) -> list[list[Sample]]:
    """The samples split into runs where the attribute ``present`` names ("value" or "ci")."""
    out: list[list[Sample]] = []
    current: list[Sample] = []
    for s in samples:
        ok = s.value is not None if present == "value" else s.lo is not None and s.hi is not None
        if ok:
            current.append(s)
        elif current:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def _line(frame: _Frame, run: Sequence[Sample]) -> str:
    pts = " L".join(f"{_fmt(frame.x(s.t))},{_fmt(frame.y(s.value or 0.0))}" for s in run)
    return f"M{pts}"


def _band(frame: _Frame, run: Sequence[Sample]) -> str:
    upper = [f"{_fmt(frame.x(s.t))},{_fmt(frame.y(s.hi or 0.0))}" for s in run]
    lower = [f"{_fmt(frame.x(s.t))},{_fmt(frame.y(s.lo or 0.0))}" for s in reversed(run)]
    if len(run) == 1:  # one point: a short vertical bar, still a visible band
        x = frame.x(run[0].t)
        hi, lo = frame.y(run[0].hi or 0.0), frame.y(run[0].lo or 0.0)
        left, right = _fmt(x - 1.5), _fmt(x + 1.5)
        return f"M{left},{_fmt(hi)} L{right},{_fmt(hi)} L{right},{_fmt(lo)} L{left},{_fmt(lo)} Z"
    return "M" + " L".join(upper + lower) + " Z"


def chart(
    samples: Sequence[Sample],
    *,
    t0: float,
    t1: float,
    label: str,
    marks: Sequence[Mark] = (),
    thresholds: Sequence[Threshold] = (),
    anchor: float | None = None,
    domain: tuple[float, float] = (0.0, 1.0),
) -> str:
    """An SVG chart of one estimate from t0 to t1: line, interval band, points, marks.

    ``domain``: the values at the bottom and the top (a difference spans -1 to 1);
    the axis is labelled in percent (points of percent for a difference)."""
    frame = _Frame(t0, t1, WIDTH, HEIGHT, (PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM), domain=domain)
    low, high = domain
    signed = low < 0
    span = frame.t1 - frame.t0
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(label)} over time" data-points="{len(samples)}" '
        f'data-t0="{frame.t0!r}" data-t1="{frame.t1!r}">',
        f"<title>{escape(label)}</title>",
    ]
    for i in range(5):
        v = low + (high - low) * i / 4
        y = _fmt(frame.y(v))
        text = f"{100 * v:+.0f} pp" if signed else f"{100 * v:.0f}%"
        parts.append(
            f'<line class="grid" x1="{_fmt(frame.x0)}" x2="{_fmt(frame.x1)}" y1="{y}" y2="{y}"/>'
            f'<text class="axis" x="{_fmt(frame.x0 - 4)}" y="{y}" text-anchor="end" '
            f'dominant-baseline="middle">{text}</text>'
        )
    for i in range(5):
        t = frame.t0 + span * i / 4
        anchor_pos = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<text class="axis" x="{_fmt(frame.x(t))}" y="{HEIGHT - 8}" '
            f'text-anchor="{anchor_pos}">{clock(t, span)}</text>'
        )
    for th in thresholds:
        y = _fmt(frame.y(th.below))
        parts.append(
            f'<line class="threshold" x1="{_fmt(frame.x0)}" x2="{_fmt(frame.x1)}" y1="{y}" '
            f'y2="{y}" data-rule="{escape(th.rule)}"><title>{escape(th.rule)}: judged against '
            f"{_value(th.below, signed)}</title></line>"
        )
    for run in runs(samples, "ci"):
        parts.append(f'<path class="band" d="{_band(frame, run)}"/>')
    for run in runs(samples, "value"):
        parts.append(f'<path class="line" d="{_line(frame, run)}"/>')
    for s in samples:
        # A bucket's minimum below its last snapshot: the dip drawn down from the point.
        if s.value is not None and s.low is not None and s.low < s.value - DIP_SHOWN:
            x = _fmt(frame.x(s.t))
            parts.append(
                f'<line class="dip" x1="{x}" x2="{x}" y1="{_fmt(frame.y(s.value))}" '
                f'y2="{_fmt(frame.y(s.low))}" data-t="{s.t!r}" data-low="{s.low!r}">'
                f"<title>{utc(s.t)}: as low as {_value(s.low, signed)} in this interval"
                "</title></line>"
            )
    for s in samples:
        x = _fmt(frame.x(s.t))
        if s.value is None:
            parts.append(
                f'<circle class="pt unknown" cx="{x}" cy="{_fmt(frame.y0)}" r="2.5" '
                f'data-t="{s.t!r}"><title>{utc(s.t)}: UNKNOWN</title></circle>'
            )
            continue
        ci = (
            ""
            if s.lo is None or s.hi is None
            else f" [{_value(s.lo, signed)}, {_value(s.hi, signed)}]"
        )
        parts.append(
            f'<circle class="pt" cx="{x}" cy="{_fmt(frame.y(s.value))}" r="2.5" '
            f'data-t="{s.t!r}" data-v="{s.value!r}"><title>{utc(s.t)}: '
            f"{_value(s.value, signed)}{ci}</title></circle>"
        )
    for m in marks:
        x = _fmt(frame.x(m.t))
        parts.append(
            f'<line class="mark {escape(m.state)}" x1="{x}" x2="{x}" y1="{_fmt(frame.y1)}" '
            f'y2="{_fmt(frame.y0)}" data-t="{m.t!r}" data-rule="{escape(m.rule)}" '
            f'data-state="{escape(m.state)}"><title>{escape(m.rule)} {escape(m.state)} at '
            f"{utc(m.t)}</title></line>"
        )
    if anchor is not None:
        x = _fmt(frame.x(anchor))
        parts.append(
            f'<line class="anchor" x1="{x}" x2="{x}" y1="{_fmt(frame.y1)}" y2="{_fmt(frame.y0)}" '
            f'data-t="{anchor!r}"/>'
        )
    if not samples:
        parts.append(
            f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">'
            "no history in this range</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _value(v: float, signed: bool) -> str:
    return f"{100 * v:+.1f} pp" if signed else pct(v)


def sparkline(samples: Sequence[Sample]) -> str:
    """A small trend line of the values (no axes); empty text when there is no point."""
    known = [s for s in samples if s.value is not None]
    if not known:
        return '<span class="spark none">no history</span>'
    frame = _Frame(samples[0].t, samples[-1].t, SPARK_WIDTH, SPARK_HEIGHT, (2, 2, 2, 2))
    paths = "".join(
        f'<path class="line" d="{_line(frame, run)}"/>' for run in runs(samples, "value")
    )
    last = known[-1]
    dot = (
        f'<circle class="pt" cx="{_fmt(frame.x(last.t))}" cy="{_fmt(frame.y(last.value or 0.0))}" '
        'r="2"/>'
    )
    return (
        f'<svg class="spark" viewBox="0 0 {SPARK_WIDTH} {SPARK_HEIGHT}" role="img" '
        f'aria-label="trend" data-points="{len(samples)}">{paths}{dot}</svg>'
    )
