"""tau-bench and tau2-bench results, read as trials.

* ``tau-bench``: a JSON list of runs with ``task_id``, ``trial`` and ``reward``;
  a run passes when its reward is within 1e-6 of 1, as tau-bench's
  ``display_metrics`` counts it (a run that raised was saved with reward 0: a
  failure).
* ``tau2-bench``: ``simulations[]`` with ``task_id``, ``trial``,
  ``reward_info.reward`` and ``termination_reason``; an infrastructure error is
  an ``error`` (tau2-bench leaves it out of its metrics), a missing reward a
  failure.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from reliabilityd.events import Outcome
from reliabilityd.importers._detect import ImportFileError
from reliabilityd.importers.trials import Parsed, Trial, content_run

__all__ = ["passed", "tau2_bench", "tau_bench"]

_EPS = 1e-6


def passed(reward: Any) -> bool:
    """tau-bench's and tau2-bench's is_successful: reward within 1e-6 of 1."""
    return reward is not None and (1 - _EPS) <= float(reward) <= (1 + _EPS)


def tau_bench(doc: Any, data: bytes) -> Parsed:
    if not isinstance(doc, list):
        raise ImportFileError("tau-bench results are a JSON list of runs")
    trials = [
        Trial(str(r["task_id"]), str(int(r["trial"])), "pass" if passed(r["reward"]) else "fail")
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


def tau2_bench(doc: Any, data: bytes, path: Path) -> Parsed:
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
            outcome = "pass" if passed(reward) else "fail"
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
