"""What is watched: every alert rule as it judges one series, the one list every surface reads.

A configured rule watches more than one thing: a threshold rule each suite
its glob matches, and with ``slices = true`` each slice of those suites too
(as ``<rule>[<slice id>]``, ``threshold.for_slice``); a canary rule one
comparison per pair of sides (``canary.pairs``). ``watches`` expands the
config's rules into those units, a ``Watch`` each, from the suites Redis
knows and their slices. The evaluator and the canary judge judge exactly
these; the pages, ``status``, ``history``, ``/metrics``, the Client and the
JSON reads list exactly these (``alerting.registry`` reads their states),
so no surface can show a rule another does not.

``describe`` says in words what breaches a rule and what resolves it, from
its trigger, so each surface describes a rule the same way. Pure.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import msgspec

from reliabilityd.rules.canary import CanaryRule, Pair, pairs
from reliabilityd.rules.threshold import Rule, for_slice
from reliabilityd.stats.slices import shown

__all__ = ["Kind", "Watch", "describe", "involving", "sliced_suites", "watches"]

Kind = Literal["threshold", "canary"]


class Watch(msgspec.Struct, frozen=True, kw_only=True):
    """One rule on one series: its stored name, the suite whose hash tag holds its state.

    ``rule`` is the rule as it judges (a slice's named ``<rule>[<slice>]``);
    ``slice`` the slice it judges (threshold rules with ``slices = true``);
    ``pair`` a canary's two sides.
    """

    rule: Rule | CanaryRule
    suite: str
    slice: str | None = None
    pair: Pair | None = None

    @property
    def name(self) -> str:
        """The name its state, outboxes and transitions are stored under."""
        return self.rule.name

    @property
    def kind(self) -> Kind:
        return "canary" if isinstance(self.rule, CanaryRule) else "threshold"

    @property
    def configured(self) -> str:
        """The name of the ``[[alerts]]`` table it comes from."""
        if self.slice is not None:
            return self.name[: -len(self.slice) - 2]
        return self.name

    @property
    def reads(self) -> frozenset[str]:
        """The suites whose data it judges: its suite, or both sides' suites of a canary."""
        return self.pair.suites if self.pair is not None else frozenset((self.suite,))

    @property
    def baseline(self) -> str | None:
        return None if self.pair is None else self.pair.baseline.label

    @property
    def candidate(self) -> str | None:
        return None if self.pair is None else self.pair.candidate.label


def sliced_suites(rules: Iterable[Rule], suites: Iterable[str]) -> list[str]:
    """The suites whose slices a ``slices = true`` rule watches (their slice ids are needed)."""
    sliced = [r for r in rules if r.slices]
    return [s for s in suites if any(fnmatch.fnmatchcase(s, r.suite) for r in sliced)]


def watches(
    alerts: Sequence[Rule | CanaryRule],
    suites: Sequence[str],
    slices: Mapping[str, Sequence[str]],
) -> list[Watch]:
    """Every rule of ``alerts`` on every series it watches, in the config's order.

    ``suites`` are the suites Redis knows; ``slices`` each one's slice ids
    (needed only for ``sliced_suites``). Per threshold rule: each matching
    suite, then, with ``slices = true``, each of their slices. Per canary:
    each comparison (``canary.pairs``), homed on the candidate's suite.
    """
    out: list[Watch] = []
    for rule in alerts:
        if isinstance(rule, CanaryRule):
            out += [Watch(rule=rule, suite=p.home, pair=p) for p in pairs(rule, suites)]
            continue
        matched = [s for s in suites if fnmatch.fnmatchcase(s, rule.suite)]
        out += [Watch(rule=rule, suite=s) for s in matched]
        if rule.slices:
            out += [
                Watch(rule=for_slice(rule, sid), suite=s, slice=sid)
                for s in matched
                for sid in slices.get(s, ())
            ]
    return out


def involving(all_watches: Iterable[Watch], suite: str, slice: str | None = None) -> list[Watch]:
    """The watches a suite's page lists: those that read it (a canary on either side).

    With ``slice``: the slice's own rules only.
    """
    if slice is not None:
        return [w for w in all_watches if w.suite == suite and w.slice == slice]
    return [w for w in all_watches if suite in w.reads]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f} pp"


def describe(watch: Watch | Rule | CanaryRule) -> str:
    """What breaches the rule and what resolves it, in words, from its trigger."""
    rule = watch.rule if isinstance(watch, Watch) else watch
    metric = rule.metric.replace("k", str(rule.k))
    if isinstance(rule, CanaryRule):
        pair = watch.pair if isinstance(watch, Watch) else None
        sides = (
            f"{pair.candidate.label} - {pair.baseline.label}"
            if pair is not None
            else "candidate - baseline"
        )
        text = (
            f"Compares {metric} of {sides} over the tasks both sides have: fires when the "
            f"difference's upper bound is under {_pp(-rule.margin)} (the candidate is worse "
            f"by more than {100 * rule.margin:.1f} pp), resolves when it is back at "
            f"{_pp(-rule.resolve_at)} or above."
        )
    elif rule.trigger == "ci-low":
        text = (
            f"Fires when the lower bound of {metric}'s interval is under {_pct(rule.below)}, "
            f"resolves when it is back at {_pct(rule.resolve_at)} or above."
        )
    elif rule.trigger == "rate":
        text = (
            f"Fires when each task's outcomes, against its reference rate from counts with a "
            f"{rule.half_life / 3600:g} h half-life, say {metric} fell toward "
            f"{_pct(rule.below)} (at most one false alarm in {rule.budget_days:g} days at "
            f"those rates), or the interval's upper bound is "
            f"under {_pct(rule.below)}; an alarm holds {rule.hold:g} s; resolves when the "
            f"estimate is back at {_pct(rule.resolve_at)} or above."
        )
    else:
        level = (
            f", the whole windows' evidence that it is under {_pct(rule.below)} reaches "
            f"{rule.level_evidence:g} nats"
            if rule.level_evidence > 0
            else ""
        )
        text = (
            f"Fires when the change detector's evidence that {metric} fell to "
            f"{_pct(rule.below)} or under reaches {rule.evidence:g} nats (over each task's "
            f"last {rule.recent} outcomes){level}, or the interval's upper bound is under "
            f"{_pct(rule.below)}; resolves when the estimate is back at "
            f"{_pct(rule.resolve_at)} or above."
        )
    extra = []
    if rule.for_seconds > 0:
        extra.append(f"a breach must hold {rule.for_seconds:g} s before it fires")
    if isinstance(rule, Rule) and rule.stale_after is not None:
        extra.append(f"fires too after {rule.stale_after:g} s without a counted trial")
    if rule.on_unknown == "alert":
        extra.append("UNKNOWN fires")
    if isinstance(watch, Watch) and watch.slice is not None:
        extra.insert(0, f"judged on the slice {shown(watch.slice)} alone")
    return text if not extra else f"{text} ({'; '.join(extra)}.)"
