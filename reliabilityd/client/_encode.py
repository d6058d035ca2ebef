"""What the Emitter sends: one trial event, validated as the daemon validates it, encoded."""

from __future__ import annotations

import os
import time
from typing import Any, TypedDict

import msgspec

from reliabilityd.events import TrialEvent, validate

__all__ = ["EventExtras", "encode_event"]

_OUTCOMES = ("pass", "fail", "error", "skip")


# uuid4's version (4) and variant (RFC 4122) bits, set on 128 random bits.
_UUID4_KEEP = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_SET = (4 << 76) | (0x8000 << 48)


def _uuid4_hex() -> str:
    """``uuid.uuid4().hex`` without building a UUID object (a third of emit's time)."""
    return f"{int.from_bytes(os.urandom(16)) & _UUID4_KEEP | _UUID4_SET:032x}"


class EventExtras(TypedDict, total=False):
    """An event's optional fields, as ``emit`` and ``aemit`` take them."""

    trial: str | None  # unique per (suite, task); default: a new UUID
    ts: float | None  # Unix seconds; default: now
    labels: dict[str, Any] | None
    # Also record the trial in the suite's import ledger (see ``TrialEvent.ledger``).
    ledger: bool
    # Where to read the trial: an absolute http(s) URL or a path relative to the
    # suite's url_base (docs/drill-down.md); and the run it belongs to.
    url: str | None
    run: str | None


def _check_types(suite: object, task: object, trial: object, ts: object, labels: object) -> None:
    """TypeError naming the field whose value has the wrong type (before validation)."""
    for field, value in (("suite", suite), ("task", task), ("trial", trial)):
        if not isinstance(value, str):
            hint = f" (pass str({value!r}))" if isinstance(value, int | float) else ""
            raise TypeError(f"{field} must be a str, got {type(value).__name__} {value!r}{hint}")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float)):
        raise TypeError(f"ts must be Unix seconds (a float), got {type(ts).__name__} {ts!r}")
    if labels is not None and not isinstance(labels, dict):
        raise TypeError(f"labels must be a dict, got {type(labels).__name__}")


def encode_event(
    suite: str,
    task: str,
    outcome: str,
    *,
    trial: str | None = None,
    ts: float | None = None,
    labels: dict[str, Any] | None = None,
    ledger: bool = False,
    url: str | None = None,
    run: str | None = None,
) -> tuple[bytes, str]:
    """One trial event, validated as the daemon would, as JSON; and its trial id."""
    if outcome not in _OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(_OUTCOMES)}, got {outcome!r}")
    trial_id = trial if trial is not None else _uuid4_hex()
    _check_types(suite, task, trial_id, ts, labels)
    for field, value in (("url", url), ("run", run)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{field} must be a str, got {type(value).__name__} {value!r}")
    event = TrialEvent(
        suite=suite,
        task=task,
        trial=trial_id,
        outcome=outcome,  # type: ignore[arg-type]  # checked above
        ts=time.time() if ts is None else ts,
        labels=labels,
        ledger=ledger,
        url=url,
        run=run,
    )
    problem = validate(event)
    if problem:
        raise ValueError(problem)
    return msgspec.json.encode(event), trial_id
