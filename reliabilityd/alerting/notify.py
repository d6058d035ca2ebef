"""Alert notifications: what a page says, and how Alertmanager reads it.

Two kinds: ``Notification`` (a rule's transition on one suite, decided by
the evaluator and delivered through the outboxes) and ``BlindNotice`` (this
daemon cannot judge because Redis is unusable; sent straight to the sinks
that do not need Redis). Receivers can drop the rare repeat by ``id``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote

import msgspec

from reliabilityd.alerting.rules import AlertState, Rule, Trigger
from reliabilityd.config import Config
from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.lottery import LotteryCase
from reliabilityd.stats.snapshot import Snapshot, rfc3339

BLIND_ALERT = "ReliabilitydBlind"
WATCHDOG_ALERT = "ReliabilitydWatchdog"


class Notification(msgspec.Struct, frozen=True, kw_only=True):
    """What a person paged needs: the numbers, the thresholds, where to look first."""

    id: str
    rule: str
    suite: str
    metric: str
    k: int
    # What the rule breaches on: "detector" or "ci-low".
    trigger: Trigger
    state: Literal["firing", "resolved"]
    repeat: bool = False
    reason: str | None
    value: float | None
    ci_low: float | None
    ci_high: float | None
    below: float
    resolve_above: float
    tasks: int
    runs: int
    started_at: str | None
    ended_at: str | None = None
    severity: str
    lottery: list[LotteryCase]
    at: str
    generator_url: str | None = None


class BlindNotice(msgspec.Struct, frozen=True, kw_only=True):
    """This daemon cannot judge any rule: Redis is unusable (``reason`` says how)."""

    id: str
    alert: str = BLIND_ALERT
    instance: str
    state: Literal["firing", "resolved"]
    reason: str
    since: str
    ended_at: str | None = None
    severity: str
    at: str


def build(
    config: Config,
    *,
    rule: Rule,
    suite: str,
    state: AlertState,
    estimate: Estimate,
    snap: Snapshot,
    now: float,
    repeat: bool = False,
) -> Notification:
    """The notification of one transition, from the snapshot it was decided on."""
    if state.state not in ("firing", "resolved"):
        raise ValueError(f"only firing and resolved states notify, not {state.state!r}")
    return Notification(
        id=f"{suite}/{rule.name}/{state.seq}",
        rule=rule.name,
        suite=suite,
        metric=rule.metric,
        k=rule.k,
        trigger=rule.trigger,
        state=state.state,
        repeat=repeat,
        reason=state.reason,
        value=estimate.value,
        ci_low=estimate.ci_low,
        ci_high=estimate.ci_high,
        below=rule.below,
        resolve_above=rule.resolve_at,
        tasks=estimate.tasks,
        runs=estimate.runs,
        started_at=None if state.started_at is None else rfc3339(state.started_at),
        ended_at=None if state.ended_at is None else rfc3339(state.ended_at),
        severity=rule.severity,
        lottery=snap.lottery.rows[:3],
        at=rfc3339(now),
        generator_url=generator_url(config, suite, rule.name),
    )


def parse_time(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def generator_url(config: Config, suite: str, rule: str) -> str | None:
    if not config.external_url:
        return None
    base = config.external_url.rstrip("/")
    return f"{base}/suites/{quote(suite, safe='')}?rule={quote(rule, safe='')}"


def _pct(x: float | None) -> str:
    return "UNKNOWN" if x is None else f"{x:.3f}"


def describe(n: Notification) -> str:
    label = n.metric.replace("k", str(n.k))
    head = (
        f"{label} of suite {n.suite!r} = {_pct(n.value)}, "
        f"CI [{_pct(n.ci_low)}, {_pct(n.ci_high)}] over {n.tasks} tasks ({n.runs}+ runs each)"
    )
    bound = "lower bound " if n.trigger == "ci-low" else ""
    if n.state == "resolved":
        return f"{head}: {bound}back at or above {n.resolve_above:.3f}"
    if n.reason == "stale":
        return f"{head}: no counted trial for too long (stale suite)"
    if n.reason == "unknown":
        return f"{head}: the value is UNKNOWN (too few trials for k={n.k})"
    if n.trigger == "ci-low":
        return f"{head}: lower bound below {n.below:.3f}"
    return f"{head}: the change detector says below {n.below:.3f}"


def alertmanager_alert(n: Notification, *, now: float, resend_interval: float) -> dict[str, Any]:
    """One alert in the shape of Alertmanager's POST /api/v2/alerts body."""
    alert: dict[str, Any] = {
        "labels": {
            "alertname": n.rule,
            "suite": n.suite,
            "metric": n.metric,
            "k": str(n.k),
            "severity": n.severity,
        },
        "annotations": {
            "summary": describe(n),
            "value": _pct(n.value),
            "ci_low": _pct(n.ci_low),
            "ci_high": _pct(n.ci_high),
            "below": f"{n.below:.3f}",
            "resolve_above": f"{n.resolve_above:.3f}",
            "tasks": str(n.tasks),
            "runs": str(n.runs),
            "lottery_cases": ", ".join(f"{c.task} ({c.c}/{c.n})" for c in n.lottery) or "none",
        },
    }
    if n.started_at:
        alert["startsAt"] = n.started_at
    if n.state == "resolved":
        alert["endsAt"] = n.ended_at or n.at
    else:
        # A firing alert that stops being re-sent resolves by itself after
        # this, as with Prometheus: a dead reliabilityd cannot page forever.
        alert["endsAt"] = rfc3339(now + 4 * resend_interval)
    if n.generator_url:
        alert["generatorURL"] = n.generator_url
    return alert


def blind_alert(n: BlindNotice, *, now: float, resend_interval: float) -> dict[str, Any]:
    """The blind notice as an Alertmanager alert (re-sent while it lasts, like any firing one)."""
    alert: dict[str, Any] = {
        "labels": {"alertname": n.alert, "instance": n.instance, "severity": n.severity},
        "annotations": {
            "summary": (
                f"reliabilityd instance {n.instance!r} cannot judge any alert rule since "
                f"{n.since}: {n.reason}"
            ),
            "reason": n.reason,
        },
        "startsAt": n.since,
    }
    if n.state == "resolved":
        alert["endsAt"] = n.ended_at or n.at
    else:
        alert["endsAt"] = rfc3339(now + 4 * resend_interval)
    return alert


def watchdog_alert(instance: str, *, now: float, resend_interval: float) -> dict[str, Any]:
    """The always-firing heartbeat alert: its absence at a dead man's switch pages."""
    return {
        "labels": {"alertname": WATCHDOG_ALERT, "instance": instance, "severity": "none"},
        "annotations": {
            "summary": (
                f"reliabilityd instance {instance!r} is running and can judge its rules; "
                "this alert always fires, and its absence means the daemon is gone or blind"
            )
        },
        "endsAt": rfc3339(now + 4 * resend_interval),
    }
