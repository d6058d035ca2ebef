"""Importing result files into a suite: each trial counted once for good.

``results`` reads a file into trials; ``import_file`` names the suite and the
run, and applies the trials through ``Store.apply_import``, whose per-suite
ledger makes a repeated or resumed import count nothing twice. Files in the
wire format (``wire``) stream through ``import_events`` in bounded memory,
their events validated by the live path's decoder and their trial ids kept.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from reliabilityd.config import Config
from reliabilityd.events import TrialEvent, decode, validate
from reliabilityd.importers._detect import FORMATS, ImportFileError, detect
from reliabilityd.importers._read import read
from reliabilityd.importers.trials import (
    Parsed,
    check_run,
    suite_name,
    task_name,
    trial_events,
)
from reliabilityd.importers.wire import MAX_PIECE, Pieces, WireFileError, looks_like_wire
from reliabilityd.store import Store
from reliabilityd.store._ingest import CHUNK

__all__ = [
    "FORMATS",
    "WIRE",
    "ImportFileError",
    "ImportReport",
    "Parsed",
    "describe",
    "detect",
    "import_events",
    "import_file",
    "read",
    "suite_name",
    "task_name",
]


class ImportReport(msgspec.Struct, omit_defaults=True):
    """The outcome of one import, as printed by ``reliabilityd import``."""

    suite: str
    run: str
    format: str
    file: str
    events: int
    counted: int
    errors: int
    skips: int
    duplicates: int
    already: int
    notes: list[str] = msgspec.field(default_factory=list)
    # The note of the first finished import of this run, when there was one.
    earlier: dict[str, Any] | None = None
    # Wire-format files: pieces the decoder refused, the first few reasons
    # ("line N: ..."), and every suite the file's events name.
    rejected: int = 0
    rejections: list[str] = msgspec.field(default_factory=list)
    suites: list[str] = msgspec.field(default_factory=list)


WIRE = "events"
# Wire pieces whose reasons a report keeps; the rest are only counted.
REASONS_SHOWN = 5
# Events held before they go to Redis: bounds a wire import's memory.
_WIRE_BATCH = 5 * CHUNK


async def import_file(
    store: Store,
    path: Path,
    *,
    suite: str | None = None,
    fmt: str | None = None,
    run: str | None = None,
    scorer: str | None = None,
    window: int | Callable[[str], int] = 0,
    dedup_ttl: int = 7200,
    config: Config | None = None,
) -> ImportReport:
    """Read ``path`` and apply its trials to the suite, each one once for good.

    ``window`` is the suite's window, or a function of the suite name giving it.
    A new suite is admitted as a live one is, within its grant's quota and
    ``stats.max_suites`` of ``config`` (the defaults without one); past them
    the import is refused. A file in the wire format (``fmt`` "events", or
    detected) goes to ``import_events``.
    """
    cfg = config if config is not None else Config()
    if fmt == WIRE or (fmt is None and _is_wire(path)):
        return await import_events(
            store, path, suite=suite, run=run, window=window, dedup_ttl=dedup_ttl, config=cfg
        )
    parsed = read(path, fmt, scorer=scorer)
    name = suite_name(suite if suite is not None else parsed.name or path.stem)
    run_id = check_run(run if run is not None else parsed.run)
    events = [
        TrialEvent(s, task, trial, outcome, run=run_id, url=url)
        for s, task, trial, outcome, url in trial_events(parsed, name, run_id)
    ]
    if not events:
        raise ImportFileError(f"{path}: no trials in this {parsed.format} file")
    for event in events:
        problem = validate(event)
        if problem:  # the mapping above should make this impossible
            raise ImportFileError(f"{path}: task {event.task!r}: {problem}")
    refused = await _admit(store, cfg, [name])
    if refused:
        raise ImportFileError(f"{path}: {refused[name]}")
    applied = await store.imports.apply_import(
        name,
        events,
        window=window(name) if callable(window) else window,
        dedup_ttl=dedup_ttl,
        recent=cfg.recent(name),
    )
    report = ImportReport(
        suite=name,
        run=run_id,
        format=parsed.format,
        file=path.name,
        events=len(events),
        counted=applied.counted,
        errors=applied.errors,
        skips=applied.skips,
        duplicates=applied.duplicates,
        already=applied.already,
        notes=parsed.notes,
    )
    note = {
        "format": parsed.format,
        "file": path.name,
        "events": len(events),
        "counted": applied.counted,
        "at": time.time(),
    }
    earlier = await store.imports.record_import(name, run_id, msgspec.json.encode(note))
    if earlier is not None:
        report.earlier = msgspec.json.decode(earlier)
    return report


async def _admit(store: Store, config: Config, suites: list[str]) -> dict[str, str]:
    """Suite -> why it is refused: the new ones past their grant's quota or the cap."""
    pools = {suite: config.pool_of(suite) for suite in suites}
    capped = await store.ingest.admit(pools, config.stats.max_suites)
    return {suite: config.suite_refusal(suite, cap) for suite, cap in capped.items()}


def _is_wire(path: Path) -> bool:
    if path.is_dir():
        return False
    try:
        with path.open("rb") as stream:
            return looks_like_wire(stream.read(1 << 16))
    except OSError:
        return False  # read() says why


async def import_events(
    store: Store,
    path: Path,
    *,
    suite: str | None = None,
    run: str | None = None,
    window: int | Callable[[str], int] = 0,
    dedup_ttl: int = 7200,
    config: Config | None = None,
) -> ImportReport:
    """Stream a wire-format file into its suites, each trial once for good.

    Every line (or array element) is decoded by ``events.decode``, as a live
    message is; refused ones are counted with their line numbers, the rest
    go through ``Store.apply_import`` in batches of at most 10,000 events, so
    memory stays bounded whatever the file's length. Trial ids are the
    file's own; ``suite`` replaces every event's suite; ``run`` (default: a
    hash of the file) names the import's note in each suite's ledger. New
    suites are admitted as in ``import_file``; the events of one refused are
    counted as rejected, with the reason.
    """
    cfg = config if config is not None else Config()
    rename = suite_name(suite) if suite is not None else None
    totals: dict[str, list[int]] = {}
    batch: dict[str, list[TrialEvent]] = defaultdict(list)
    held = 0
    rejected = 0
    reasons: list[str] = []

    async def flush() -> None:
        nonlocal rejected
        refused = await _admit(store, cfg, list(batch))
        for name, reason in refused.items():
            rejected += len(batch.pop(name))
            if len(reasons) < REASONS_SHOWN:
                reasons.append(reason)
        for name, events in batch.items():
            applied = await store.imports.apply_import(
                name,
                events,
                window=window(name) if callable(window) else window,
                dedup_ttl=dedup_ttl,
                recent=cfg.recent(name),
            )
            acc = totals.setdefault(name, [0, 0, 0, 0, 0, 0])
            for i, value in enumerate(
                (
                    len(events),
                    applied.counted,
                    applied.errors,
                    applied.skips,
                    applied.duplicates,
                    applied.already,
                )
            ):
                acc[i] += value
        batch.clear()

    try:
        with path.open("rb") as stream:
            pieces = Pieces(stream, str(path))
            for line, payload in pieces:
                good, bad = decode(payload, MAX_PIECE)
                for item in bad:
                    rejected += 1
                    if len(reasons) < REASONS_SHOWN:
                        reasons.append(f"line {line}: {item.reason}")
                if rename is not None:
                    good = [msgspec.structs.replace(e, suite=rename) for e in good]
                for event in good:
                    batch[event.suite].append(event)
                held += len(good)
                if held >= _WIRE_BATCH:
                    await flush()
                    held = 0
            await flush()
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot read: {exc.strerror}") from None
    except WireFileError as exc:
        raise ImportFileError(str(exc)) from None
    if not totals and not rejected:
        raise ImportFileError(f"{path}: no trial events in this file")
    run_id = check_run(run if run is not None else pieces.digest)
    names = sorted(totals)
    sums = [sum(acc[i] for acc in totals.values()) for i in range(6)]
    report = ImportReport(
        suite=names[0] if len(names) == 1 else f"({len(names)} suites)",
        run=run_id,
        format=WIRE,
        file=path.name,
        events=sums[0],
        counted=sums[1],
        errors=sums[2],
        skips=sums[3],
        duplicates=sums[4],
        already=sums[5],
        rejected=rejected,
        rejections=reasons,
        suites=names if len(names) > 1 else [],
    )
    for name in names:
        acc = totals[name]
        note = {"format": WIRE, "file": path.name, "events": acc[0], "counted": acc[1]}
        note["at"] = time.time()
        earlier = await store.imports.record_import(name, run_id, msgspec.json.encode(note))
        if earlier is not None and report.earlier is None:
            report.earlier = msgspec.json.decode(earlier)
    return report


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def describe(report: ImportReport) -> str:
    """Human-readable lines for the CLI."""
    lines = [
        f"imported {report.file} ({report.format}) into "
        + (f"{len(report.suites)} suites" if report.suites else f"suite {report.suite!r}")
        + ", "
        f"run {report.run!r}: {_n(report.events, 'event')}, "
        f"{_n(report.counted, 'counted trial')}, {_n(report.errors, 'error')}, "
        f"{_n(report.skips, 'skip')}, {_n(report.duplicates, 'duplicate')}, "
        f"{report.already} already imported before"
    ]
    if report.earlier is not None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(report.earlier.get("at", 0)))
        lines.append(
            f"run {report.run!r} was first imported at {when} "
            f"({report.earlier.get('counted')} trials counted then): nothing counts twice"
        )
    elif report.already and report.already == report.events:
        lines.append(
            "every trial was in the ledger already (counted live by an integration "
            "such as the Inspect hook, or imported before): nothing counts twice"
        )
    if report.suites:
        lines.append(f"suites: {', '.join(report.suites)}")
    if report.rejected:
        more = report.rejected - len(report.rejections)
        lines.append(
            f"{report.rejected} rejected (not counted)"
            + (f"; the first {len(report.rejections)}:" if more else ":")
        )
        lines += [f"  {r}" for r in report.rejections]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
