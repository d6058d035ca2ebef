"""The Redis Stream edge: a consumer group, XACK after the commit.

Agents ``XADD <key> * payload <json or msgpack>``. Each batch of entries
goes through the commit (``Commit``), whose acknowledge hook XACKs them
once Redis has applied the batch. On start the consumer
first re-reads what it left pending itself (a crash between commit and XACK),
then new entries; every ``claim_idle`` seconds it claims entries that another,
presumably dead, consumer left pending (XAUTOCLAIM). Re-applying an entry is
harmless: the trial ids make counting idempotent.

Each commit carries the batch's last entry id, which the store keeps with
the commit. When the stream or its group is deleted, the group is created
again after that id: nothing committed is read twice (even past the dedup
records' lifetime), nothing newer is skipped. Every Redis error pauses the
source and is retried with capped backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from reliabilityd.backoff import Backoff
from reliabilityd.config import StreamConfig
from reliabilityd.logs import RateLimited, emit
from reliabilityd.sources._commit import Committed, Committer
from reliabilityd.store import Store, StoreError, StoreRefused, StreamCursor

BLOCK_MS = 500
# The error replies of a group that is gone (NOGROUP) or of a key deleted
# while a read blocked on it (UNBLOCKED): create the group again.
GROUP_GONE = frozenset({"NOGROUP", "UNBLOCKED"})


def _payloads(entries: Sequence[Any], source: str) -> tuple[list[bytes], list[tuple[bytes, str]]]:
    ids: list[bytes] = []
    out: list[tuple[bytes, str]] = []
    for entry_id, fields in entries:
        ids.append(entry_id)
        if fields is None:  # deleted while pending
            continue
        payload = fields.get(b"payload")
        out.append((payload if payload is not None else b"", source))
    return ids, out


def _last_id(ids: Sequence[bytes]) -> str:
    def key(entry_id: bytes) -> tuple[int, int]:
        ms, _, seq = entry_id.decode().partition("-")
        return int(ms), int(seq or 0)

    return max(ids, key=key).decode()


async def consume(
    store: Store,
    config: StreamConfig,
    consumer: str,
    commit: Committer,
    stop: asyncio.Event,
    *,
    max_batch: int,
) -> None:
    source = f"stream:{config.key}"
    pace = Backoff(0.2, 10.0)
    errors = RateLimited()
    own_pending = True
    next_claim = 0.0
    group_ready = False
    while not stop.is_set():
        try:
            if not group_ready:
                start = await store.streams.ensure_group(config.key, config.group)
                if start is not None:
                    emit(logging.INFO, "stream_group_created", key=config.key, after=start)
                group_ready = True
            entries: Sequence[Any] = []
            if time.monotonic() >= next_claim:
                next_claim = time.monotonic() + config.claim_idle / 2
                entries = await store.streams.stream_claim(
                    config.key,
                    config.group,
                    consumer,
                    min_idle=config.claim_idle,
                    count=max_batch,
                )
            if not entries:
                entries = await store.streams.stream_read(
                    config.key,
                    config.group,
                    consumer,
                    own_pending=own_pending,
                    count=max_batch,
                    block_ms=BLOCK_MS,
                )
                if own_pending and not entries:
                    own_pending = False
                    continue
            if not entries:
                continue
            ids, payloads = _payloads(entries, source)
            cursor = StreamCursor(config.key, config.group, _last_id(ids))

            async def acknowledge(_: Committed, ids: list[bytes] = ids) -> None:
                await store.streams.stream_ack(config.key, config.group, ids)

            # A stop lets the commit finish (the loop checks it between
            # batches); a cancellation (the shutdown grace ran out) cancels
            # it: the entries stay pending and are claimed again.
            await commit(commit.decode(payloads), cursor=cursor, acknowledge=acknowledge)
            pace.reset()
        except StoreRefused as exc:
            if exc.code in GROUP_GONE:
                emit(logging.WARNING, "stream_group_missing", key=config.key, group=config.group)
                group_ready = False
                continue
            await _pause(errors, pace, stop, exc)
        except StoreError as exc:
            await _pause(errors, pace, stop, exc)


async def _pause(errors: RateLimited, pace: Backoff, stop: asyncio.Event, exc: StoreError) -> None:
    delay = await pace.wait(stop)
    errors.emit(
        logging.WARNING,
        "stream_unavailable",
        error=f"{type(exc).__name__}: {exc}",
        retried_after=round(delay, 2),
    )
