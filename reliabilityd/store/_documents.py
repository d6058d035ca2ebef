"""The documents the store keeps, decoded once: snapshots, alert states and rate trigger
states, or why not.

Every document the store hands out is decoded here, into the record of the
layer below (``stats.snapshot.Snapshot``, ``rules.AlertState``,
``stats.ratecusum.Tracker``). One that
does not decode (written by another version of reliabilityd, or damaged)
comes back as ``Undecodable``, never as an exception and never as bytes, so
each reader decides what it shows and no reader can stop on it.
``UndecodableLog`` is the warning every daemon reader logs for one.
"""

from __future__ import annotations

import logging
from typing import Literal

import msgspec

from reliabilityd.logs import RateLimited
from reliabilityd.rules import AlertState
from reliabilityd.stats import ratecusum
from reliabilityd.stats.snapshot import Snapshot

__all__ = ["Undecodable", "UndecodableLog", "alert_state_of", "snapshot_of", "trigger_state_of"]

Document = Literal["snapshot", "alert_state", "row", "trigger_state"]


class Undecodable(msgspec.Struct, frozen=True):
    """A stored document this version cannot read: which one, its Redis key, and why.

    Readers treat it as absent and, where they show state, say "undecodable";
    the next write of the document replaces it.
    """

    document: Document
    key: str
    error: str
    # Of an alert state: the compare-and-set fields stored beside the document
    # (read on their own), so the next transition can overwrite it.
    seq: int = 0
    snapshot_version: int = -1


class UndecodableLog:
    """The rate-limited warning a reader logs for the undecodable documents it meets.

    The event is ``snapshot_undecodable`` or ``alert_state_undecodable`` with
    the key and the decode error; each reader owns one, so a page load cannot
    silence the evaluator's line.
    """

    def __init__(self, interval: float = 30.0) -> None:
        self._limit = RateLimited(interval)

    def note(self, found: Undecodable) -> None:
        self._limit.emit(
            logging.WARNING, f"{found.document}_undecodable", key=found.key, error=found.error
        )


_snapshot = msgspec.json.Decoder(Snapshot)
_state = msgspec.json.Decoder(AlertState)


def snapshot_of(key: str, raw: bytes | str | None) -> Snapshot | Undecodable | None:
    """The snapshot document stored at ``key`` (its ``json`` field); None when there is none."""
    if raw is None:
        return None
    try:
        return _snapshot.decode(raw)
    except msgspec.DecodeError as exc:  # ValidationError is one: the wrong shape
        return Undecodable("snapshot", key, str(exc))


def alert_state_of(
    key: str, seq_raw: bytes | str | None, snap_raw: bytes | str | None, doc: bytes | str | None
) -> AlertState | Undecodable:
    """A rule's state from its hash fields (``seq``, ``snap``, ``doc``); inactive without one."""
    try:
        seq = int(seq_raw or 0)
        snap = int(snap_raw) if snap_raw is not None else -1
    except ValueError as exc:
        return Undecodable("alert_state", key, f"bad seq or snap field: {exc}")
    if doc is None:
        return AlertState(seq=seq, snapshot_version=snap)
    try:
        state = _state.decode(doc)
    except msgspec.DecodeError as exc:
        return Undecodable("alert_state", key, str(exc), seq=seq, snapshot_version=snap)
    return msgspec.structs.replace(state, seq=seq, snapshot_version=snap)


def trigger_state_of(key: str, raw: bytes | None) -> ratecusum.Tracker | Undecodable | None:
    """A rate rule's stored statistics (its ``doc`` field); None when there is none."""
    if raw is None:
        return None
    try:
        return ratecusum.decode(raw)
    except ValueError as exc:  # msgspec's errors are ones, and so are arrays out of shape
        return Undecodable("trigger_state", key, str(exc))
