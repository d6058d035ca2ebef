"""The registry of what is watched, read from Redis: every rule on every series, with its state.

``watched`` expands the config's ``[[alerts]]`` into ``rules.registry.Watch``
units from the suites (and slices) Redis knows: the evaluator and the canary
judge judge exactly those. ``statuses`` adds each one's stored state and,
for a canary, its latest comparison: what the pages, ``status``,
``history``, ``/metrics``, the Client and the JSON reads list. Every surface
reads through here, so a threshold rule, a slice rule (``<rule>[<slice>]``)
and a canary appear on each of them alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from reliabilityd.rules import AlertState, CanaryRule, Rule
from reliabilityd.rules.canary import CanaryView
from reliabilityd.rules.registry import Kind, Watch, describe, involving, sliced_suites, watches
from reliabilityd.stats.history import Transition
from reliabilityd.store import Series, Store, Undecodable

__all__ = [
    "RuleStatus",
    "Settled",
    "Watched",
    "reading",
    "statuses",
    "suite_json",
    "transitions",
    "watched",
    "with_settled",
    "with_states",
]

Alerts = Sequence[Rule | CanaryRule]
# The states a tick's verdicts left, by (suite, rule name): the one written or read, None
# where another replica's write won (``Evaluator.evaluate``, ``Canaries.judge``).
Settled = dict[tuple[str, str], AlertState | Undecodable | None]


class RuleStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One rule on one series as every surface shows it (and as JSON reads serve it).

    ``name`` is the stored name (``<rule>[<slice>]`` on a slice), ``rule`` the
    ``[[alerts]]`` table's; ``suite`` holds the state (a canary's candidate
    suite); ``trigger`` is ``detector``, ``ci-low`` or ``canary`` and
    ``description`` says what fires and resolves it. ``state`` is the stored
    state's name or ``undecodable`` (``error`` says why). A canary adds its
    sides and its latest comparison (``difference``, ``ci``, ``compared_at``).
    """

    name: str
    rule: str
    kind: Kind
    suite: str
    slice: str | None
    metric: str
    k: int
    severity: str
    trigger: str
    description: str
    state: str
    reason: str | None
    started_at: float | None
    ended_at: float | None
    error: str | None = None
    baseline: str | None = None
    candidate: str | None = None
    difference: float | None = None
    ci: tuple[float, float] | None = None
    compared_at: float | None = None


class Watched(msgspec.Struct, frozen=True):
    """A watch with what Redis holds of it: its state and (a canary's) latest comparison."""

    watch: Watch
    state: AlertState | Undecodable
    view: CanaryView | None = None

    def status(self) -> RuleStatus:
        w, s, v = self.watch, self.state, self.view
        rule = w.rule
        trigger = "canary" if isinstance(rule, CanaryRule) else rule.trigger
        known = s if isinstance(s, AlertState) else None
        return RuleStatus(
            name=w.name,
            rule=w.configured,
            kind=w.kind,
            suite=w.suite,
            slice=w.slice,
            metric=rule.metric,
            k=rule.k,
            severity=rule.severity,
            trigger=trigger,
            description=describe(w),
            state="undecodable" if known is None else known.state,
            reason=None if known is None else known.reason,
            started_at=None if known is None else known.started_at,
            ended_at=None if known is None else known.ended_at,
            error=s.error if isinstance(s, Undecodable) else None,
            baseline=w.baseline,
            candidate=w.candidate,
            difference=None if v is None else v.value,
            ci=None if v is None else v.ci,
            compared_at=None if v is None else v.at,
        )


async def watched(store: Store, alerts: Alerts, suites: Sequence[str] | None = None) -> list[Watch]:
    """Every rule of ``alerts`` on every series it watches (``rules.registry.watches``).

    ``suites``: the suites Redis knows, when the caller has read them.
    """
    if not alerts:
        return []
    if suites is None:
        suites = await store.reads.suites()
    thresholds = [a for a in alerts if isinstance(a, Rule)]
    slices = await store.reads.slices_of(sliced_suites(thresholds, suites))
    return watches(alerts, suites, slices)


async def statuses(
    store: Store,
    alerts: Alerts,
    *,
    suite: str | None = None,
    slice: str | None = None,
    suites: Sequence[str] | None = None,
) -> list[Watched]:
    """Every watch with its stored state (and a canary's latest comparison), in one
    round trip each; with ``suite`` only those that read it (a canary on either side's
    suite), with ``slice`` too only the slice's own rules."""
    ws = await watched(store, alerts, suites)
    if suite is not None:
        ws = involving(ws, suite, slice)
    return await with_states(store, ws)


async def with_states(store: Store, ws: Sequence[Watch]) -> list[Watched]:
    """The watches with their stored states and canary views."""
    states = await store.alerts.alert_states([(w.suite, w.name) for w in ws])
    canaries = [w for w in ws if w.pair is not None]
    views = dict(
        zip(
            [(w.suite, w.name) for w in canaries],
            await store.alerts.canary_views([(w.suite, w.name) for w in canaries]),
            strict=True,
        )
    )
    return [
        Watched(w, s, views.get((w.suite, w.name)) if w.pair is not None else None)
        for w, s in zip(ws, states, strict=True)
    ]


async def with_settled(store: Store, ws: Sequence[Watch], settled: Settled) -> list[Watched]:
    """The watches with the states a tick's verdicts left them in (no canary views); a
    state the verdicts do not know (none judged it, or another replica's write won) is
    read, all of those in one round trip."""
    missing = [(w.suite, w.name) for w in ws if settled.get((w.suite, w.name)) is None]
    read = dict(zip(missing, await store.alerts.alert_states(missing), strict=True))
    out = []
    for w in ws:
        state = settled.get((w.suite, w.name))
        out.append(Watched(w, state if state is not None else read[(w.suite, w.name)]))
    return out


async def transitions(
    store: Store,
    ws: Sequence[Watch],
    *,
    since: float | None = None,
    until: float | None = None,
    known: dict[Series, list[Transition]] | None = None,
) -> list[Transition]:
    """The transitions of the given watches, time-ordered, from the series each is recorded
    on (its suite's, a slice rule's slice's; a canary's on its home suite). ``known``: the
    transitions of series the caller has already read."""
    have = dict(known or {})
    wanted = list(dict.fromkeys(Series(w.suite, w.slice) for w in ws))
    missing = [s for s in wanted if s not in have]
    for series, trs in zip(
        missing,
        await store.history.transitions_many(missing, since=since, until=until),
        strict=True,
    ):
        have[series] = trs
    names = {(Series(w.suite, w.slice), w.name) for w in ws}
    out = [t for series in wanted for t in have[series] if (series, t.rule) in names]
    out.sort(key=lambda t: t.t)
    return out


def reading(all_watched: Sequence[Watched], suite: str, slice: str | None = None) -> list[Watched]:
    """Of ``statuses``' list, those a suite's reads show (``rules.registry.involving``)."""
    keep = {id(w) for w in involving([x.watch for x in all_watched], suite, slice)}
    return [x for x in all_watched if id(x.watch) in keep]


async def suite_json(
    store: Store,
    alerts: Alerts,
    suite: str,
    *,
    slice: str | None = None,
    watched: Sequence[Watched] | None = None,
) -> bytes | None:
    """A suite's JSON read (``GET /suites/<suite>``, ``status --json``): the stored snapshot
    document as stored, with ``slice_snapshots`` (each slice's stored snapshot, by slice id)
    and ``alerts`` (``RuleStatus`` of every rule that reads it) added; with ``slice``, the
    slice's document and its own rules. None when the series has no snapshot.
    ``watched``: ``statuses`` of every suite, when the caller has read them.
    """
    raw = await store.snapshots.snapshot_json(suite, slice=slice)
    if raw is None:
        return None
    body = raw.rstrip()
    if not body.endswith(b"}"):
        return raw  # damaged: served as stored, as the store holds it
    extra = b""
    if slice is None:
        ids = await store.reads.slices(suite)
        docs = await store.snapshots.snapshot_jsons([Series(suite, sid) for sid in ids])
        extra += b',"slice_snapshots":[' + b",".join(d for d in docs if d is not None) + b"]"
    if watched is None:
        watched = await statuses(store, alerts, suite=suite, slice=slice)
    else:
        watched = reading(watched, suite, slice)
    rules = [w.status() for w in watched]
    extra += b',"alerts":' + msgspec.json.encode(rules)
    return body[:-1] + extra + b"}"
