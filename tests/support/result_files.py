"""Result files in each harness's documented shape, and each harness's own pass^k formula.

The shapes follow the projects' own writers (checked at these commits):
tau-bench ``run.py`` / ``types.EnvRunResult`` (sierra-research/tau-bench
59a200c), tau2-bench ``data_model/simulation.py`` ``Results`` /
``SimulationRun`` (sierra-research/tau2-bench a2c0247), multivon-eval
``EvalReport.to_json`` (multivon-ai/multivon-eval c655a8b). Inspect AI logs
are written by Inspect's own ``write_eval_log`` in the tests.

The ``*_pass_hat_k`` functions re-implement each project's definition:
tau-bench ``display_metrics``, tau2-bench ``metrics/agent_metrics.py``
(``get_metrics_df`` + ``compute_metrics``), multivon-eval
``EvalReport._pass_k_case_stats`` + ``passk.suite_pass_k``.
"""

from __future__ import annotations

import math
import uuid
from collections import defaultdict
from typing import Any

# A task's runs, in trial order: "pass", "fail", "raise" (tau-bench: the agent
# raised), "infra" (tau2-bench: infrastructure error), "max_steps" (tau2-bench).
Matrix = dict[str, list[str]]


def _success(reward: float | None) -> bool:
    return reward is not None and (1 - 1e-6) <= reward <= (1 + 1e-6)


# --- tau-bench -------------------------------------------------------------


def tau_bench_doc(matrix: Matrix) -> list[dict[str, Any]]:
    """run.py's saved list: trials outer, tasks inner, as its loops write them."""
    out = []
    trials = max(len(v) for v in matrix.values())
    for trial in range(trials):
        for task, runs in matrix.items():
            if trial >= len(runs):
                continue  # an incomplete checkpoint
            o = runs[trial]
            if o == "raise":
                info: dict[str, Any] = {"error": "RateLimitError", "traceback": "Traceback ..."}
                reward = 0.0
            else:
                # 1 - 1e-7 passes: tau-bench counts rewards within 1e-6 of 1.
                reward = (1 - 1e-7 if trial % 2 else 1.0) if o == "pass" else 0.5 * (trial % 2)
                info = {"task": {"user_id": f"user_{task}", "actions": []}, "reward_info": {}}
            out.append(
                {"task_id": int(task), "reward": reward, "info": info, "traj": [], "trial": trial}
            )
    return out


def tau_bench_pass_hat_k(doc: list[dict[str, Any]], k: int) -> float:
    """tau-bench display_metrics: every task divided by the file's number of trials."""
    num_trials = len({r["trial"] for r in doc})
    c: dict[int, int] = {}
    for r in doc:
        c[r["task_id"]] = c.get(r["task_id"], 0) + int(_success(r["reward"]))
    return sum(math.comb(x, k) / math.comb(num_trials, k) for x in c.values()) / len(c)


# --- tau2-bench ------------------------------------------------------------


def tau2_doc(matrix: Matrix, *, domain: str = "airline", llm: str = "openai/gpt-4.1") -> Any:
    trials = max(len(v) for v in matrix.values())
    sims = []
    for task, runs in matrix.items():
        for trial, o in enumerate(runs):
            reason = {"pass": "agent_stop", "fail": "user_stop", "infra": "infrastructure_error"}
            sims.append(
                {
                    "id": str(uuid.uuid4()),
                    "task_id": task,
                    "timestamp": "2026-11-30T10:00:00",
                    "start_time": "2026-11-30T10:00:00",
                    "end_time": "2026-11-30T10:01:00",
                    "duration": 60.0,
                    "termination_reason": reason.get(o, o),
                    "agent_cost": 0.01,
                    "user_cost": 0.002,
                    "reward_info": None
                    if o == "infra"
                    else {"reward": 1.0 if o == "pass" else 0.0, "db_check": None},
                    "messages": [],
                    "trial": trial,
                    "seed": 300 + trial,
                }
            )
    return {
        "timestamp": "2026-11-30T10:00:00",
        "info": {
            "git_commit": "a2c0247",
            "num_trials": trials,
            "max_steps": 200,
            "max_errors": 10,
            "user_info": {"implementation": "user_simulator", "llm": "gpt-4.1"},
            "agent_info": {"implementation": "llm_agent", "llm": llm},
            "environment_info": {"domain_name": domain, "policy": "..."},
            "seed": 300,
        },
        "tasks": [{"id": task} for task in matrix],
        "simulations": sims,
    }


def tau2_pass_hat_k(doc: Any, k: int) -> float | None:
    """tau2-bench: infrastructure errors left out, each task by its own count, k <= min count."""
    per_task: dict[str, list[bool]] = defaultdict(list)
    for sim in doc["simulations"]:
        if sim["termination_reason"] == "infrastructure_error":
            continue
        reward = (sim.get("reward_info") or {}).get("reward")
        per_task[sim["task_id"]].append(_success(reward))
    if k > min(len(v) for v in per_task.values()):
        return None  # tau2-bench reports no pass^k above the shortest task
    values = [math.comb(sum(v), k) / math.comb(len(v), k) for v in per_task.values()]
    return sum(values) / len(values)


# --- multivon-eval ---------------------------------------------------------


def multivon_case(text: str, runs: int, passes: int, status: str | None = None) -> dict[str, Any]:
    status = status or ("passed" if passes == runs else "failed_quality")
    errors: dict[str, str | None] = {
        s: None for s in ("model_error", "judge_error", "evaluator_error")
    }
    if status in errors:
        errors[status] = "provider timed out"
    rate = passes / runs if status in ("passed", "failed_quality") else 1.0
    return {
        "input": text,
        "output": "deploy complete",
        "status": status,
        **errors,
        "skipped": status == "skipped",
        "passed": status == "passed",
        "score": round(rate, 4),
        "score_std": 0.0,
        "all_scores": [1.0] * passes + [0.0] * (runs - passes),
        "run_pass_rate": round(rate, 4),
        "is_flaky": 0 < passes < runs,
        "runs": runs,
        "retry_attempts": 0,
        "retry_errors": [],
        "latency_ms": 12.5,
        "tags": [],
        "evaluators": [{"name": "contains", "score": 1.0, "passed": True, "reason": ""}],
    }


def multivon_doc(cases: list[dict[str, Any]], suite: str, model: str) -> dict[str, Any]:
    return {
        "suite": suite,
        "model": model,
        "summary": {"total": len(cases), "runs_per_case": max(c["runs"] for c in cases)},
        "cases": cases,
    }


def multivon_pass_hat_k(doc: dict[str, Any], k: int) -> float | None:
    """EvalReport.from_dict + pass_hat_k: evaluated cases only, UNKNOWN above min runs."""
    stats = []
    for c in doc["cases"]:
        if c["status"] not in ("passed", "failed_quality"):
            continue
        runs = c.get("runs", 1)
        if runs > 1:
            stats.append((runs, round(c["run_pass_rate"] * runs)))
        else:
            stats.append((1, 1 if c["status"] == "passed" else 0))
    if k > min(n for n, _ in stats):
        return None
    values = [0.0 if c < k else math.comb(c, k) / math.comb(n, k) for n, c in stats]
    return sum(values) / len(values)
