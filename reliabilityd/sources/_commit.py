"""The commit: one path from a source's batch to Redis, the same for every source.

MQTT, Redis Streams, ``POST /v1/trials`` and ``POST /v1/logs`` differ in how
bytes arrive and in how they are acknowledged, never in what happens between.
A ``Commit`` takes a batch through four steps:

1. **decode**: ``Commit.decode`` turns (payload, source) pairs into a
   ``Batch`` (``events.decode_many``; an MQTT message held to its topic by
   ``mqtt.bind_suite``, ``topics``); the HTTP port, which answers element by
   element, decodes its body itself and builds the ``Batch`` with
   ``Batch.of``. Either way the events are grouped by suite once, in the
   ``Batch``.
2. **admit**: the events whose sliced labels name no slice and those of a new
   suite past its grant's quota or ``stats.max_suites`` are rejected
   (``_admission``; the caps are one atomic script across replicas,
   ``store.ingest.admit``).
3. **apply**: the dead letters, then one round trip of one Lua call per suite
   chunk (``store.ingest.apply``).
4. **acknowledge**: the source's hook (PUBACK, XACK, the HTTP answer), called
   once Redis has applied the batch, never before.

Every rejection comes with its reason class, set where it was made. A commit
with ``retry`` (the sources' own) retries any Redis error with capped
backoff, ingest paused and nothing acknowledged meanwhile; without it (the
HTTP port's) it tries once and raises ``CommitUnavailable``, which the
client sees as a 503 to retry. Trial ids make every retry harmless.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import Protocol, TypeVar

import msgspec

from reliabilityd.alerting.watchdog import RedisHealth, describe
from reliabilityd.backoff import Backoff
from reliabilityd.config import Config
from reliabilityd.errors import ReliabilitydError
from reliabilityd.events import TrialEvent, decode_many
from reliabilityd.logs import RateLimited, emit
from reliabilityd.rejections import Rejected
from reliabilityd.sources._admission import past_suite_cap, screen_labels
from reliabilityd.store import Applied, Slicing, Store, StoreError, StreamCursor
from reliabilityd.topics import Binding, decode_bound

T = TypeVar("T")
# A payload and the source it came from: "mqtt:<topic>", "stream:<key>", "http:<address>".
Payload = tuple[bytes, str]
# A rejected piece and the source its dead letter names.
Letter = tuple[Rejected, str]


class CommitUnavailable(ReliabilitydError):
    """Redis did not take a commit that is not retried; the client should retry later."""


class Batch:
    """What one commit writes: the good events grouped by suite, and the dead letters.

    ``events`` keeps the good events in arrival order (a ``Committed``
    names them by their index there); ``source`` is the source the dead
    letters the commit itself writes name (a new suite past the cap, a label
    that names no slice): a batch comes from one source, and its first
    payload's source stands for it.
    """

    __slots__ = ("by_suite", "events", "letters", "source")

    def __init__(self, events: list[TrialEvent], letters: list[Letter], source: str) -> None:
        self.events = events
        self.letters = letters
        self.source = source
        by_suite: defaultdict[str, list[TrialEvent]] = defaultdict(list)
        for event in events:  # the one place a batch is grouped by suite
            by_suite[event.suite].append(event)
        self.by_suite: dict[str, list[TrialEvent]] = dict(by_suite)

    @classmethod
    def of(cls, events: Iterable[TrialEvent], rejected: Iterable[Rejected], source: str) -> Batch:
        """A batch from one source: its good events and its rejected pieces."""
        return cls(list(events), [(r, source) for r in rejected], source)


class Committed(msgspec.Struct, frozen=True):
    """What one commit did.

    ``applied``: each suite's result. ``not_counted``: the index (in the
    batch's ``events``) of each event rejected at admission, with its
    rejection. ``letters``: every dead letter the commit wrote, those of the
    batch and those of its admission.
    """

    applied: list[Applied]
    not_counted: dict[int, Rejected] = msgspec.field(default_factory=dict)
    letters: list[Letter] = msgspec.field(default_factory=list)

    @property
    def counted(self) -> int:
        """Trials counted (pass or fail, not a duplicate) by this commit."""
        return sum(a.counted for a in self.applied)


# The source's acknowledgement of a committed batch (it may be a coroutine).
Acknowledge = Callable[[Committed], Awaitable[None] | None]


class Observer(Protocol):
    """What the rest of a process learns of each commit (metrics, live values)."""

    def committed(self, batch: Batch, committed: Committed, seconds: float) -> None:
        """A batch was applied (``seconds`` from the first attempt to Redis's reply)."""

    def deadlettered(self, letters: Sequence[Letter]) -> None:
        """Dead letters were written."""


class Committer(Protocol):
    """What a source needs of the commit: ``Commit`` is the one implementation."""

    def decode(self, payloads: Sequence[Payload], skipped: Sequence[tuple[int, str]] = ()) -> Batch:
        """The batch ``payloads`` come to; see ``Commit.decode``."""
        ...

    async def __call__(
        self,
        batch: Batch,
        *,
        sent: asyncio.Event | None = None,
        cursor: StreamCursor | None = None,
        acknowledge: Acknowledge | None = None,
    ) -> Committed:
        """Admit and apply ``batch``, then ``acknowledge`` it; see ``Commit.__call__``."""
        ...


class Commit:
    """Decode, admit, apply, acknowledge: the commit every source uses (module docstring).

    ``config`` is the one in force (``configure`` swaps it on a reload;
    ``mqtt.bind_suite`` and ``ingest.max_payload`` keep their first value,
    as they need a restart). ``health`` records that ingest waits for Redis
    (a retried commit only); ``observer`` hears of every commit.
    """

    def __init__(
        self,
        config: Config,
        store: Store,
        *,
        retry: bool = True,
        health: RedisHealth | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.retry = retry
        self.health = health if health is not None else RedisHealth()
        self.observer = observer
        bind = config.mqtt.bind_suite
        self.binding = Binding.parse(bind) if bind else None
        self.max_payload = config.ingest.max_payload
        self._deadletter_log = RateLimited()
        self._redis_logs: defaultdict[str, RateLimited] = defaultdict(RateLimited)

    def configure(self, config: Config) -> None:
        """The settings of ``config`` for every commit that starts from now on (a reload)."""
        self.config = config

    # --- decode -----------------------------------------------------------

    def decode(self, payloads: Sequence[Payload], skipped: Sequence[tuple[int, str]] = ()) -> Batch:
        """Decode a batch of (payload, source) pairs; never raises.

        ``skipped`` are the (size, source) of messages whose bodies were not
        read (over ``ingest.max_payload``): each is a ``too_large`` dead
        letter. With ``mqtt.bind_suite``, an event of an MQTT message (source
        ``mqtt:<topic>``) whose suite its topic does not bind is a
        ``topic_mismatch`` one.
        """
        limit = self.max_payload
        if self.binding is None:
            good, rejected = decode_many(payloads, limit)
        else:
            good, rejected = decode_bound(payloads, self.binding, limit)
        for size, source in skipped:
            reason = f"payload of {size} bytes exceeds ingest.max_payload ({limit}): not read"
            rejected.append((Rejected(b"", reason, "too_large"), source))
        first = payloads[0][1] if payloads else skipped[0][1] if skipped else "unknown"
        return Batch(good, rejected, first)

    # --- admit, apply, acknowledge ----------------------------------------

    async def __call__(
        self,
        batch: Batch,
        *,
        sent: asyncio.Event | None = None,
        cursor: StreamCursor | None = None,
        acknowledge: Acknowledge | None = None,
    ) -> Committed:
        """Dead-letter the rejected, admit and apply the good, then ``acknowledge``.

        Returns once Redis has it all and the hook has run. ``sent`` is set
        once the apply request is on its way to Redis (the MQTT source then
        decodes its next batch); ``cursor`` is a stream batch's last entry,
        kept in the same round trip. Raises ``CommitUnavailable`` on a Redis
        error when the commit is not retried.
        """
        cfg = self.config  # one config for the whole commit, whatever a reload does meanwhile
        store = self.store
        refused: dict[int, Rejected] = {}
        by_suite, screened = screen_labels(cfg, batch.by_suite, refused)
        letters = batch.letters
        if screened:
            letters = [*letters, *((r, batch.source) for r in screened)]
        if letters:
            maxlen = cfg.store.deadletter_maxlen
            await self._run(
                "deadletter",
                partial(store.ingest.deadletter, letters, maxlen=maxlen, grant_of=cfg.grant_name),
            )
            self._deadlettered(letters)
        capped: list[Letter] = []
        applied: list[Applied] = []
        seconds = 0.0
        if by_suite or cursor is not None:
            windows = {suite: cfg.suite_settings(suite)[0] for suite in by_suite}
            touch = {suite for suite in by_suite if cfg.idle_expiry(suite) > 0}
            slicing = {}
            for suite in by_suite:
                slice_by, most = cfg.slicing(suite)
                if slice_by:
                    slicing[suite] = Slicing(slice_by, most)
            recent = {s: r for s in by_suite if (r := cfg.recent(s)) is not None}
            at_cap: dict[int, Rejected] = {}

            async def admit_and_apply() -> list[Applied]:
                # One operation for the retry: ingest counts as resumed only once the
                # batch is applied, not when the admission alone went through.
                apply = by_suite
                at_cap.clear()
                capped.clear()
                if by_suite:
                    pools = {suite: cfg.pool_of(suite) for suite in by_suite}
                    out = await store.ingest.admit(pools, cfg.stats.max_suites)
                    if out:
                        source = batch.source
                        over = past_suite_cap(cfg, by_suite, out, at_cap)
                        capped.extend((r, source) for r in over)
                        await store.ingest.deadletter(
                            capped, maxlen=cfg.store.deadletter_maxlen, grant_of=cfg.grant_name
                        )
                        apply = {s: e for s, e in by_suite.items() if s not in out}
                if not apply and cursor is None:
                    return []
                return await store.ingest.apply(
                    apply,
                    windows=windows,
                    dedup_ttl=cfg.dedup_ttl,
                    cursor=cursor,
                    touch=touch,
                    sent=sent,
                    slicing=slicing,
                    recent=recent,
                )

            started = time.monotonic()
            applied = await self._run("apply", admit_and_apply)
            seconds = time.monotonic() - started
            refused.update(at_cap)
            if capped:
                self._deadlettered(capped)
        committed = Committed(
            applied,
            _positions(batch.events, refused) if refused else {},
            [*letters, *capped] if capped else letters,
        )
        if self.observer is not None and (by_suite or cursor is not None):
            self.observer.committed(batch, committed, seconds)
        if acknowledge is not None:
            done = acknowledge(committed)
            if inspect.isawaitable(done):
                await done
        return committed

    async def _run(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        """``op`` once (raising ``CommitUnavailable``), or with ``retry`` until it succeeds.

        Retried, any Redis error (connection, timeout, OOM, READONLY,
        NOSCRIPT, BUSY...) pauses ingest, unacknowledged, with capped backoff,
        logged at a limited rate; cancellation stops the retries.
        """
        if not self.retry:
            try:
                return await op()
            except StoreError as exc:
                raise CommitUnavailable(f"Redis: {exc}") from None
        pace = Backoff(0.1, 5.0)
        while True:
            try:
                result = await op()
            except StoreError as exc:
                self.health.failed("ingest", exc)
                delay = pace.next_delay()
                self._redis_logs[what].emit(
                    logging.WARNING,
                    "redis_unavailable",
                    during=what,
                    error=describe(exc),
                    retry_in=round(delay, 2),
                )
                await asyncio.sleep(delay)
                continue
            if pace.attempts:
                emit(logging.INFO, "redis_recovered", during=what, attempts=pace.attempts)
            self.health.ok("ingest")
            return result

    def _deadlettered(self, letters: Sequence[Letter]) -> None:
        first, source = letters[0]
        self._deadletter_log.emit(
            logging.WARNING,
            "deadletter",
            source=source,
            count=len(letters),
            reason=first.reason[:300],
        )
        if self.observer is not None:
            self.observer.deadlettered(letters)


def _positions(events: Sequence[TrialEvent], refused: dict[int, Rejected]) -> dict[int, Rejected]:
    """The index in ``events`` of each refused event (by identity), with its rejection."""
    return {i: refused[id(e)] for i, e in enumerate(events) if id(e) in refused}
