"""The rate trigger's inputs and state: each task's lifetime counts, and one document per
(series, rule) written by compare-and-set.

A series without a window keeps each task's lifetime counts in its tasks hash
(``n:c``); one with a window keeps them beside it, in its totals hash (written
by the same APPLY call). ``read`` takes them together with the series version
and the rules' stored states in one script call per series (``trigger_read``),
so the counts a state is advanced on are those of that version; ``write``
stores the advanced state only if no other writer stored one since it was
read. Either takes a tick's whole batch in one round trip.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from reliabilityd.stats import ratecusum
from reliabilityd.store._base import Redis, _text
from reliabilityd.store._documents import Undecodable, trigger_state_of
from reliabilityd.store._errors import boundary
from reliabilityd.store._scripts import TRIGGER_CAS, TRIGGER_READ
from reliabilityd.store._wire import pipelined
from reliabilityd.store.keys import Keys, Series

__all__ = ["TriggerInput", "Triggers", "all_counts_of", "counts_of", "seq_of"]

# A state no tick has written for this long goes (its rule was removed, or its
# series went quiet): the next tick starts afresh, with a warm-up.
STATE_LIFE_MS = 7 * 86400 * 1000
# Counts and seqs past this are damage, not data (and past what Lua's numbers hold
# exactly, which trigger_cas compares).
_MOST = 2**53
_SEQ = re.compile(rb"-?[0-9]{1,15}")


class TriggerInput(msgspec.Struct, frozen=True):
    """One series at one version: its tasks' lifetime counts, and each rule's stored
    state (the seq to write back with, and the state: None when there is none,
    ``Undecodable`` when it does not decode)."""

    version: int
    tasks: list[str]
    n: list[int]
    c: list[int]
    states: list[tuple[int, ratecusum.Tracker | Undecodable | None]]


def counts_of(raw: Any) -> tuple[int, int] | None:
    """``n:c`` at the front of a stored value; None when it is not that."""
    try:
        n_text, c_text = _text(raw).split(":", 2)[:2]
        n, c = int(n_text), int(c_text)
    except (ValueError, UnicodeDecodeError):
        return None
    return (n, c) if 0 <= c <= n < _MOST else None


def all_counts_of(stored: dict[Any, Any]) -> tuple[list[str], list[int], list[int]] | None:
    """Every value exactly ``n:c`` at once (one split, one conversion), the common case;
    None when any is not that, so each is parsed alone (``counts_of``)."""
    try:
        values = list(stored.values())
        if not all(isinstance(v, bytes) and v.count(b":") == 1 for v in values):
            return None
        tasks = [_text(t) for t in stored]
        counts = np.array(b":".join(values).split(b":"), dtype=np.bytes_).astype(np.int64)
    except (ValueError, TypeError, OverflowError, UnicodeDecodeError):
        return None
    n, c = counts[0::2], counts[1::2]
    if not bool(((c >= 0) & (c <= n) & (n < _MOST)).all()):
        return None
    return tasks, n.tolist(), c.tolist()


def seq_of(raw: Any) -> int:
    """A state's stored seq: 0 when there is none, -1 when it is damaged (not an integer
    of at most 15 digits), as trigger_cas reads it."""
    if raw is None:
        return 0
    return int(raw) if isinstance(raw, bytes) and _SEQ.fullmatch(raw) else -1


@boundary
class Triggers:
    """Reads and writes of the rate trigger's per-(series, rule) state."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def key(self, series: Series, rule: str) -> str:
        """The rule's state on the series (a slice's rule is named ``<rule>[<slice id>]``)."""
        return self.keys.series(series, f"trigger:{rule}")

    async def read(
        self, requests: Sequence[tuple[Series, Sequence[str], bool]]
    ) -> list[TriggerInput | None]:
        """Per (series, its rate rules' names, whether it has a window): its counts and
        the rules' states, each series read atomically (``trigger_read``), every series in
        one round trip; None for a series whose reply is not of the script's shape.

        A task whose stored value is not counts is left out (and so starts afresh
        when it reads again); with a window, a task without totals counts from 0.
        """
        commands = []
        for series, rules, windowed in requests:
            keys = [self.keys.series(series, name) for name in ("meta", "tasks", "totals")]
            keys += [self.key(series, rule) for rule in rules]
            commands.append(("EVAL", TRIGGER_READ, len(keys), *keys, int(windowed)))
        replies = await pipelined(self.client, commands) if commands else []
        out: list[TriggerInput | None] = []
        for (series, rules, windowed), reply in zip(requests, replies, strict=True):
            try:
                out.append(self._input(series, rules, windowed, reply))
            except (ValueError, TypeError):
                out.append(None)
        return out

    def _input(
        self, series: Series, rules: Sequence[str], windowed: bool, reply: Any
    ) -> TriggerInput:
        version_raw, flat, flat_totals, *raw_states = reply
        try:
            version = int(version_raw or 0)
        except ValueError:
            version = 0  # a damaged counter: the state's version says nothing then
        stored: dict[Any, Any] = dict(zip(flat[0::2], flat[1::2], strict=True))
        if windowed:
            totals = dict(zip(flat_totals[0::2], flat_totals[1::2], strict=True))
            stored = {task: totals.get(task, b"0:0") for task in stored}
        tasks: list[str] = []
        n: list[int] = []
        c: list[int] = []
        fast = all_counts_of(stored)
        if fast is not None:
            tasks, n, c = fast
        for raw_task, value in stored.items() if fast is None else ():
            got = counts_of(value)
            if got is None:
                continue
            try:
                tasks.append(_text(raw_task))
            except UnicodeDecodeError:
                continue
            n.append(got[0])
            c.append(got[1])
        states: list[tuple[int, ratecusum.Tracker | Undecodable | None]] = []
        for rule, (seq_raw, doc) in zip(rules, raw_states, strict=True):
            raw = doc if isinstance(doc, bytes) else None
            # A damaged seq reads as -1, which the next write sends (trigger_cas).
            states.append((seq_of(seq_raw), trigger_state_of(self.key(series, rule), raw)))
        return TriggerInput(version, tasks, n, c, states)

    async def write(
        self, writes: Sequence[tuple[Series, str, int, ratecusum.Tracker]]
    ) -> list[bool]:
        """Per (series, rule, the seq it was read at, its new state): stored if the rule's
        state is still at that seq (True), or left as another writer stored it since; every
        write in one round trip."""
        commands = [
            (
                "EVAL",
                TRIGGER_CAS,
                1,
                self.key(series, rule),
                seq,
                ratecusum.encode(state),
                STATE_LIFE_MS,
            )
            for series, rule, seq, state in writes
        ]
        replies = await pipelined(self.client, commands) if commands else []
        return [int(r) == 1 for r in replies]
