"""What the soak's producers sent and got acknowledged, and its check against the counts.

Only a trial's first send enters the ledger: a resend (after a broker
restart, a 503, or on purpose) names the same trial id and must not count
again. At any moment no (suite, task) may count more than was sent (else a
trial counted twice) nor less than it counted at an earlier read (else a
committed trial was lost); once every send is acknowledged and the daemon has
caught up, each must count exactly what was sent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from reliabilityd import AsyncClient

# The label the sliced suite is split by, and its values.
SLICE_KEY = "model"
MODELS = ("m1", "m2", "m3")


@dataclass(frozen=True)
class Trial:
    suite: str
    task: str
    trial: str
    outcome: str  # pass, fail, error or skip
    model: str | None = None  # the slice label, for the sliced suite

    def wire(self) -> dict[str, Any]:
        """The trial in the wire format (docs/ingest.md)."""
        out: dict[str, Any] = {
            "suite": self.suite,
            "task": self.task,
            "trial": self.trial,
            "outcome": self.outcome,
        }
        if self.model is not None:
            out["labels"] = {SLICE_KEY: self.model}
        return out

    @property
    def slice(self) -> str | None:
        """The slice id the daemon files it under (docs/slices.md)."""
        return None if self.model is None else f"{SLICE_KEY}={self.model}"


@dataclass
class Tally:
    """Counted outcomes of a suite or a slice: trials (pass or fail), passes, errors, skips."""

    trials: int = 0
    passes: int = 0
    errors: int = 0
    skips: int = 0

    def add(self, outcome: str) -> None:
        if outcome == "error":
            self.errors += 1
        elif outcome == "skip":
            self.skips += 1
        else:
            self.trials += 1
            self.passes += outcome == "pass"

    @property
    def events(self) -> int:
        return self.trials + self.errors + self.skips


@dataclass
class SuiteCount:
    """What the store says of one suite: each task's (n, c) and the suite's counters."""

    tasks: dict[str, tuple[int, int]]
    trials: int
    errors: int
    skips: int
    duplicates: int

    @property
    def events(self) -> int:
        return self.trials + self.errors + self.skips


Counts = dict[str, SuiteCount]


async def read_counts(client: AsyncClient, suites: list[str]) -> Counts:
    """Each suite's task counts and counters, read through the public client."""
    out: Counts = {}
    for suite in suites:
        tasks = await client.tasks(suite)
        c = (await client.summary(suite)).counters
        out[suite] = SuiteCount(tasks, c.trials, c.errors, c.skips, c.duplicates)
    return out


@dataclass
class Ledger:
    # suite -> task -> [n, c] of the first sends
    tasks: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    suites: dict[str, Tally] = field(default_factory=dict)
    # suite -> slice id -> its tally
    slices: dict[str, dict[str, Tally]] = field(default_factory=dict)
    # source -> events: first sends, their acknowledgments, and the events of
    # acknowledged resends on purpose (by source and by suite)
    sent: Counter[str] = field(default_factory=Counter)
    acked: Counter[str] = field(default_factory=Counter)
    resent: Counter[str] = field(default_factory=Counter)
    resent_suites: Counter[str] = field(default_factory=Counter)

    def add(self, trial: Trial, source: str) -> None:
        """A trial sent for the first time."""
        self.sent[source] += 1
        self.suites.setdefault(trial.suite, Tally()).add(trial.outcome)
        if trial.slice is not None:
            self.slices.setdefault(trial.suite, {}).setdefault(trial.slice, Tally()).add(
                trial.outcome
            )
        if trial.outcome in ("pass", "fail"):
            nc = self.tasks.setdefault(trial.suite, {}).setdefault(trial.task, [0, 0])
            nc[0] += 1
            nc[1] += trial.outcome == "pass"

    def ack(self, trials: list[Trial], source: str, *, resend: bool = False) -> None:
        """Trials the edge acknowledged: a PUBACK, a 200."""
        if resend:
            self.resent[source] += len(trials)
            self.resent_suites.update(t.suite for t in trials)
        else:
            self.acked[source] += len(trials)

    @property
    def unacked(self) -> int:
        return sum(self.sent.values()) - sum(self.acked.values())

    def expected(self, suite: str) -> dict[str, tuple[int, int]]:
        return {task: (nc[0], nc[1]) for task, nc in self.tasks.get(suite, {}).items()}

    def over(self, counts: Counts) -> list[str]:
        """Tasks and counters above what was sent: trials counted twice.

        Read the counts before calling: the ledger only grows meanwhile.
        """
        out = []
        for suite, got in counts.items():
            want = self.expected(suite)
            for task, (n, c) in sorted(got.tasks.items()):
                wn, wc = want.get(task, (0, 0))
                if n > wn or c > wc:
                    out.append(f"{suite}/{task}: counted n={n} c={c}, sent n={wn} c={wc}")
            tally = self.suites.get(suite, Tally())
            for name, g, w in (
                ("errors", got.errors, tally.errors),
                ("skips", got.skips, tally.skips),
            ):
                if g > w:
                    out.append(f"{suite}: {g} {name} counted, {w} sent")
        return out

    @staticmethod
    def back(before: Counts, now: Counts) -> list[str]:
        """Tasks that count less than at an earlier read: committed trials lost."""
        out = []
        for suite, old in before.items():
            new = now.get(suite)
            if new is None:
                continue
            for task, (n, c) in sorted(old.tasks.items()):
                nn, nc = new.tasks.get(task, (0, 0))
                if nn < n or nc < c:
                    out.append(f"{suite}/{task}: n={n} c={c} went back to n={nn} c={nc}")
        return out

    def differences(self, counts: Counts) -> list[str]:
        """Every way the counts differ from what was sent (all of it acknowledged)."""
        out = []
        for suite in sorted(self.suites):
            got = counts.get(suite)
            if got is None:
                out.append(f"{suite}: not read")
                continue
            want = self.expected(suite)
            for task in sorted(set(want) | set(got.tasks)):
                w, g = want.get(task, (0, 0)), got.tasks.get(task, (0, 0))
                if w != g:
                    kind = "lost" if g[0] < w[0] or g[1] < w[1] else "counted twice"
                    out.append(f"{suite}/{task}: {kind}: sent n={w[0]} c={w[1]}, counted {g}")
            tally = self.suites[suite]
            for name, g_, w_ in (
                ("trials", got.trials, tally.trials),
                ("errors", got.errors, tally.errors),
                ("skips", got.skips, tally.skips),
            ):
                if g_ != w_:
                    out.append(f"{suite}: {name} counted {g_}, sent {w_}")
            if got.duplicates < self.resent_suites[suite]:
                out.append(
                    f"{suite}: {got.duplicates} duplicates counted, fewer than the "
                    f"{self.resent_suites[suite]} events resent on purpose and acknowledged"
                )
        return out

    async def slice_differences(self, client: AsyncClient) -> list[str]:
        """The sliced suites' slices: the ids, and each one's counters against the sends."""
        out = []
        for suite, want in sorted(self.slices.items()):
            got_ids = await client.slices(suite)
            if sorted(got_ids) != sorted(want):
                out.append(f"{suite}: slices {got_ids}, sent {sorted(want)}")
            for sid, tally in sorted(want.items()):
                c = (await client.summary(suite, slice=sid)).counters
                got = (c.trials, c.errors, c.skips)
                if got != (tally.trials, tally.errors, tally.skips):
                    out.append(
                        f"{suite} [{sid}]: counted (trials, errors, skips) {got}, sent "
                        f"{(tally.trials, tally.errors, tally.skips)}"
                    )
        return out
