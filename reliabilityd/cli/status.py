"""What ``reliabilityd status``, ``cases``, ``tasks``, ``reset`` and ``forget`` print and do.

Reads go through ``AsyncClient``; the numbers shown are the daemon's last
snapshot (values and CIs of one version), or, with ``--k``, computed on
demand from the stored histogram for any k.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import msgspec

from reliabilityd.alerting import registry
from reliabilityd.alerting.notify import parse_time
from reliabilityd.alerting.registry import RuleStatus, Watched, suite_json
from reliabilityd.cli._rejected import rejected_summary
from reliabilityd.client._client import AsyncClient, SuiteSummary
from reliabilityd.config import Config
from reliabilityd.rules import CanaryRule, Rule
from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.estimators import METRICS
from reliabilityd.stats.slices import label_keys, shown
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Counters, Row, Series, TrialRecord, Undecodable


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def format_estimate(est: Estimate | None) -> str:
    """`10.0% [0.0, 25.0]`, `UNKNOWN (3 of 20 tasks short)` or `-` when not computed."""
    if est is None:
        return "-"
    if est.value is None:
        short = est.left_out
        total = est.tasks + est.left_out
        return f"UNKNOWN ({short} of {total} tasks short)" if total else "UNKNOWN (no tasks)"
    ci = "" if est.ci is None else f" [{_pct(est.ci[0])}, {_pct(est.ci[1])}]"
    left = f" ({est.left_out} left out)" if est.left_out else ""
    return f"{_pct(est.value)}%{ci}{left}"


def _age(ts: float | None, now: float) -> str:
    if ts is None:
        return "never"
    seconds = max(0.0, now - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def status_rows(
    summary: SuiteSummary,
    computed: dict[int, dict[str, Estimate]] | None,
    now: float,
    row: Row | None = None,
) -> list[list[str]]:
    """One row per k: from the snapshot (or the series' summary row), or from on-demand
    estimates when given."""
    snap = summary.snapshot
    per_k: dict[int, dict[str, Estimate]] = {}
    if computed is not None:
        per_k = computed
    elif isinstance(snap, Snapshot):
        for est in [*snap.pass_at_k, *snap.pass_hat_k]:
            per_k.setdefault(est.k, {})[est.metric] = est
    elif row is not None:
        for est in [*row.estimates("pass@k"), *row.estimates("pass^k")]:
            per_k.setdefault(est.k, {})[est.metric] = est
    age = _age(summary.counters.last_trial_at, now)
    name = summary.suite if summary.slice is None else f"  [{shown(summary.slice)}]"
    base = [name, str(summary.tasks), str(summary.counters.trials)]
    if not per_k:
        what = "snapshot undecodable" if isinstance(snap, Undecodable) else "no snapshot yet"
        return [[*base, "-", "-", f"{what} (--k K computes now)", "", age]]
    rows = []
    for k in sorted(per_k):
        ests = per_k[k]
        runs = max((e.runs for e in ests.values()), default=0)
        rows.append(
            [
                *base,
                str(k),
                str(runs),
                format_estimate(ests.get("pass@k")),
                format_estimate(ests.get("pass^k")),
                age,
            ]
        )
    return rows


def slice_notes(summary: SuiteSummary) -> list[str]:
    """What ``status`` says of a suite's slicing: overflow, and labels no slice splits by."""
    notes = []
    overflow = summary.counters.slice_overflow
    if overflow:
        notes.append(
            f"{summary.suite}: {overflow} events counted in the suite but in no slice (their "
            f"slice would pass its most slices; {len(summary.slices)} slices)"
        )
    sliced = label_keys(summary.slices)
    unsliced = [key for key in summary.labels_seen if key not in sliced]
    if unsliced:
        notes.append(f"{summary.suite}: labels seen, not sliced: {', '.join(unsliced)}")
    return notes


def alert_row(status: RuleStatus) -> list[str]:
    """One line of ``status``'s alert table: the suite holding the state, the rule as
    stored (``<rule>[<slice>]`` on a slice), its state, since when, why, and what it
    watches (a canary's candidate against its baseline, with the latest difference)."""
    since = ""
    if status.state in ("pending", "firing") and status.started_at is not None:
        since = "since " + datetime.fromtimestamp(status.started_at).astimezone().isoformat(
            timespec="seconds"
        )
    if status.state == "undecodable":
        reason = f"({status.error})"
    else:
        reason = f"({status.reason})" if status.reason and status.state != "resolved" else ""
    metric = status.metric.replace("k", str(status.k))
    if status.kind == "canary":
        diff = "UNKNOWN" if status.difference is None else f"{100 * status.difference:+.1f} pp"
        ci = "" if status.ci is None else f" [{100 * status.ci[0]:+.1f}, {100 * status.ci[1]:+.1f}]"
        what = f"canary {metric}: {status.candidate} - {status.baseline} = {diff}{ci}"
    else:
        where = "" if status.slice is None else f" on slice {shown(status.slice)}"
        what = f"{status.trigger} {metric}{where}"
    return [status.suite, status.name, status.state, since, reason, what]


async def status(
    client: AsyncClient,
    suite: str | None,
    *,
    ks: Sequence[int],
    rules: Sequence[Rule | CanaryRule],
    as_json: bool,
    n_boot: int = 2000,
    where: str = "this Redis",
    out: Callable[[str], None] = print,
    config: Config | None = None,
) -> int:
    """Print the suites' numbers and alerts; 2 when the suite asked for is not there.

    With ``config``'s ``[[grants]]``, the whole deployment's view ends with
    each grant's suites against its quota."""
    suites = await client.suites()
    if suite is not None:
        if suite not in suites:
            missing(suite, where)
            return 2  # a usage error (EXIT_USAGE): the suite named does not exist
        suites = [suite]
    now = time.time()
    rows: dict[Series, Row] = {}
    if suite is None and not ks and not as_json:
        # The whole deployment: the summary rows the tick wrote, a few round trips.
        summaries, rows = await _from_rows(client, suites)
    else:
        summaries = [await client.summary(s) for s in suites]
    computed: dict[str, dict[int, dict[str, Estimate]]] = {}
    for s in summaries if ks else []:
        computed[s.suite] = {
            k: {m: await client.estimate(s.suite, k, m, n_boot=n_boot) for m in METRICS} for k in ks
        }
    if as_json:
        # The suite's JSON read as GET /suites/<suite> serves it: the snapshot with its
        # slices' snapshots and every rule that reads the suite (alerting.registry).
        docs: list[object] = []
        every = await _statuses(client, rules, suite)
        for s in summaries:
            alerts = [w.status() for w in registry.reading(every, s.suite)]
            if ks:
                docs.append(
                    {
                        "suite": s.suite,
                        "tasks": s.tasks,
                        "trials": s.counters.trials,
                        "pass_at_k": [computed[s.suite][k]["pass@k"] for k in ks],
                        "pass_hat_k": [computed[s.suite][k]["pass^k"] for k in ks],
                        "alerts": alerts,
                    }
                )
            elif isinstance(s.snapshot, Undecodable):
                docs.append({"suite": s.suite, "undecodable": s.snapshot.error, "alerts": alerts})
            elif s.snapshot is None:
                docs.append({"suite": s.suite, "alerts": alerts})
            else:
                raw = await suite_json(client.store, rules, s.suite, watched=every)
                docs.append(msgspec.Raw(raw) if raw is not None else {"suite": s.suite})
        out(msgspec.json.encode(docs[0] if suite is not None else docs).decode())
        return 0
    # One suite's: its own and the unattributable ones, two fields a minute.
    only = None if suite is None else [suite]
    rejected = rejected_summary(await client.store.reads.rejected_counts(now, only=only), suite)
    if not summaries:
        out(f"no suites yet in {where}: nothing has been counted there under this prefix")
        if rejected:
            out(rejected)
        return 0
    table: list[list[str]] = []
    notes = []
    for s in summaries:
        table += status_rows(s, computed.get(s.suite), now, rows.get(Series(s.suite)))
        for sid in s.slices:
            part_row = rows.get(Series(s.suite, sid))
            if part_row is not None:
                part = _summary_of(part_row, s.suite, sid)
            else:
                part = await client.summary(s.suite, slice=sid)
            table += status_rows(part, None, now, part_row)
        notes += slice_notes(s)
    out(
        _table(
            [
                "SUITE",
                "TASKS",
                "TRIALS",
                "K",
                "RUNS",
                "PASS@K % [CI]",
                "PASS^K % [CI]",
                "LAST TRIAL",
            ],
            table,
        )
    )
    out(
        "(RUNS: the fewest trials among the tasks estimated at that k; "
        "tasks with fewer than k trials are left out)"
    )
    if notes:
        out("")
        out("\n".join(notes))
    # Every rule on every series it watches, from the registry every surface reads:
    # threshold rules, slice rules (<rule>[<slice>]) and canaries on their candidate suite.
    alert_rows = [alert_row(w.status()) for w in await _statuses(client, rules, suite)]
    if alert_rows:
        out("")
        out(_table(["SUITE", "RULE", "STATE", "SINCE", "REASON", "WATCHES"], alert_rows))
    if rejected:
        out("")
        out(rejected)
    if config is not None and config.grants and suite is None:
        out("")
        out(grants_line(config, await client.store.reads.pool_sizes()))
    return 0


def grants_line(config: Config, sizes: Mapping[str, int]) -> str:
    """Each grant's suites against its quota, then the shared pool's."""
    parts = [
        f"{g.name} {sizes.get(g.name, 0)} of {g.max_suites}"
        for g in config.grants
        if g.max_suites is not None
    ]
    shared = config.stats.max_suites - config.reserved_suites
    parts.append(f"shared {sizes.get('', 0)} of {shared}")
    return f"suites by grant: {', '.join(parts)} (stats.max_suites {config.stats.max_suites})"


def _summary_of(row: Row, suite: str, slice: str | None, **more: list[str]) -> SuiteSummary:
    """A series' summary as of its newest snapshot, from its summary row."""
    counters = Counters(
        trials=row.trials,
        version=row.version,
        last_trial_at=None if row.last_trial_at is None else parse_time(row.last_trial_at),
        slice_overflow=row.slice_overflow,
    )
    return SuiteSummary(suite, row.tasks, counters, None, slice=slice, **more)


async def _from_rows(
    client: AsyncClient, suites: Sequence[str]
) -> tuple[list[SuiteSummary], dict[Series, Row]]:
    """Each suite's summary from the rows (its slices and labels in one round trip each);
    a suite without a row (no snapshot yet) is read alone, so its counts still show."""
    rows = {
        Series(r.suite, r.slice): r for r in await client.store.rows.every() if isinstance(r, Row)
    }
    slices = await client.store.reads.slices_of(suites)
    labels = await client.store.reads.labels_seen_many(suites)
    out = []
    for s in suites:
        row = rows.get(Series(s))
        if row is None:
            out.append(await client.summary(s))
        else:
            out.append(_summary_of(row, s, None, slices=slices[s], labels_seen=labels[s]))
    return out, rows


async def _statuses(
    client: AsyncClient, rules: Sequence[Rule | CanaryRule], suite: str | None
) -> list[Watched]:
    return await registry.statuses(client.store, rules, suite=suite)


def missing(suite: str, where: str) -> None:
    """What ``status`` and ``tasks`` say of a suite the Redis they asked does not have."""
    print(f"reliabilityd: no suite named {suite!r} in {where}", file=sys.stderr)


async def cases(
    client: AsyncClient, suite: str, k: int, top: int, out: Callable[[str], None] = print
) -> int:
    rows = await client.cases(suite, k, top)
    if not rows and k == 1:
        # pass@1 and pass^1 are both c/n: no task has a gap at k=1, however it passes.
        out(
            f"no lottery cases at k=1 in {suite!r}: at k=1 pass@k and pass^k are equal, "
            "so no task can be one; try --k 2 or more"
        )
        return 0
    if not rows:
        out(f"no lottery cases at k={k} in {suite!r}: no task with n >= {k} passes only sometimes")
        return 0
    out(_table(["TASK", "N", "C"], [[r.task, str(r.n), str(r.c)] for r in rows]))
    return 0


async def tasks(
    client: AsyncClient,
    suite: str,
    *,
    where: str = "this Redis",
    out: Callable[[str], None] = print,
) -> int:
    """Every task's n and c; 2, as ``status``, when the suite is not there."""
    if suite not in await client.suites():
        missing(suite, where)
        return 2  # a usage error (EXIT_USAGE): the suite named does not exist
    counts = await client.tasks(suite)
    if not counts:
        out(f"no tasks counted in {suite!r}")
        return 0
    out(_table(["TASK", "N", "C"], [[t, str(n), str(c)] for t, (n, c) in sorted(counts.items())]))
    return 0


def trials(
    rows: Sequence[TrialRecord],
    suite: str,
    task: str | None,
    *,
    as_json: bool = False,
    out: Callable[[str], None] = print,
) -> int:
    """Recent trials, newest first: a table (time UTC, task, trial, outcome, run, link) or JSON."""
    if as_json:
        out(msgspec.json.encode([msgspec.structs.asdict(r) for r in rows]).decode())
        return 0
    if not rows:
        where = f"task {task!r} of {suite!r}" if task is not None else repr(suite)
        out(f"no recent trials kept for {where} (stats.recent_trials = 0, or none counted yet)")
        return 0
    table = [
        [
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r.ts)),
            r.task,
            r.trial,
            r.outcome,
            r.run or "-",
            r.url or "-",
        ]
        for r in rows
    ]
    out(_table(["TIME", "TASK", "TRIAL", "OUTCOME", "RUN", "LINK"], table))
    return 0


def confirm(question: str, assume_yes: bool) -> bool:
    """Ask on the terminal; without one (scripts, CI) only --yes confirms."""
    if assume_yes:
        return True
    if not sys.stdin.isatty():
        print(f"reliabilityd: {question} Refusing without a terminal; pass --yes.", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
