"""The last trials of each task and the last failures of each suite.

Three keys per suite, under its hash tag:

* ``trials`` (list): the trial log. The apply script pushes each chunk's
  records onto its head in one string, as the caller built them here
  (``chunk_records``), with the version the call made and the positions of
  the chunk's duplicates: ``<version> \\x1d <positions> \\x1d <records>``,
  the records ``<position> \\x1f <code><trial> \\x1f <ts> \\x1f <run> \\x1f
  <url>`` joined by ``\\x1e``. One LPUSH per chunk, so a trial costs the
  apply no command and no Lua work of its own (benchmarks/bench_ingest.py).
* ``recent`` (hash): task -> its last ``Recent.trials`` records, oldest
  first, joined by ``\\x1e`` (``<code><trial> \\x1f <ts> \\x1f <run> \\x1f <url>``).
* ``failures`` (list): ``<task> \\x1f <record>``, newest first, at most
  ``Recent.failures``.

``fold`` moves the log's entries into ``recent`` and ``failures`` (one call,
checked against the log's tail so two writers never fold one entry twice),
once the log holds ``FOLD_AT`` entries, and before a task is forgotten or
expired. Readers merge the log's unfolded entries with ``recent``: the last
trials are exact whether folded or not. Names, runs and urls hold no control
character (the wire format refuses them), so the separators never occur in
a field. A record's url is stored only when no suite template builds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urljoin

import msgspec

from reliabilityd.store import _runs
from reliabilityd.store._base import Redis, _text
from reliabilityd.store._scripts import FOLD
from reliabilityd.store._triallog import entry, unfolded

# Records per task when the config names none, and failures per suite.
DEFAULT_TRIALS = 10
DEFAULT_FAILURES = 50
# Log entries at which the apply's caller folds; the most the log keeps (past
# it, the oldest unfolded entries are dropped: only when folds cannot keep up).
FOLD_AT = 32
LOG_CAP = 256
# Entries one fold step reads (the oldest): bounds the folding process's memory
# (a 2,000-event chunk's entry is about 80 KB).
FOLD_STEP = 4
_OUTCOMES = {"p": "pass", "f": "fail"}


class Recent(msgspec.Struct, frozen=True):
    """What one suite keeps: records per task, failures per suite, the url or not."""

    trials: int = DEFAULT_TRIALS
    failures: int = DEFAULT_FAILURES
    # False when the suite's url_template builds every link: the url costs no memory.
    keep_url: bool = True
    # Runs whose per-task counts the suite keeps (store/_runs.py), 0 = none.
    runs: int = _runs.DEFAULT_RUNS


class TrialRecord(msgspec.Struct, frozen=True):
    """One recent trial of a task as stored: ``url`` is the event's, unresolved."""

    task: str
    trial: str
    outcome: str
    ts: float
    run: str | None = None
    url: str | None = None


def chunk_records(
    events: Iterable[tuple[str, str, str, str | None, str | None, str | None]],
    now: str,
    *,
    runs_only: bool = False,
) -> str:
    """One chunk's records: (task, code, trial, ts or None, run, url) per event, in order.

    Errors and skips get none (they are not trials); their positions are skipped.
    ``runs_only`` (a suite that keeps no recent trials, only per-run counts):
    a trial without a run gets none either.
    """
    return "\x1e".join(
        f"{i}\x1f{task}\x1f{code}{trial}\x1f{ts or now}\x1f{run or ''}\x1f{url or ''}"
        for i, (task, code, trial, ts, run, url) in enumerate(events, 1)
        if code in {"p", "f"} and (run or not runs_only)
    )


def _record(task: str, raw: str) -> TrialRecord | None:
    parts = raw.split("\x1f")
    if len(parts) != 4 or not parts[0]:
        return None
    head, ts, run, url = parts
    try:
        stamp = float(ts)
    except ValueError:
        return None
    return TrialRecord(
        task, head[1:], _OUTCOMES.get(head[0], head[0]), stamp, run or None, url or None
    )


async def fold(client: Redis, keys: Any, suite: str, recent: Recent, *, down_to: int = 0) -> bool:
    """Fold the suite's trial log, oldest entries first, ``FOLD_STEP`` at a time, until
    it holds at most ``down_to``; False when a concurrent fold or trim changed the log
    first (that step writes nothing; the other writer folds).

    Records of tasks the suite no longer holds (forgotten, expired) are dropped.
    """
    log = keys.suite(suite, "trials")
    while True:
        length = int(await client.llen(log))
        if length <= down_to:
            return True
        if not await _fold_step(client, keys, suite, recent, min(FOLD_STEP, length - down_to)):
            return False


async def _fold_step(client: Redis, keys: Any, suite: str, recent: Recent, count: int) -> bool:
    log = keys.suite(suite, "trials")
    entries = await client.lrange(log, -count, -1)
    if not entries:
        return True
    pairs = unfolded(entries)
    per_task: dict[str, list[str]] = {}
    for task, rec in pairs:
        per_task.setdefault(task, []).append(rec)
    names = list(per_task)
    added = _runs.deltas(entries) if recent.runs else {}
    held: list[Any] = []
    current: list[Any] = []
    ranked: list[Any] = []
    stored: list[Any] = []
    if names:
        pipe = client.pipeline(transaction=False)
        pipe.hmget(keys.suite(suite, "tasks"), names)
        pipe.hmget(keys.suite(suite, "recent"), names)
        pipe.zrange(keys.suite(suite, "runs"), 0, -1, withscores=True)
        for run, delta in added.items():
            pipe.hmget(keys.suite(suite, f"run:{run}"), list(delta.tasks))
        held, current, ranked, *stored = await pipe.execute()
    alive = {t for t, h in zip(names, held, strict=True) if h is not None}
    fields: list[str] = []
    failures: list[str] = []
    if recent.trials:
        for task, cur in zip(names, current, strict=True):
            if task in alive:
                old = _text(cur).split("\x1e") if cur else []
                fields += (task, "\x1e".join((old + per_task[task])[-recent.trials :]))
        failures = [f"{t}\x1f{r}" for t, r in pairs if r[:1] == "f" and t in alive]
        failures = failures[-recent.failures :] if recent.failures else []
    run_keys, run_args = _runs.fold_args(keys, suite, added, stored, alive, recent.runs, ranked)
    oldest, newest = entry(entries[-1])[0], entry(entries[0])[0]
    reply = await client.eval(
        FOLD,
        5 + len(run_keys),
        log,
        keys.suite(suite, "recent"),
        keys.suite(suite, "failures"),
        keys.suite(suite, "runs"),
        keys.suite(suite, "run"),
        *run_keys,
        len(entries),
        oldest,
        newest,
        max(1, recent.failures),
        len(fields) // 2,
        len(failures),
        *fields,
        *failures,
        *run_args,
    )
    return bool(int(reply))


def _sorted(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Newest first: by time, then by commit order (``records`` are oldest first)."""
    order = sorted(range(len(records)), key=lambda i: (records[i].ts, i), reverse=True)
    return [records[i] for i in order]


class TaskTrials(msgspec.Struct, frozen=True):
    """Some tasks of a suite, read together (``read_tasks``): the (n, c) of each the suite
    holds, and each one's last trials, newest first (an empty list: none kept)."""

    counts: dict[str, tuple[int, int]]
    trials: dict[str, list[TrialRecord]]


async def read_tasks(
    client: Redis, keys: Any, suite: str, tasks: Sequence[str], *, keep: int = DEFAULT_TRIALS
) -> TaskTrials:
    """The counts and last ``keep`` trials of each of ``tasks`` the suite holds, in one
    round trip (one pipeline: the tasks' counts, the trial log, their rings) whatever
    the number of tasks. A task the suite does not hold (never counted, forgotten,
    expired) is in neither mapping."""
    names = list(dict.fromkeys(tasks))
    if not names:
        return TaskTrials({}, {})
    pipe = client.pipeline(transaction=False)
    pipe.hmget(keys.suite(suite, "tasks"), names)
    pipe.lrange(keys.suite(suite, "trials"), 0, -1)
    pipe.hmget(keys.suite(suite, "recent"), names)
    held, entries, rings = await pipe.execute()
    counts: dict[str, tuple[int, int]] = {}
    for name, value in zip(names, held, strict=True):
        if value is None:
            continue
        n, _, rest = _text(value).partition(":")
        c = rest.partition(":")[0]
        if n.isdigit() and c.isdigit():
            counts[name] = (int(n), int(c))
    per_task: dict[str, list[TrialRecord]] = {name: [] for name in counts}
    for name, ring in zip(names, rings, strict=True):
        if name in per_task and ring:
            raws = _text(ring).split("\x1e")
            per_task[name] = [rec for r in raws if (rec := _record(name, r)) is not None]
    for name, raw in unfolded(entries):
        if name in per_task and (rec := _record(name, raw)) is not None:
            per_task[name].append(rec)
    # Each task's last `keep` in commit order (the folded ones, then the log's), newest first.
    # keep = 0 (a suite keeping runs but no trials): the log holds records for the runs only.
    return TaskTrials(
        counts, {name: recs[-keep:][::-1] if keep > 0 else [] for name, recs in per_task.items()}
    )


async def read(
    client: Redis,
    keys: Any,
    suite: str,
    task: str | None = None,
    *,
    failed: bool = False,
    limit: int = 20,
    keep: int = DEFAULT_TRIALS,
) -> list[TrialRecord]:
    """The suite's recent trials, newest first: one task's last ``keep`` (or, with
    ``failed``, its failures among them), or without ``task`` the suite's last
    failures (``failed``) or every task's last trials, at most ``limit``."""
    if keep <= 0:
        return []  # the suite keeps no trials (its log, if any, is for its runs)
    if task is not None:
        mine = (await read_tasks(client, keys, suite, [task], keep=keep)).trials.get(task, [])
        return [r for r in mine if not failed or r.outcome == "fail"][:limit]
    pipe = client.pipeline(transaction=False)
    pipe.lrange(keys.suite(suite, "trials"), 0, -1)
    if failed:
        pipe.lrange(keys.suite(suite, "failures"), 0, -1)
    else:
        pipe.hgetall(keys.suite(suite, "recent"))
    entries, stored = await pipe.execute()
    pairs = unfolded(entries)
    if failed:
        pairs = [(t, r) for t, r in pairs if r[:1] == "f"]
    names = sorted({t for t, _ in pairs})
    if names:
        held = await client.hmget(keys.suite(suite, "tasks"), names)
        alive = {t for t, h in zip(names, held, strict=True) if h is not None}
        pairs = [(t, r) for t, r in pairs if t in alive]
    fresh = [rec for t, r in pairs if (rec := _record(t, r)) is not None]
    older: list[TrialRecord] = []
    if failed:
        for kept in reversed(stored):  # the list is newest first
            name, sep, r = _text(kept).partition("\x1f")
            if sep and (rec := _record(name, r)) is not None:
                older.append(rec)
    else:
        for name, value in stored.items():
            for r in _text(value).split("\x1e"):
                if (rec := _record(_text(name), r)) is not None:
                    older.append(rec)
    return _sorted([*older, *fresh])[:limit]


def link(
    *,
    suite: str,
    task: str,
    trial: str,
    run: str | None,
    url: str | None,
    template: str = "",
    base: str = "",
) -> str | None:
    """A trial's link: the suite's ``template`` filled in, else the event's url, a
    relative one resolved against ``base`` (left relative without one); None when
    neither gives one."""
    if template:
        values = {"suite": suite, "task": task, "trial": trial, "run": run or ""}
        return template.format(**{k: quote(v, safe="") for k, v in values.items()})
    if url is None:
        return None
    if base and not _has_scheme(url):
        return urljoin(base, url)
    return url


def linked(
    records: Iterable[TrialRecord], suite: str, *, base: str = "", template: str = ""
) -> list[TrialRecord]:
    """``records`` with each ``url`` made its link (``link``): the template filled in,
    else the event's url resolved against ``base``."""
    return [
        msgspec.structs.replace(
            r,
            url=link(
                suite=suite,
                task=r.task,
                trial=r.trial,
                run=r.run,
                url=r.url,
                template=template,
                base=base,
            ),
        )
        for r in records
    ]


def _has_scheme(url: str) -> bool:
    head, sep, _ = url.partition(":")
    return bool(sep) and head[:1].isalpha() and all(c.isalnum() or c in "+.-" for c in head)
