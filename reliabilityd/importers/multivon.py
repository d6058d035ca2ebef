"""multivon-eval saved reports, read as trials.

* ``multivon``: a multivon-eval saved report (``to_json``); a case contributes
  ``runs`` trials with ``pass_count`` passes (older reports:
  ``round(run_pass_rate * runs)``), as ``EvalReport.from_dict`` reads it back,
  in the order of its per-run ``trials`` when the report lists them; errored
  and skipped cases become ``error`` / ``skip`` events, never in n or c.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from reliabilityd.events import Outcome
from reliabilityd.importers.trials import Parsed, Trial, content_run, fit, task_name

__all__ = ["multivon"]

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


def multivon(doc: Any, data: bytes) -> Parsed:
    trials: list[Trial] = []
    seen: Counter[str] = Counter()
    for case in doc["cases"]:
        task = task_name(str(case["input"]))
        seen[task] += 1
        if seen[task] > 1:  # multivon-eval keeps repeated inputs as separate cases
            task = fit(f"{task} ({seen[task]})")
        runs = int(case.get("runs", 1))
        outcomes = _multivon_outcomes(case, _multivon_status(case), runs)
        trials.extend(Trial(task, str(i), o) for i, o in enumerate(outcomes))
    parts = (doc.get("suite"), doc.get("model"))
    name = "@".join(str(p) for p in parts if p) or None
    return Parsed("multivon", name, content_run(data), trials)
