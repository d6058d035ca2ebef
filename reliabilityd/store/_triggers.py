"""The rate trigger's inputs and state: each task's lifetime counts, and one document per
(series, rule) written by compare-and-set.

A series without a window keeps each task's lifetime counts in its tasks hash
(``n:c``); one with a window keeps them beside it, in its totals hash (written
by the same APPLY call). ``read`` takes them together with the series version
and the rules' stored states in one transaction, so the counts a state is
advanced on are those of that version; ``write`` stores the advanced state only
if no other writer stored one since it was read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from reliabilityd.store._base import Redis, _text
from reliabilityd.store._scripts import TRIGGER_CAS
from reliabilityd.store.keys import Keys, Series

__all__ = ["TriggerInput", "Triggers"]

# A state no tick has written for this long goes (its rule was removed, or its
# series went quiet): the next tick starts afresh, as after an alarm.
STATE_LIFE_MS = 7 * 86400 * 1000


class TriggerInput(msgspec.Struct, frozen=True):
    """One series at one version: its tasks' lifetime counts, and each rule's stored
    state (the seq to write back with, and the document, None when there is none)."""

    version: int
    tasks: list[str]
    n: list[int]
    c: list[int]
    states: list[tuple[int, bytes | None]]


def _counts(raw: Any) -> tuple[int, int] | None:
    """``n:c`` at the front of a stored value; None when it is not that."""
    try:
        n_text, c_text = _text(raw).split(":", 2)[:2]
        n, c = int(n_text), int(c_text)
    except (ValueError, UnicodeDecodeError):
        return None
    return (n, c) if 0 <= c <= n else None


class Triggers:
    """Reads and writes of the rate trigger's per-(series, rule) state."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def key(self, series: Series, rule: str) -> str:
        return self.keys.series(series, f"trigger:{rule}")

    async def read(self, series: Series, rules: Sequence[str], *, windowed: bool) -> TriggerInput:
        """The series' counts and the rules' states, in one transaction.

        A task whose stored value is not counts is left out (and so starts afresh
        when it reads again); with a window, a task without totals counts from 0.
        """
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hget(self.keys.series(series, "meta"), "version")
            pipe.hgetall(self.keys.series(series, "tasks"))
            if windowed:
                pipe.hgetall(self.keys.series(series, "totals"))
            for rule in rules:
                pipe.hmget(self.key(series, rule), "seq", "doc")
            replies = await pipe.execute()
        version = int(replies[0] or 0)
        stored: dict[Any, Any] = replies[1]
        totals: dict[Any, Any] | None = replies[2] if windowed else None
        tasks: list[str] = []
        n: list[int] = []
        c: list[int] = []
        for raw_task, value in stored.items():
            got = _counts(value if totals is None else totals.get(raw_task, b"0:0"))
            if got is None:
                continue
            try:
                tasks.append(_text(raw_task))
            except UnicodeDecodeError:
                continue
            n.append(got[0])
            c.append(got[1])
        states: list[tuple[int, bytes | None]] = []
        for seq_raw, doc in replies[2 if totals is None else 3 :]:
            try:
                seq = int(seq_raw or 0)
            except ValueError:
                seq = -1  # damaged: the next write replaces it (trigger_cas)
            states.append((seq, doc if isinstance(doc, bytes) else None))
        return TriggerInput(version, tasks, n, c, states)

    async def write(self, series: Series, rule: str, seq: int, doc: bytes) -> bool:
        """Store ``doc`` as the rule's state if it is still at ``seq``; False when another
        writer stored one since."""
        got = await self.client.eval(
            TRIGGER_CAS, 1, self.key(series, rule), seq, doc, STATE_LIFE_MS
        )
        return int(got) == 1
