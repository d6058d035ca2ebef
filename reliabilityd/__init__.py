"""reliabilityd: live pass@k (capability) and pass^k (reliability) for agent trials.

The statistics core is importable on its own::

    from reliabilityd import estimate, pass_hat_k
    pass_hat_k(5, 3, 2)                      # 0.3, never the plug-in 0.36
    estimate([(5, 3), (5, 5)], k=2).ci_95    # cluster-bootstrap CI over tasks
"""

from __future__ import annotations

from reliabilityd.estimate import Estimate, estimate, estimate_metrics
from reliabilityd.estimators import pass_at_k, pass_hat_k
from reliabilityd.histogram import Histogram
from reliabilityd.intervals import INTERVALS
from reliabilityd.lottery import LotteryCase, lottery_cases

__all__ = [
    "INTERVALS",
    "Estimate",
    "Histogram",
    "LotteryCase",
    "estimate",
    "estimate_metrics",
    "lottery_cases",
    "pass_at_k",
    "pass_hat_k",
]
__version__ = "0.1.0"
