"""Importing result files into a suite: each trial counted once for good.

``results`` reads a file into trials; ``import_file`` names the suite and the
run, and applies the trials through ``Store.apply_import``, whose per-suite
ledger makes a repeated or resumed import count nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from reliabilityd.events import TrialEvent, validate
from reliabilityd.importers.results import (
    FORMATS,
    ImportFileError,
    Parsed,
    check_run,
    detect,
    read,
    suite_name,
    task_name,
    trial_events,
)
from reliabilityd.store import Store

__all__ = [
    "FORMATS",
    "ImportFileError",
    "ImportReport",
    "Parsed",
    "describe",
    "detect",
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
) -> ImportReport:
    """Read ``path`` and apply its trials to the suite, each one once for good.

    ``window`` is the suite's window, or a function of the suite name giving it.
    """
    parsed = read(path, fmt, scorer=scorer)
    name = suite_name(suite if suite is not None else parsed.name or path.stem)
    run_id = check_run(run if run is not None else parsed.run)
    events = [
        TrialEvent(s, task, trial, outcome)
        for s, task, trial, outcome in trial_events(parsed, name, run_id)
    ]
    if not events:
        raise ImportFileError(f"{path}: no trials in this {parsed.format} file")
    for event in events:
        problem = validate(event)
        if problem:  # the mapping above should make this impossible
            raise ImportFileError(f"{path}: task {event.task!r}: {problem}")
    applied = await store.imports.apply_import(
        name,
        events,
        window=window(name) if callable(window) else window,
        dedup_ttl=dedup_ttl,
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


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def describe(report: ImportReport) -> str:
    """Human-readable lines for the CLI."""
    lines = [
        f"imported {report.file} ({report.format}) into suite {report.suite!r}, "
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
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
