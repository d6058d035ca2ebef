"""What the commit dead-letters besides what did not decode: events whose sliced labels
cannot name a slice (class ``invalid_field``), and events of a new suite past its
grant's ``max_suites`` or ``stats.max_suites`` (class ``too_many_suites``).

Both record ``id(event) -> rejection`` in ``refused``, so the commit can say
which of a batch's events were not counted and why (the HTTP answer's
per-element results).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from reliabilityd.config import Config
from reliabilityd.events import TrialEvent
from reliabilityd.rejections import Rejected
from reliabilityd.stats.slices import Ids


def raw(event: TrialEvent) -> bytes:
    """An event as the JSON a dead letter keeps of it."""
    return msgspec.json.encode(event)


def past_suite_cap(
    config: Config,
    by_suite: Mapping[str, list[TrialEvent]],
    refused: Mapping[str, str],
    out_of: dict[int, Rejected],
) -> list[Rejected]:
    """Rejections of the events of the ``refused`` suites (suite -> the cap it met,
    "pool" or "deployment", as ``store.ingest.admit`` says), recorded in ``out_of``."""
    out: list[Rejected] = []
    for suite in sorted(refused):
        reason = config.suite_refusal(suite, refused[suite])
        for event in by_suite[suite]:
            out.append(rejection := Rejected(raw(event), reason, "too_many_suites"))
            out_of[id(event)] = rejection
    return out


def screen_labels(
    config: Config,
    by_suite: dict[str, list[TrialEvent]],
    refused: dict[int, Rejected],
) -> tuple[dict[str, list[TrialEvent]], list[Rejected]]:
    """The events whose sliced labels name a slice, and rejections of the others."""
    out: list[Rejected] = []
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
                out.append(rejection := Rejected(raw(event), reason, "invalid_field"))
                refused[id(event)] = rejection
            else:
                good.append(event)
        if good:
            kept[suite] = good
    return kept, out
