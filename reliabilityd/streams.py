"""The Redis Stream edge: a consumer group, XACK after the commit.

Agents ``XADD <key> * payload <json or msgpack>``. On start the consumer
first re-reads what it left pending itself (a crash between commit and XACK),
then new entries; every ``claim_idle`` seconds it claims entries that another,
presumably dead, consumer left pending (XAUTOCLAIM). Re-applying an entry is
harmless: the trial ids make counting idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.exceptions

from reliabilityd.config import StreamConfig
from reliabilityd.logs import emit
from reliabilityd.store import Redis

Commit = Callable[[Sequence[tuple[bytes, str]]], Awaitable[None]]
BLOCK_MS = 500


async def _ensure_group(client: Redis, config: StreamConfig) -> None:
    try:
        await client.xgroup_create(config.key, config.group, id="0", mkstream=True)
    except redis.exceptions.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _payloads(entries: Sequence[Any], source: str) -> tuple[list[bytes], list[tuple[bytes, str]]]:
    ids: list[bytes] = []
    out: list[tuple[bytes, str]] = []
    for entry_id, fields in entries:
        if fields is None:  # deleted while pending
            ids.append(entry_id)
            continue
        ids.append(entry_id)
        payload = fields.get(b"payload")
        out.append((payload if payload is not None else b"", source))
    return ids, out


def _read_entries(reply: Any) -> Sequence[Any]:
    """XREADGROUP's entries for our one stream (RESP2: [[key, entries]])."""
    return reply[0][1] if reply else []


async def consume(
    client: Redis,
    config: StreamConfig,
    consumer: str,
    commit: Commit,
    stop: asyncio.Event,
    *,
    max_batch: int,
) -> None:
    source = f"stream:{config.key}"
    backoff = 0.2
    own_pending = True
    next_claim = 0.0
    group_ready = False
    while not stop.is_set():
        try:
            if not group_ready:
                await _ensure_group(client, config)
                group_ready = True
            entries: Sequence[Any] = []
            if time.monotonic() >= next_claim:
                next_claim = time.monotonic() + config.claim_idle / 2
                claimed = await client.xautoclaim(
                    config.key,
                    config.group,
                    consumer,
                    min_idle_time=int(config.claim_idle * 1000),
                    start_id="0-0",
                    count=max_batch,
                )
                entries = claimed[1]
            if not entries:
                start = "0" if own_pending else ">"
                reply = await client.xreadgroup(
                    config.group,
                    consumer,
                    {config.key: start},
                    count=max_batch,
                    block=None if own_pending else BLOCK_MS,
                )
                entries = _read_entries(reply)
                if own_pending and not entries:
                    own_pending = False
                    continue
            if not entries:
                continue
            ids, payloads = _payloads(entries, source)
            if payloads:
                await asyncio.shield(commit(payloads))
            await client.xack(config.key, config.group, *ids)
            backoff = 0.2
        except redis.exceptions.ResponseError as exc:
            # NOGROUP: the group is gone; UNBLOCKED: the key was deleted while we waited.
            if not str(exc).startswith(("NOGROUP", "UNBLOCKED")):
                raise
            # The stream or its group was deleted under us: create them again.
            emit(logging.WARNING, "stream_group_missing", key=config.key, group=config.group)
            group_ready = False
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            emit(logging.WARNING, "stream_unavailable", error=exc, retry_in=round(backoff, 2))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            backoff = min(backoff * 2, 10.0)
