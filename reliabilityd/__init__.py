"""reliabilityd: live pass@k (capability) and pass^k (reliability) for agent trials.

The statistics core is importable on its own::

    from reliabilityd import pass_hat_k
    from reliabilityd import estimate
    pass_hat_k(5, 3, 2)                      # 0.3, never the plug-in 0.36
    estimate([(5, 3), (5, 5)], k=2).ci       # cluster-bootstrap CI over tasks
    compare(old, new, k=5).difference().ci   # paired CI of new - old ({task: (n, c)} each)
    assert_pass_hat_k(tasks, 5, 0.8)         # AssertionError unless the lower bound is >= 0.8

``Emitter`` publishes trial events from agents (imported on first use, so
the statistics core stays free of MQTT)::

    with reliabilityd.Emitter("mqtt://broker:1883") as emitter:
        emitter.emit("deploy-bot", "deploy service 0", "pass")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reliabilityd.stats.compare import Comparison, Side, compare
from reliabilityd.stats.estimate import Estimate, estimate, estimate_metrics
from reliabilityd.stats.estimators import pass_at_k, pass_hat_k
from reliabilityd.stats.gate import assert_pass_hat_k
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.intervals import INTERVALS
from reliabilityd.stats.lottery import LotteryCase, lottery_cases
from reliabilityd.stats.paired import Difference
from reliabilityd.stats.snapshot import MissingEstimate, Snapshot

__all__ = [
    "INTERVALS",
    "AsyncClient",
    "Client",
    "Comparison",
    "Difference",
    "Emitter",
    "Estimate",
    "Histogram",
    "LotteryCase",
    "MissingEstimate",
    "Side",
    "Snapshot",
    "assert_pass_hat_k",
    "compare",
    "estimate",
    "estimate_metrics",
    "lottery_cases",
    "pass_at_k",
    "pass_hat_k",
]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from reliabilityd.client._client import AsyncClient, Client
    from reliabilityd.client.emitter import Emitter

# The I/O-facing classes load on first use: `from reliabilityd import estimate`
# stays free of Redis and MQTT imports.
_LAZY = {
    "AsyncClient": "reliabilityd.client._client",
    "Client": "reliabilityd.client._client",
    "Emitter": "reliabilityd.client.emitter",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'reliabilityd' has no attribute {name!r}")
