"""The soak's figures: samples over time, the memory at start, warm and end against the
limits, the report printed at the end and the JSON of every figure and sample."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.soak._plan import (
    REDIS_GROWTH_BYTES,
    REDIS_GROWTH_SHARE,
    RSS_GROWTH_BYTES,
    RSS_GROWTH_SHARE,
    Plan,
    allowed_growth,
)

MIB = 1 << 20


@dataclass
class Sample:
    t: float
    rss: int | None
    redis: int | None
    sent: int
    acked: int
    counted: int | None
    # The oldest of the suites' snapshots, seconds.
    snapshot_age: float | None = None


@dataclass
class Figures:
    """Everything the report prints, and the JSON it writes."""

    seconds: float = 0.0
    sent: dict[str, int] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)
    resent: dict[str, int] = field(default_factory=dict)
    suites: dict[str, dict[str, int]] = field(default_factory=dict)
    memory: dict[str, dict[str, float]] = field(default_factory=dict)
    reloads: dict[str, int] = field(default_factory=lambda: {"done": 0, "refused": 0})
    restarts: dict[str, int] = field(default_factory=lambda: {"redis": 0, "broker": 0})
    outages: dict[str, float] = field(default_factory=lambda: {"redis": 0.0, "broker": 0.0})
    http: dict[str, dict[int, int]] = field(default_factory=dict)
    mqtt_connects: int = 0
    # Seconds from a reload to the alert state it implies, at most.
    alert_lag: float = 0.0
    snapshot_age: float = 0.0
    check: str = ""
    # Times ingest paused for Redis and resumed (`redis_recovered` in the daemon's log).
    ingest_pauses: int = 0
    daemon_warnings: dict[str, int] = field(default_factory=dict)
    daemon_exit: int | None = None
    failures: list[str] = field(default_factory=list)


def memory(plan: Plan, figures: Figures, samples: list[Sample]) -> list[str]:
    """Start, warm and end of the daemon's RSS and Redis's used_memory into ``figures``;
    the growth past the limits, once warm."""
    problems = []
    load = [s for s in samples if s.t <= figures.seconds]
    limits = {
        "daemon_rss": (RSS_GROWTH_BYTES, RSS_GROWTH_SHARE),
        "redis_used_memory": (REDIS_GROWTH_BYTES, REDIS_GROWTH_SHARE),
    }
    for name, (absolute, share) in limits.items():
        values = [(s.t, s.rss if name == "daemon_rss" else s.redis) for s in load]
        known = [(t, v) for t, v in values if v is not None]
        if not known:
            problems.append(f"{name}: never measured")
            continue
        # Medians of three samples: one sample taken during a restart is not the trend.
        warm = [v for t, v in known if t >= plan.warm_at][:3]
        if not warm:
            problems.append(f"{name}: no sample after the warm point")
            continue
        warm_value = statistics.median(warm)
        end_value = statistics.median([v for _, v in known[-3:]])
        limit = allowed_growth(warm_value, absolute, share)
        figures.memory[name] = {
            "start": known[0][1],
            "warm": warm_value,
            "end": end_value,
            "peak": max(v for _, v in known),
            "growth": end_value - warm_value,
            "limit": limit,
        }
        if end_value - warm_value > limit:
            problems.append(
                f"{name} grew {(end_value - warm_value) / MIB:.1f} MiB after the warm point "
                f"({warm_value / MIB:.1f} to {end_value / MIB:.1f} MiB), past "
                f"{limit / MIB:.1f} MiB"
            )
    return problems


def report(plan: Plan, figures: Figures, samples: list[Sample], command: str) -> str:
    """The end-of-run report, for a terminal and for docs/operating.md."""
    f = figures
    lines = [
        f"soak: {f.seconds:.0f} s under load (planned {plan.seconds:.0f} s): {command}",
        f"  dedup TTL {plan.dedup_ttl} s; warm from {plan.warm_at:.0f} s; "
        f"rates: MQTT {plan.mqtt_rate:g} msg/s, HTTP {plan.http_rate:g} req/s, "
        f"OTLP {plan.otlp_rate:g} req/s",
        f"  sent (first sends) {f.sent}; acknowledged {f.acked}; resent on purpose {f.resent}",
        f"  {'suite':<12} {'sent':>8} {'counted':>8} {'n':>8} {'c':>8} {'sent c':>8} "
        f"{'errors':>6} {'skips':>6} {'dups':>6} {'resent':>6}",
    ]
    for suite, s in f.suites.items():
        lines.append(
            f"  {suite:<12} {s['sent']:>8,} {s['counted']:>8,} {s['n']:>8,} {s['c']:>8,} "
            f"{s['sent_c']:>8,} {s['errors']:>6,} {s['skips']:>6,} {s['duplicates']:>6,} "
            f"{s['resent']:>6,}"
        )
    lines.append(f"  {'memory':<18} {'start':>9} {'warm':>9} {'end':>9} {'peak':>9} {'limit':>9}")
    for name, m in f.memory.items():
        lines.append(
            f"  {name:<18} "
            + " ".join(f"{m[k] / MIB:>5.1f} MiB" for k in ("start", "warm", "end", "peak"))
            + f" +{m['limit'] / MIB:.1f} MiB"
        )
    lines += [
        f"  reloads: {f.reloads['done']} done, {f.reloads['refused']} refused (each followed by a "
        "reload of the previous file that changed nothing)",
        f"  restarts: Redis {f.restarts['redis']} (kill -9, {f.outages['redis']:.1f} s down in "
        f"all), broker {f.restarts['broker']} (SIGTERM, {f.outages['broker']:.1f} s); "
        f"ingest paused {f.ingest_pauses} times",
        f"  HTTP statuses {f.http}; MQTT publisher connections {f.mqtt_connects}",
        f"  alert state after a reload: within {f.alert_lag:.1f} s; oldest snapshot seen "
        f"{f.snapshot_age:.0f} s; reliabilityd check: {f.check}",
        f"  daemon exit on SIGTERM: {f.daemon_exit}; warnings and errors in its log: "
        f"{f.daemon_warnings or 'none'}",
        f"  samples: {len(samples)}",
        "  result: " + ("PASS" if not f.failures else f"FAIL ({len(f.failures)} problems)"),
    ]
    lines += [f"    {p}" for p in f.failures[:50]]
    return "\n".join(lines)


def dump(path: Path, plan: Plan, figures: Figures, samples: list[Sample]) -> None:
    doc: dict[str, Any] = {
        "plan": asdict(plan),
        "figures": asdict(figures),
        "samples": [asdict(s) for s in samples],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
