"""Inspect AI eval logs, read as trials.

* ``inspect``: an Inspect AI eval log (``.eval`` zip or ``.json``); one trial
  per sample and epoch, correct when the score's value converts (Inspect's
  default ``value_to_float``) to at least 1.0, as its ``pass_at`` / ``pass_k``
  reducers count; errored samples are ``error``, unscored (NaN) ones ``skip``.
  Each trial's run is the eval's id, and its url the path Inspect's log
  viewer opens at that sample's epoch (``inspect_link``), relative to the
  viewer's address: a suite's ``url_base`` resolves it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from reliabilityd.events import Outcome
from reliabilityd.importers._detect import ImportFileError
from reliabilityd.importers.trials import Parsed, Trial, content_run
from reliabilityd.names import url_problem

__all__ = [
    "DEFAULT_LINK",
    "LINK_ENV",
    "inspect_link",
    "inspect_log",
    "inspect_outcome",
    "inspect_run",
    "inspect_suite",
    "inspect_value",
    "inspect_zip",
    "link_template",
]


# The route of Inspect's log viewer (`inspect view`, a hash router) to one sample's
# epoch: `#/logs/<log path under the viewer's log dir>/samples/sample/<id>/<epoch>/`.
DEFAULT_LINK = "#/logs/{log}/samples/sample/{id}/{epoch}/"
# A template of the user's instead ({log}, {id}, {epoch}, {eval_id}), or "none".
LINK_ENV = "RELIABILITYD_INSPECT_LINK"


def link_template() -> str:
    """The link template of the environment (``LINK_ENV``), else ``DEFAULT_LINK``; ""
    for none. ValueError naming the variable when it is not one."""
    template = os.environ.get(LINK_ENV, "").strip() or DEFAULT_LINK
    if template == "none":
        return ""
    try:
        sample = template.format(log="a.eval", id="1", epoch="1", eval_id="e")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"{LINK_ENV}={template!r}: a template over {{log}}, {{id}}, {{epoch}} and "
            f"{{eval_id}} ({type(exc).__name__}: {exc})"
        ) from None
    problem = url_problem(sample)
    if problem:
        raise ValueError(f"{LINK_ENV}={template!r} makes no link: {problem}")
    return template


def inspect_link(
    template: str, *, log: str, sample_id: Any, epoch: Any, eval_id: str = ""
) -> str | None:
    """A sample epoch's link: ``template`` filled in, each value percent-encoded (``log``
    keeps its slashes); None without a template or when the link is too long."""
    if not template:
        return None
    url = template.format(
        log=quote(log, safe="/"),
        id=quote(str(sample_id), safe=""),
        epoch=quote(str(epoch), safe=""),
        eval_id=quote(eval_id, safe=""),
    )
    return None if url_problem(url) else url


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


def inspect_zip(path: Path, data: bytes, scorer: str | None) -> Parsed:
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
    return inspect_log(header["eval"], samples, header, data, scorer, path=path)


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


def inspect_log(
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
    try:
        template = link_template()
    except ValueError as exc:
        raise ImportFileError(str(exc)) from None
    eval_id = str(spec.get("eval_id") or "")
    trials = []
    for sample in ordered:
        score = (sample.get("scores") or {}).get(scorer)
        outcome = inspect_outcome(bool(sample.get("error")), score, scorer)
        epoch = int(sample.get("epoch", 1))
        url = inspect_link(
            template, log=path.name, sample_id=sample["id"], epoch=epoch, eval_id=eval_id
        )
        trials.append(Trial(str(sample["id"]), str(epoch), outcome, url))
    if status not in (None, "success"):
        notes.append(f"the log's status is {status!r}: importing the samples it holds")
    note = _short_note(trials)
    if note:
        notes.append(note)
    run = inspect_run(spec) or content_run(data)
    return Parsed("inspect", inspect_suite(spec), run, trials, notes)


def _short_note(trials: list[Trial]) -> str | None:
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
