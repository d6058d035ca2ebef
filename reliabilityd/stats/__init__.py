"""The statistics core: pure numpy, no I/O.

Per-task exact estimators (``estimators``), a suite's state as a histogram of
(n, c) cells (``histogram``), the cluster bootstrap computed from that
histogram (``bootstrap``, ``saddlepoint``), exact Beta quantiles
(``exact``), intervals by name (``intervals``), suite-level estimates with
honest UNKNOWN (``estimate``), lottery cases
(``lottery``), the change detector (``detector``) and the snapshot document
(``snapshot``).
"""
