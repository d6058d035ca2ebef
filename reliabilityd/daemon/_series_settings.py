"""What a series is computed under: its stats settings, the rules that judge it, a digest.

Pure functions of the config and the rules (``Recompute`` holds both, and a
reload replaces them between two ticks): every replica with the same config
computes the same settings and the same fingerprint for a suite.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Sequence

import msgspec

from reliabilityd.config import Config
from reliabilityd.rules import Rule, for_slice
from reliabilityd.stats import snapshot
from reliabilityd.store import Series

__all__ = ["fingerprint", "ks", "series_rules", "settings"]


def ks(config: Config, rules: Sequence[Rule]) -> tuple[int, ...]:
    """The configured k values and every k an alert rule names."""
    return tuple(sorted({*config.stats.k, *(r.k for r in rules)}))


def settings(config: Config, rules: Sequence[Rule], suite: str) -> snapshot.StatsSettings:
    """The stats settings of ``suite``: its window, coverage and interval overrides."""
    window, min_coverage = config.suite_settings(suite)
    stats = config.stats
    return snapshot.StatsSettings(
        ks=ks(config, rules),
        window=window,
        min_coverage=min_coverage,
        n_boot=stats.n_boot,
        confidence=stats.confidence,
        seed=stats.seed,
        interval=config.suite_interval(suite),
    )


def fingerprint(config: Config, rules: Sequence[Rule], suite: str) -> str:
    """What the suite's snapshot is computed under, as a short digest.

    The stats settings (ks, window, interval, ...), the lottery's k and
    limit, and every rule that watches the suite. A stored snapshot with
    another fingerprint is stale (``Snapshots.mark_stale``): a config
    change is judged on the data already stored.
    """
    doc = msgspec.json.encode(
        [
            settings(config, rules, suite),
            max(config.stats.k),
            config.stats.lottery_limit,
            [r for r in rules if fnmatch.fnmatchcase(suite, r.suite)],
        ]
    )
    return hashlib.sha256(doc).hexdigest()[:16]


def series_rules(rules: Sequence[Rule], series: Series) -> list[Rule]:
    """The rules that judge a series: the suite's, or a slice's (``slices = true``)."""
    mine = [r for r in rules if fnmatch.fnmatchcase(series.suite, r.suite)]
    if series.slice is None:
        return mine
    return [for_slice(r, series.slice) for r in mine if r.slices]
