"""Alert notifications: what a page says, and how Alertmanager reads it.

Two kinds: ``Notification`` (a rule's transition on one suite, decided by
the evaluator and delivered through the outboxes) and ``BlindNotice`` (this
daemon cannot judge because Redis is unusable; sent straight to the sinks
that do not need Redis). Receivers can drop the rare repeat by ``id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote

import msgspec

from reliabilityd.config import Config
from reliabilityd.rules import AlertState, Rule, Trigger
from reliabilityd.rules.canary import CanaryDetail, CanaryRule, detail
from reliabilityd.stats.compare import Comparison
from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.lottery import LotteryCase
from reliabilityd.stats.snapshot import Snapshot, rfc3339
from reliabilityd.store import TrialRecord, linked

BLIND_ALERT = "ReliabilitydBlind"
WATCHDOG_ALERT = "ReliabilitydWatchdog"


# The lottery cases a notification names, best debugging target first.
LOTTERY_CASES = 3


class FailingTrial(msgspec.Struct, frozen=True, kw_only=True):
    """The last failing trial of one of the top lottery cases, and where to read it.

    ``url`` is the suite's link template filled in, else the event's url
    (a relative one resolved against ``url_base``); None when neither gives
    one. The debugging advice made one click: diff this failure against a
    passing trial of the same task (``reliabilityd trials SUITE TASK``).
    """

    task: str
    trial: str
    at: str
    run: str | None = None
    url: str | None = None


class Notification(msgspec.Struct, frozen=True, kw_only=True):
    """What a person paged needs: the numbers, the thresholds, where to look first."""

    id: str
    rule: str
    suite: str
    metric: str
    k: int
    # What the rule breaches on: "detector", "rate", "ci-low", or "canary" (a compare rule).
    trigger: Trigger | Literal["canary"]
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
    # Of the lottery cases, the last failing trial of each that has one kept.
    failing_trials: list[FailingTrial] = msgspec.field(default_factory=list)
    # A canary rule's: the sides, margins and worse tasks. Then `value`,
    # `ci_low` and `ci_high` are candidate - baseline and its interval,
    # `below` is -margin (the upper bound's), `resolve_above` -resolve_margin,
    # `tasks` the shared tasks and `runs` the fewest trials of one on a side.
    canary: CanaryDetail | None = None


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
    failing: Sequence[TrialRecord] = (),
) -> Notification:
    """The notification of one transition, from the snapshot it was decided on, with
    ``failing``, the last failing trial of lottery cases, as links."""
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
        lottery=snap.lottery.rows[:LOTTERY_CASES],
        at=rfc3339(now),
        generator_url=generator_url(config, suite, rule.name, state.started_at),
        failing_trials=failing_trials(config, suite, failing),
    )


def failing_trials(
    config: Config, suite: str, records: Sequence[TrialRecord]
) -> list[FailingTrial]:
    """``records`` with their links built by the suite's settings (``Config.links``)."""
    base, template = config.links(suite)
    return [
        FailingTrial(task=r.task, trial=r.trial, at=rfc3339(r.ts), run=r.run, url=r.url)
        for r in linked(records, suite, base=base, template=template)
    ]


def build_canary(
    config: Config,
    *,
    rule: CanaryRule,
    suite: str,
    state: AlertState,
    comparison: Comparison,
    runs: int,
    now: float,
    repeat: bool = False,
) -> Notification:
    """The notification of one canary transition, from the comparison it was decided on."""
    if state.state not in ("firing", "resolved"):
        raise ValueError(f"only firing and resolved states notify, not {state.state!r}")
    diff = comparison.difference(rule.metric)
    return Notification(
        id=f"{suite}/{rule.name}/{state.seq}",
        rule=rule.name,
        suite=suite,
        metric=rule.metric,
        k=rule.k,
        trigger="canary",
        state=state.state,
        repeat=repeat,
        reason=state.reason,
        value=diff.value,
        ci_low=diff.ci_low,
        ci_high=diff.ci_high,
        below=-rule.margin,
        resolve_above=-rule.resolve_at,
        tasks=comparison.shared,
        runs=runs,
        started_at=None if state.started_at is None else rfc3339(state.started_at),
        ended_at=None if state.ended_at is None else rfc3339(state.ended_at),
        severity=rule.severity,
        lottery=[],
        at=rfc3339(now),
        generator_url=generator_url(config, suite, rule.name, state.started_at),
        canary=detail(rule, comparison),
    )


def parse_time(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def base_url(config: Config) -> str | None:
    """Where this daemon's pages are: ``external_url``, else the HTTP server's bound address.

    A server bound to every interface is named by the host name; None when
    the daemon serves no HTTP (``http.port = 0``) and no ``external_url`` is set.
    """
    if config.external_url:
        return config.external_url.rstrip("/")
    if not config.http.port:
        return None
    host = config.http.host
    if host in WILDCARD_HOSTS:
        import socket

        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{config.http.port}"


def generator_url(config: Config, suite: str, rule: str, at: float | None = None) -> str | None:
    """The suite's page opened at the rule (and at the breach's start ``at``, unix s)."""
    base = base_url(config)
    if base is None:
        return None
    url = f"{base}/suites/{quote(suite, safe='')}?rule={quote(rule, safe='')}"
    return url if at is None else f"{url}&at={at:.3f}"


def _pct(x: float | None) -> str:
    return "UNKNOWN" if x is None else f"{x:.3f}"


def _pp(x: float | None) -> str:
    return "UNKNOWN" if x is None else f"{100 * x:+.1f} pp"


def worse_tasks(d: CanaryDetail) -> str:
    """The tasks that got worse, with c/n on each side: ``task (9/10 -> 2/10)``."""
    return (
        ", ".join(
            f"{m.task} ({m.baseline_c}/{m.baseline_n} -> {m.candidate_c}/{m.candidate_n})"
            for m in d.worse
        )
        or "none"
    )


def _describe_canary(n: Notification, d: CanaryDetail) -> str:
    label = n.metric.replace("k", str(n.k))
    head = (
        f"{label} of {d.candidate!r} - {d.baseline!r} = {_pp(n.value)}, "
        f"CI [{_pp(n.ci_low)}, {_pp(n.ci_high)}] over {n.tasks} shared tasks"
    )
    if n.state == "resolved":
        return f"{head}: upper bound back at or above {_pp(-d.resolve_margin)}"
    if n.reason == "unknown":
        return f"{head}: {d.unknown_reason}"
    return (
        f"{head}: the candidate is worse by more than {100 * d.margin:.1f} pp; "
        f"worse: {worse_tasks(d)}"
    )


def describe(n: Notification) -> str:
    if n.canary is not None:
        return _describe_canary(n, n.canary)
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
    if n.trigger == "rate":
        return f"{head}: the tasks' failure rates say below {n.below:.3f}"
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
    if n.failing_trials:
        # One line a lottery case: its last failure's link (or its trial id).
        alert["annotations"]["failing_trials"] = "\n".join(
            f"{f.task}: {f.url or f.trial}" for f in n.failing_trials
        )
    if n.canary is not None:
        d = n.canary
        alert["labels"] |= {"baseline": d.baseline, "candidate": d.candidate}
        del alert["annotations"]["lottery_cases"]
        alert["annotations"] |= {
            "baseline_value": _pct(d.baseline_value),
            "candidate_value": _pct(d.candidate_value),
            "margin": f"{d.margin:.3f}",
            "resolve_margin": f"{d.resolve_margin:.3f}",
            "worse_tasks": worse_tasks(d),
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
