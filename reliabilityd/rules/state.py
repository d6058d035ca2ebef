"""The state machine every alert rule shares: inactive -> pending -> firing -> resolved.

A rule's own module turns what it observes into a ``Verdict`` (``threshold``
for a suite's interval, ``canary`` for a comparison of two sides);
``advance`` moves an ``AlertState`` on that verdict, with the rule's ``for``
(seconds a breach must hold before firing) and ``repeat`` (seconds between
re-notifications while firing). No I/O here: the daemon persists
``AlertState`` in Redis and applies each transition by compare-and-set, so
replicas and restarts never notify twice.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

__all__ = [
    "AlertState",
    "Notify",
    "Probability",
    "Reason",
    "RuleName",
    "Seconds",
    "State",
    "Transition",
    "Verdict",
    "advance",
]

State = Literal["inactive", "pending", "firing", "resolved"]
# "worse": a canary rule's candidate is worse than its baseline (``canary``).
Reason = Literal["below", "unknown", "stale", "worse"]
Notify = Literal["firing", "resolved", "repeat"]

# Rule names live in Redis keys and MQTT topic levels.
RuleName = Annotated[str, msgspec.Meta(min_length=1, max_length=100, pattern=r"^[^{}/+#\s]+$")]
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]


class AlertState(msgspec.Struct, frozen=True, kw_only=True):
    state: State = "inactive"
    # When the current breach began (pending or firing); None when not breaching.
    started_at: float | None = None
    ended_at: float | None = None
    reason: Reason | None = None
    last_notified_at: float | None = None
    # Bumped by every stored change: the compare-and-set token.
    seq: int = 0
    # The snapshot version this state was decided on; a transition decided on
    # an older snapshot is refused (replicas with different ticks never flap).
    snapshot_version: int = -1


class Transition(msgspec.Struct, frozen=True):
    """The state to store (when it differs from the current one) and what to notify."""

    new: AlertState
    notify: Notify | None


Verdict = Literal["breach", "clear", "between", "none"]


def advance(
    current: AlertState,
    v: Verdict,
    reason: Reason | None,
    now: float,
    *,
    for_seconds: float,
    repeat: float,
) -> Transition:
    """The state machine on a verdict, whatever rule took it: ``for`` and ``repeat`` here."""
    s = current.state
    if s in ("inactive", "resolved"):
        if v != "breach":
            return Transition(current, None)
        if for_seconds <= 0:
            return Transition(_fire(current, now, now, reason), "firing")
        pending = msgspec.structs.replace(
            current, state="pending", started_at=now, ended_at=None, reason=reason
        )
        return Transition(pending, None) if pending != current else Transition(current, None)
    if s == "pending":
        if v != "breach":
            if v == "none":
                return Transition(current, None)  # no verdict: hold the timer
            return Transition(
                msgspec.structs.replace(current, state="inactive", started_at=None, reason=None),
                None,
            )
        started = current.started_at if current.started_at is not None else now
        if now - started >= for_seconds:
            return Transition(_fire(current, started, now, reason), "firing")
        return Transition(current, None)
    # firing
    if v == "clear":
        resolved = msgspec.structs.replace(
            current, state="resolved", ended_at=now, last_notified_at=now
        )
        return Transition(resolved, "resolved")
    if (
        v == "breach"
        and repeat > 0
        and current.last_notified_at is not None
        and now - current.last_notified_at >= repeat
    ):
        return Transition(msgspec.structs.replace(current, last_notified_at=now), "repeat")
    return Transition(current, None)


def _fire(current: AlertState, started: float, now: float, reason: Reason | None) -> AlertState:
    return msgspec.structs.replace(
        current,
        state="firing",
        started_at=started,
        ended_at=None,
        reason=reason,
        last_notified_at=now,
    )
