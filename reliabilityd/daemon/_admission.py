"""A decoded batch, and what the commit dead-letters besides undecodable input:
events of a new suite past ``stats.max_suites`` (class ``too_many_suites``) and
events whose sliced labels cannot name a slice (class ``invalid_field``).

Both record ``id(event) -> reason`` in ``not_counted`` when given, so the
HTTP answer can say which elements were not counted and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import msgspec

from reliabilityd.config import Config
from reliabilityd.events import TrialEvent
from reliabilityd.rejections import Rejected
from reliabilityd.stats.slices import Ids


class Decoded(NamedTuple):
    """A decoded batch: the good events grouped by suite, the rejected with their source."""

    by_suite: dict[str, list[TrialEvent]]
    rejected: list[tuple[Rejected, str]]
    # The source each suite's dead letters name when the commit writes some
    # (a new suite past stats.max_suites, a sliced label that names no slice).
    sources: dict[str, str] | None = None


def raw(event: TrialEvent) -> bytes:
    """An event as the JSON a dead letter keeps of it."""
    return msgspec.json.encode(event)


def past_suite_cap(
    config: Config,
    by_suite: Mapping[str, list[TrialEvent]],
    refused: set[str],
    sources: Mapping[str, str],
    not_counted: dict[int, str] | None = None,
) -> list[tuple[Rejected, str]]:
    """Dead letters for the events of new suites past ``stats.max_suites``."""
    most = config.stats.max_suites
    out: list[tuple[Rejected, str]] = []
    for suite in sorted(refused):
        reason = (
            f"suite {suite!r} is new and the deployment already holds stats.max_suites "
            f"({most}) suites: not counted (raise stats.max_suites or reset unused suites)"
        )
        source = sources.get(suite, "unknown")
        out += [(Rejected(raw(e), reason, "too_many_suites"), source) for e in by_suite[suite]]
        if not_counted is not None:
            not_counted.update(dict.fromkeys(map(id, by_suite[suite]), reason))
    return out


def screen_labels(
    config: Config,
    by_suite: dict[str, list[TrialEvent]],
    sources: Mapping[str, str],
    not_counted: dict[int, str] | None = None,
) -> tuple[dict[str, list[TrialEvent]], list[tuple[Rejected, str]]]:
    """The events whose sliced labels name a slice, and dead letters for the others."""
    out: list[tuple[Rejected, str]] = []
    kept: dict[str, list[TrialEvent]] = {}
    for suite, events in by_suite.items():
        slice_by, _ = config.slicing(suite)
        if not slice_by:
            kept[suite] = events
            continue
        good = []
        ids = Ids(slice_by)
        for event in events:
            try:
                ids(event.labels)
            except ValueError as exc:
                reason = f"{exc} (suite {suite!r} is sliced by it)"
                rejection = Rejected(raw(event), reason, "invalid_field")
                out.append((rejection, sources.get(suite, "unknown")))
                if not_counted is not None:
                    not_counted[id(event)] = reason
            else:
                good.append(event)
        if good:
            kept[suite] = good
    return kept, out
