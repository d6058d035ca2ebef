"""Other harnesses' result files, read as trials: formats, their detection, names.

Formats (detected from the content, ``_detect``; or named with ``fmt``):

* ``tau-bench``: a JSON list of runs with ``task_id``, ``trial`` and ``reward``;
  a run passes when its reward is within 1e-6 of 1, as tau-bench's
  ``display_metrics`` counts it (a run that raised was saved with reward 0: a
  failure).
* ``tau2-bench``: ``simulations[]`` with ``task_id``, ``trial``,
  ``reward_info.reward`` and ``termination_reason``; an infrastructure error is
  an ``error`` (tau2-bench leaves it out of its metrics), a missing reward a
  failure.
* ``inspect``: an Inspect AI eval log (``.eval`` zip or ``.json``); one trial
  per sample and epoch, correct when the score's value converts (Inspect's
  default ``value_to_float``) to at least 1.0, as its ``pass_at`` / ``pass_k``
  reducers count; errored samples are ``error``, unscored (NaN) ones ``skip``.
* ``multivon``: a multivon-eval saved report (``to_json``); a case contributes
  ``runs`` trials with ``pass_count`` passes (older reports:
  ``round(run_pass_rate * runs)``), as ``EvalReport.from_dict`` reads it back,
  in the order of its per-run ``trials`` when the report lists them; errored
  and skipped cases become ``error`` / ``skip`` events, never in n or c.

Names: the suite is the caller's, else the one the file gives, else the file's
stem, mapped by ``suite_name``; tasks by ``task_name``. Trial ids are
``<run>/<trial in the file>``; the run id is the caller's or one derived from
the content (``content_run``), so two runs of the same tasks both count.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import unicodedata
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from reliabilityd.events import MAX_NAME_BYTES, NAME_FORBIDDEN, Outcome
from reliabilityd.importers._detect import (
    DETECT_BYTES,
    FORMATS,
    ImportFileError,
    detect,
    detect_head,
)

MAX_RUN_BYTES = 100
# What no name may hold (events.NAME_FORBIDDEN: control and invisible format
# characters, surrogates, noncharacters).
_CONTROL = NAME_FORBIDDEN
_SUITE_FORBIDDEN = re.compile(r"[{}/+#]")
_ZIP_MAGIC = b"PK\x03\x04"
_EPS = 1e-6


class Trial(msgspec.Struct, frozen=True):
    """One trial as the file records it; ``trial`` is local to the run."""

    task: str
    trial: str
    outcome: Outcome


class Parsed(msgspec.Struct):
    """What a reader found in one file."""

    format: str
    name: str | None
    run: str
    trials: list[Trial]
    notes: list[str] = msgspec.field(default_factory=list)


# --- names -----------------------------------------------------------------


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()


def _fit(name: str, limit: int = MAX_NAME_BYTES) -> str:
    """Cut to ``limit`` bytes of UTF-8, ending in ``~<8 hex>`` of the full name when cut."""
    raw = name.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return name
    head = raw[: limit - 9].decode("utf-8", "ignore")
    return f"{head}~{_digest(name)}"


def suite_name(raw: str) -> str:
    """A valid suite name for ``raw``.

    The name is normalised to NFC; ``{ } / + #`` and the characters no name
    may hold (``events.NAME_FORBIDDEN``) become ``_`` (so ``openai/gpt-4o``
    is ``openai_gpt-4o``), surrounding white space goes, and a name over 200
    bytes of UTF-8 keeps its first 191 bytes plus ``~`` and 8 hex digits of
    a hash of the whole name, so long names stay distinct.
    """
    name = _CONTROL.sub("_", _SUITE_FORBIDDEN.sub("_", unicodedata.normalize("NFC", raw))).strip()
    return _fit(name) if name else "imported"


def task_name(raw: str) -> str:
    """A valid task name: NFC; forbidden characters (newlines of a prompt) become spaces; cut."""
    name = _CONTROL.sub(" ", unicodedata.normalize("NFC", raw)).strip()
    return _fit(name) if name else "(empty)"


def content_run(data: bytes) -> str:
    """A run id derived from content: 16 hex digits of its BLAKE2b hash."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def check_run(run: str) -> str:
    if not run or len(run.encode()) > MAX_RUN_BYTES or _CONTROL.search(run):
        raise ImportFileError(
            f"run id {run!r} must be 1 to {MAX_RUN_BYTES} bytes without control characters"
        )
    return run


def read(path: Path, fmt: str | None = None, *, scorer: str | None = None) -> Parsed:
    """Read one result file (``fmt`` None: detect it); a directory means its results.json.

    A file longer than ``DETECT_BYTES`` has its format told from that prefix
    (``detect_head``) before the rest is read, so a file of no format is
    refused without being read whole.
    """
    if path.is_dir() and (path / "results.json").is_file():
        path = path / "results.json"  # tau2-bench's "dir" format
    if fmt is not None and fmt not in FORMATS:
        raise ImportFileError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    try:
        with path.open("rb") as stream:
            data = stream.read(DETECT_BYTES + 1)
        if data.startswith(_ZIP_MAGIC):
            if fmt not in (None, "inspect"):
                raise ImportFileError(f"{path} is a zip archive, not {fmt} results")
            return _inspect_zip(path, path.read_bytes(), scorer)
        if len(data) > DETECT_BYTES:
            if fmt is None:
                try:
                    fmt = detect_head(data[:DETECT_BYTES])
                except ImportFileError as exc:
                    raise ImportFileError(f"{path}: {exc}") from None
            data = path.read_bytes()
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{path}: not JSON (nor an Inspect .eval zip): {exc}") from None
    fmt = fmt or detect(doc)
    try:
        if fmt == "tau-bench":
            return _tau(doc, data)
        if fmt == "tau2-bench":
            return _tau2(doc, data, path)
        if fmt == "inspect":
            return _inspect(doc["eval"], doc.get("samples") or [], doc, data, scorer, path=path)
        return _multivon(doc, data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ImportFileError):
            raise
        raise ImportFileError(
            f"{path}: does not have the shape of {fmt} results ({type(exc).__name__}: {exc})"
        ) from None


# --- tau-bench -------------------------------------------------------------


def _passed(reward: Any) -> bool:
    """tau-bench's and tau2-bench's is_successful: reward within 1e-6 of 1."""
    return reward is not None and (1 - _EPS) <= float(reward) <= (1 + _EPS)


def _tau(doc: Any, data: bytes) -> Parsed:
    if not isinstance(doc, list):
        raise ImportFileError("tau-bench results are a JSON list of runs")
    trials = [
        Trial(str(r["task_id"]), str(int(r["trial"])), "pass" if _passed(r["reward"]) else "fail")
        for r in doc
    ]
    notes: list[str] = []
    expected = len({t.trial for t in trials})
    per_task = Counter(t.task for t in {(t.task, t.trial): t for t in trials}.values())
    short = {task: n for task, n in per_task.items() if n < expected}
    if short:
        notes.append(
            f"incomplete: {len(short)} of {len(per_task)} tasks have fewer than the file's "
            f"{expected} trials (shortest {min(short.values())}). tau-bench divides every "
            f"task by {expected}, counting missing runs as failures; reliabilityd counts the "
            "runs present, so pass^k differs from tau-bench's until the file is complete, and "
            "is UNKNOWN for k above the shortest task. Importing the complete file later with "
            "the same --run counts only the new runs."
        )
    repeats = len(trials) - sum(per_task.values())
    if repeats:
        notes.append(f"{repeats} runs repeat a (task_id, trial) pair: the first one counts")
    return Parsed("tau-bench", None, content_run(data), trials, notes)


# --- tau2-bench ------------------------------------------------------------


def _tau2(doc: Any, data: bytes, path: Path) -> Parsed:
    sims: list[Any] = list(doc.get("simulations") or [])
    notes: list[str] = []
    side = path.parent / "simulations"
    if not sims and side.is_dir():
        # tau2-bench's "dir" format: results.json plus one file per simulation.
        sims = [json.loads(p.read_bytes()) for p in sorted(side.glob("*.json"))]
    trials = []
    infra = 0
    for sim in sims:
        local = str(sim["trial"]) if sim.get("trial") is not None else str(sim["id"])
        if sim.get("termination_reason") == "infrastructure_error":
            infra += 1
            outcome: Outcome = "error"
        else:
            reward = (sim.get("reward_info") or {}).get("reward")
            outcome = "pass" if _passed(reward) else "fail"
        trials.append(Trial(str(sim["task_id"]), local, outcome))
    if infra:
        notes.append(f"{infra} infrastructure errors imported as errors (not in n or c)")
    info = doc.get("info") or {}
    domain = (info.get("environment_info") or {}).get("domain_name")
    llm = (info.get("agent_info") or {}).get("llm")
    name = "@".join(str(p) for p in (domain, llm) if p) or None
    stable = {"timestamp": doc.get("timestamp"), "info": info}
    # The file grows while tau2-bench runs; its timestamp and settings do not.
    run = content_run(json.dumps(stable, sort_keys=True).encode()) if info else content_run(data)
    return Parsed("tau2-bench", name, run, trials, notes)


# --- Inspect AI ------------------------------------------------------------


def inspect_value(value: Any) -> float:
    """Inspect's default ``value_to_float``: C 1, P 0.5, I and N 0, yes/true 1, numbers."""
    if isinstance(value, bool | int | float):
        return float(value)
    if value == "C":
        return 1.0
    if value == "P":
        return 0.5
    if value in ("I", "N"):
        return 0.0
    if isinstance(value, str):
        low = value.lower()
        if low in ("yes", "true"):
            return 1.0
        if low in ("no", "false"):
            return 0.0
        try:
            number = float(low)
        except ValueError:
            return 0.0
        return number if math.isfinite(number) else 0.0
    return 0.0


def _inspect_zip(path: Path, data: bytes, scorer: str | None) -> Parsed:
    # Inspect writes zstd entries; zipfile reads them natively only from Python 3.14.
    with contextlib.suppress(ImportError):
        import zipfile_zstd  # noqa: F401
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            head_name = next(
                (n for n in ("header.json", "_journal/start.json") if n in names), None
            )
            if head_name is None:
                raise ImportFileError(f"{path}: a zip without header.json: not an Inspect log")
            header = json.loads(archive.read(head_name))
            samples = [
                json.loads(archive.read(n))
                for n in names
                if n.startswith("samples/") and n.endswith(".json")
            ]
    # zipfile raises NotImplementedError for a compression method it cannot read.
    except (zipfile.BadZipFile, NotImplementedError, KeyError, ValueError) as exc:
        raise ImportFileError(f"{path}: cannot read the Inspect log: {exc}") from None
    return _inspect(header["eval"], samples, header, data, scorer, path=path)


def inspect_outcome(errored: bool, score: Mapping[str, Any] | None, scorer: str) -> Outcome:
    """One sample epoch as a trial: error, skip (unscored or NaN), pass or fail."""
    if errored:
        return "error"
    if score is None:
        return "skip"
    value = score.get("value")
    if isinstance(value, dict | list):
        raise ImportFileError(
            f"scorer {scorer!r} gives {type(value).__name__} values; import a scorer "
            "with one value per sample (--scorer)"
        )
    number = inspect_value(value)
    return "skip" if math.isnan(number) else "pass" if number >= 1.0 else "fail"


def inspect_suite(spec: Mapping[str, Any]) -> str | None:
    """The suite name an Inspect log gives: ``<task>@<model>``."""
    return "@".join(str(p) for p in (spec.get("task"), spec.get("model")) if p) or None


def inspect_run(spec: Mapping[str, Any]) -> str | None:
    """The run id of an Inspect eval: its ``eval_id`` (else its ``run_id``)."""
    return str(spec.get("eval_id") or spec.get("run_id") or "") or None


def _inspect(
    spec: Mapping[str, Any],
    samples: Iterable[Any],
    log: Mapping[str, Any],
    data: bytes,
    scorer: str | None,
    *,
    path: Path,
) -> Parsed:
    ordered = sorted(samples, key=lambda s: (str(s["id"]), int(s.get("epoch", 1))))
    notes: list[str] = []
    status = log.get("status")
    if scorer is None:
        scored = next((s["scores"] for s in ordered if s.get("scores")), None)
        if scored is None:
            errored = sum(1 for s in ordered if s.get("error"))
            raise ImportFileError(
                f"{path}: the log holds no scored samples (status {status!r}, "
                f"{len(ordered)} samples, {errored} errored); an interrupted eval can be "
                "finished with `inspect eval-retry` and the new log imported"
            )
        scorer = next(iter(scored))
        if len(scored) > 1:
            notes.append(f"{len(scored)} scorers in the log; importing {scorer!r} (see --scorer)")
    trials = []
    for sample in ordered:
        score = (sample.get("scores") or {}).get(scorer)
        outcome = inspect_outcome(bool(sample.get("error")), score, scorer)
        trials.append(Trial(str(sample["id"]), str(int(sample.get("epoch", 1))), outcome))
    if status not in (None, "success"):
        notes.append(f"the log's status is {status!r}: importing the samples it holds")
    note = _inspect_short_note(trials)
    if note:
        notes.append(note)
    run = inspect_run(spec) or content_run(data)
    return Parsed("inspect", inspect_suite(spec), run, trials, notes)


def _inspect_short_note(trials: list[Trial]) -> str | None:
    """Say where errored or unscored epochs make Inspect's reducers differ from ours."""
    left_out: Counter[str] = Counter(t.outcome for t in trials if t.outcome in ("error", "skip"))
    if not left_out:
        return None
    scored: dict[str, list[bool]] = {}
    for t in trials:
        row = scored.setdefault(t.task, [])
        if t.outcome in ("pass", "fail"):
            row.append(t.outcome == "pass")
    counts = {task: (len(row), sum(row)) for task, row in scored.items()}
    longest = max(n for n, _ in counts.values())
    shortest = min(n for n, _ in counts.values())
    what = " and ".join(
        f"{left_out[o]} {label} epochs imported as {o}s"
        for o, label in (("error", "errored"), ("skip", "unscored"))
        if left_out[o]
    )
    head = f"{what} (not in n or c)"
    if shortest == longest:
        return f"{head}; every sample keeps {longest} scored epochs"
    theirs = []
    for k in range(shortest + 1, longest + 1):
        kept = [(n, c) for n, c in counts.values() if n >= k]
        hat = sum(math.comb(c, k) / math.comb(n, k) for n, c in kept) / len(kept)
        at = sum(1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k) for n, c in kept)
        theirs.append(
            f"pass^{k} {hat:.3g} and pass@{k} {at / len(kept):.3g} over {len(kept)} of "
            f"{len(counts)} samples"
        )
    short = sum(1 for n, _ in counts.values() if n < longest)
    return (
        f"{head}: {short} of {len(counts)} samples have fewer than {longest} scored epochs "
        f"(shortest {shortest}). Inspect's pass_k / pass_at reducers leave a sample out of "
        "the mean when fewer than k of its epochs were scored; reliabilityd keeps every "
        f"sample, so its pass^k and pass@k are UNKNOWN for k above {shortest}, where "
        f"Inspect reports {'; '.join(theirs)}"
    )


# --- multivon-eval ---------------------------------------------------------

_EVALUATED = ("passed", "failed_quality")


def _multivon_status(case: Mapping[str, Any]) -> str:
    if case.get("status"):
        return str(case["status"])
    # Reports without a status field: the precedence of CaseResult.status.
    if case.get("skipped"):
        return "skipped"
    for field in ("model_error", "judge_error", "evaluator_error"):
        if case.get(field) is not None:
            return field
    return "passed" if case.get("passed") else "failed_quality"


def _multivon_outcomes(case: Mapping[str, Any], status: str, runs: int) -> list[Outcome]:
    if status not in _EVALUATED:
        return ["skip" if status == "skipped" else "error"] * runs
    if runs <= 1:
        return ["pass" if status == "passed" else "fail"]
    # As EvalReport.from_dict reads it: pass_count (0.20 on), else the rounded rate.
    passes = case.get("pass_count")
    if not isinstance(passes, int) or not 0 <= passes <= runs:
        passes = round(float(case.get("run_pass_rate", 1.0)) * runs)
    # Reports from 0.20 on list each run; keep their order when they agree.
    per_run = sorted(
        (t for t in case.get("trials") or [] if isinstance(t, dict)),
        key=lambda t: int(t.get("run_index") or 0),
    )
    ordered: list[Outcome] = ["pass" if t.get("status") == "passed" else "fail" for t in per_run]
    if len(ordered) == runs and ordered.count("pass") == passes:
        return ordered
    good: list[Outcome] = ["pass"]
    bad: list[Outcome] = ["fail"]
    return good * passes + bad * (runs - passes)


def _multivon(doc: Any, data: bytes) -> Parsed:
    trials: list[Trial] = []
    seen: Counter[str] = Counter()
    for case in doc["cases"]:
        task = task_name(str(case["input"]))
        seen[task] += 1
        if seen[task] > 1:  # multivon-eval keeps repeated inputs as separate cases
            task = _fit(f"{task} ({seen[task]})")
        runs = int(case.get("runs", 1))
        outcomes = _multivon_outcomes(case, _multivon_status(case), runs)
        trials.extend(Trial(task, str(i), o) for i, o in enumerate(outcomes))
    parts = (doc.get("suite"), doc.get("model"))
    name = "@".join(str(p) for p in parts if p) or None
    return Parsed("multivon", name, content_run(data), trials)


def trial_events(parsed: Parsed, suite: str, run: str) -> Iterator[tuple[str, str, str, Outcome]]:
    """(suite, task, trial id, outcome) for every trial, trial ids carrying the run id."""
    for t in parsed.trials:
        yield suite, task_name(t.task), f"{run}/{t.trial}", t.outcome
