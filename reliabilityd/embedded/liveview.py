"""What the demo shows: each suite's numbers as read back from Redis, live or as plain lines.

``read`` takes everything from Redis through the Store (snapshot documents,
alert states, the alert history, each decoded by the store), never from the
daemon's memory, so what a person sees is what any other reader of Redis
would see; a document the store cannot decode shows as undecodable. The
rules come from the registry every surface reads (``alerting.registry``), so
a threshold rule, a slice rule (``<rule>[<slice>]``) and a canary (on both
of its sides' suites) are listed as ``status`` lists them.
``render`` builds the rich view for a terminal; ``plain`` the line a log or
CI gets instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import msgspec

from reliabilityd.alerting import registry
from reliabilityd.rules import AlertState, CanaryRule, Rule, Trigger
from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Store, Undecodable

if TYPE_CHECKING:
    from rich.console import RenderableType

ALERT_STYLE = {
    "inactive": ("ok", "green"),
    "pending": ("pending", "yellow"),
    "firing": ("FIRING", "bold white on red"),
    "resolved": ("resolved", "green"),
    "undecodable": ("undecodable", "yellow"),
}


class SuiteView(msgspec.Struct, frozen=True):
    suite: str
    snap: Snapshot | Undecodable | None
    # (rule name, its state) for each rule that reads this suite: its threshold rules,
    # its slices' rules as <rule>[<slice id>], the canaries on either side.
    alerts: list[tuple[str, AlertState | Undecodable]]


class Note(msgspec.Struct, frozen=True):
    """The fields of an alert notification that the demo prints."""

    rule: str
    suite: str
    state: str
    metric: str
    k: int
    trigger: Trigger | Literal["canary"]
    value: float | None
    ci_low: float | None
    ci_high: float | None
    below: float
    resolve_above: float
    tasks: int
    runs: int


async def read(store: Store, alerts: Sequence[Rule | CanaryRule]) -> list[SuiteView]:
    """Every suite's snapshot document and the state of each rule that reads it."""
    suites = await store.reads.suites()
    every = await registry.statuses(store, alerts, suites=suites)
    docs = await store.snapshots.documents(suites)
    return [
        SuiteView(suite, snap, [(w.watch.name, w.state) for w in registry.reading(every, suite)])
        for suite, snap in zip(suites, docs, strict=True)
    ]


async def new_notes(store: Store, key: str, seen: int) -> list[Note | str]:
    """Alert notifications appended to the history stream after the first ``seen``; an
    entry that is not a rule's notification (a blind notice, a corrupted entry) is the
    line that says so, never an error that stops the view."""
    raw = await store.alerts.alert_history(key)
    out: list[Note | str] = []
    for entry in raw[seen:]:
        try:
            out.append(msgspec.json.decode(entry, type=Note))
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            out.append(f"ALERT (an entry of the history that is not a rule's notification: {e})")
    return out


def state_name(state: AlertState | Undecodable) -> str:
    """A stored state's name, or "undecodable"."""
    return "undecodable" if isinstance(state, Undecodable) else state.state


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def est_text(est: Estimate | None) -> str:
    if est is None:
        return "-"
    if est.value is None:
        return "UNKNOWN"
    if est.ci is None:
        return pct(est.value)
    low, high = est.ci
    return f"{pct(est.value)} [{low * 100:.0f}, {high * 100:.0f}]"


def columns(ks: Sequence[int]) -> list[tuple[str, int]]:
    """(metric, k) per column: pass@k and pass^k per k; for k = 1 they are equal, one column."""
    out: list[tuple[str, int]] = []
    for k in ks:
        out.append(("pass@k", k))
        if k > 1:
            out.append(("pass^k", k))
    return out


def label(metric: str, k: int) -> str:
    return metric.replace("k", str(k))


def note_line(note: Note | str) -> str:
    """What an alert says, in the terms of the rule's trigger."""
    if isinstance(note, str):
        return note
    metric = label(note.metric, note.k)
    head = f"ALERT {note.state:<8} {note.rule} on {note.suite}: {metric}"
    if note.trigger == "canary":
        # value, ci_low and ci_high are candidate - baseline; below is -margin.
        diff = f"candidate - baseline {pct(note.value)} [{pct(note.ci_low)}, {pct(note.ci_high)}]"
        if note.state == "firing":
            return (
                f"{head} {diff}, worse by more than {pct(-note.below)} ({note.tasks} shared tasks)"
            )
        return f"{head} {diff}, within {pct(-note.resolve_above)}"
    if note.trigger == "ci-low":
        if note.state == "firing":
            return (
                f"{head} lower bound {pct(note.ci_low)} < {pct(note.below)} "
                f"({note.tasks} tasks, {note.runs} runs)"
            )
        return f"{head} lower bound {pct(note.ci_low)} >= {pct(note.resolve_above)}"
    if note.state == "firing":
        says = "the failure rates say" if note.trigger == "rate" else "the detector says"
        return (
            f"{head} {pct(note.value)} [{pct(note.ci_low)}, {pct(note.ci_high)}], {says} "
            f"under {pct(note.below)} ({note.tasks} tasks, {note.runs} runs)"
        )
    return f"{head} {pct(note.value)} >= {pct(note.resolve_above)}"


def plain(view: SuiteView, ks: Sequence[int], elapsed: float) -> str:
    """One line per suite, for logs and CI."""
    parts = [f"t={elapsed:5.1f}s", f"{view.suite:<16}"]
    snap = view.snap
    if snap is None:
        parts.append("(no snapshot yet)")
    elif isinstance(snap, Undecodable):
        parts.append("(snapshot undecodable)")
    else:
        parts += [f"tasks={snap.tasks}", f"trials={snap.trials}"]
        for metric, k in columns(ks):
            parts.append(f"{label(metric, k)}={est_text(snap.get(metric, k))}")
        if snap.lottery.rows:
            top = snap.lottery.rows[0]
            parts.append(f"lottery={top.task!r}({top.c}/{top.n})")
    for name, state in view.alerts:
        parts.append(f"alert[{name}]={state_name(state)}")
    return "  ".join(parts)


def rule_line(rule: Rule) -> str:
    metric = label(rule.metric, rule.k)
    if rule.trigger == "ci-low":
        return (
            f"alert {rule.name} on {rule.suite}: fires when the {metric} lower bound stays "
            f"< {pct(rule.below)} for {rule.for_seconds:g} s; resolves at >= {pct(rule.resolve_at)}"
        )
    if rule.trigger == "rate":
        return (
            f"alert {rule.name} on {rule.suite}: fires when the failure rates say {metric} < "
            f"{pct(rule.below)}; resolves at {metric} >= {pct(rule.resolve_at)}"
        )
    return (
        f"alert {rule.name} on {rule.suite}: fires when the detector says {metric} < "
        f"{pct(rule.below)} for {rule.for_seconds:g} s; resolves at {metric} >= "
        f"{pct(rule.resolve_at)}"
    )


def _line(text: str, style: str = "") -> RenderableType:
    from rich.text import Text

    # One terminal line each: a narrow terminal cuts the line, never the layout.
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def render(
    views: Sequence[SuiteView],
    ks: Sequence[int],
    *,
    header: str,
    phase: str,
    log: Sequence[str],
    footer: Sequence[str],
) -> RenderableType:
    """The whole screen; fits 100 columns, and degrades by cutting lines, not by folding."""
    from rich import box
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    table.add_column("suite", no_wrap=True)
    table.add_column("tasks", justify="right", no_wrap=True)
    table.add_column("trials", justify="right", no_wrap=True)
    for metric, k in columns(ks):
        table.add_column(f"{label(metric, k)} [95% CI]", justify="right", no_wrap=True)
    table.add_column("alert", justify="center", no_wrap=True)
    unknown: dict[str, str] = {}
    lottery: list[str] = []
    for view in views:
        snap = view.snap
        cells: list[Text | str] = [Text(view.suite, style="bold")]
        if not isinstance(snap, Snapshot):
            blank: list[Text | str] = ["-"] * len(columns(ks))
            if blank and snap is not None:
                blank[0] = Text("undecodable", style="yellow")
            cells += ["-", "-", *blank]
        else:
            cells += [str(snap.tasks), str(snap.trials)]
            for metric, k in columns(ks):
                est = snap.get(metric, k)
                text = est_text(est)
                cells.append(Text(text, style="yellow" if text == "UNKNOWN" else ""))
                if est is not None and est.unknown_reason:
                    # One line per suite: pass@k and pass^k are UNKNOWN for the same reason.
                    reason = est.unknown_reason.removeprefix("UNKNOWN: ")
                    unknown.setdefault(view.suite, reason)
            if snap.lottery.rows:
                rows = ", ".join(f"{r.task} ({r.c}/{r.n})" for r in snap.lottery.rows[:3])
                lottery.append(f"  {view.suite}: {rows}")
        # One line per rule that reads the suite; the name where more than one does.
        alert = Text("-") if not view.alerts else Text()
        for i, (name, state) in enumerate(view.alerts):
            word, style = ALERT_STYLE[state_name(state)]
            alert.append("\n" if i else "")
            alert.append(word if len(view.alerts) == 1 else f"{word} {name}", style=style)
        cells.append(alert)
        table.add_row(*cells)
    parts: list[RenderableType] = [
        _line(header, "bold"),
        _line(phase, "cyan"),
        table,
    ]
    parts += [_line(f"UNKNOWN {suite}: {reason}", "yellow") for suite, reason in unknown.items()]
    if lottery:
        parts.append(_line(f"lottery cases (pass@{max(ks)} - pass^{max(ks)} gap, top 3):"))
        parts += [_line(line) for line in lottery]
    parts.append(
        Panel(
            Group(*(_line(line) for line in log[-6:])),
            title="what happened (alerts as read back from the rel:alerts stream)",
            title_align="left",
        )
    )
    parts += [_line(line, "dim") for line in footer]
    return Group(*parts)
