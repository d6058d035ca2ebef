"""What a series is computed under: its stats settings, the rules that judge it, a digest.

Pure functions of the config and the rules (``Recompute`` holds both, and a
reload replaces them between two ticks): every replica with the same config
computes the same settings and the same fingerprint for a suite.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Sequence
from typing import TypeVar

import msgspec

from reliabilityd.config import Config
from reliabilityd.rules import Rule, for_slice
from reliabilityd.stats import snapshot
from reliabilityd.store import Series

__all__ = ["Known", "fingerprint", "ks", "series_rules", "settings"]

# Series whose settings one Known keeps; past it, it starts again.
KNOWN_LIMIT = 100_000

_K = TypeVar("_K")
_V = TypeVar("_V")


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


class Known:
    """``settings``, ``fingerprint`` and ``series_rules`` of one config and its rules, each
    computed once a suite (a series): a tick asks for them several times a series.

    A reload makes a new one (the config and the rules are the key)."""

    def __init__(self, config: Config, rules: Sequence[Rule]) -> None:
        self.config = config
        self.rules = list(rules)
        self._settings: dict[str, snapshot.StatsSettings] = {}
        self._fingerprints: dict[str, str] = {}
        self._rules: dict[Series, list[Rule]] = {}

    def settings(self, suite: str) -> snapshot.StatsSettings:
        got = self._settings.get(suite)
        if got is None:
            got = settings(self.config, self.rules, suite)
            _keep(self._settings, suite, got)
        return got

    def fingerprint(self, suite: str) -> str:
        got = self._fingerprints.get(suite)
        if got is None:
            got = fingerprint(self.config, self.rules, suite)
            _keep(self._fingerprints, suite, got)
        return got

    def series_rules(self, series: Series) -> list[Rule]:
        """A new list each time (callers may change theirs); the rules themselves are frozen."""
        got = self._rules.get(series)
        if got is None:
            got = series_rules(self.rules, series)
            _keep(self._rules, series, got)
        return list(got)


def _keep(table: dict[_K, _V], key: _K, value: _V) -> None:
    if len(table) >= KNOWN_LIMIT:
        table.clear()
    table[key] = value
