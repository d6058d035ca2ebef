"""One commit in flight: the next batch is taken and decoded while Redis applies this one.

A source that pulls batches (MQTT, the testing source) hands each decoded
batch to ``Flight.start``, which first waits for the commit before it, so

* commits run one at a time and in order: a task's outcomes reach Redis in
  arrival order, and keep it in its detector window;
* batch N is acknowledged (by its commit's hook, once Redis has it) before
  batch N+1's commit starts: PUBACKs keep PUBLISH order.

``start`` returns once the new commit's request is on its way to Redis, so
the source takes and decodes its next batch while Redis works.
"""

from __future__ import annotations

import asyncio

from reliabilityd.logs import log
from reliabilityd.sources._commit import Acknowledge, Batch, Committed, Committer


class Flight:
    """At most one commit of ``commit`` running, started in order (module docstring)."""

    def __init__(self, commit: Committer) -> None:
        self.commit = commit
        self._running: asyncio.Future[Committed] | None = None

    @property
    def busy(self) -> bool:
        """True while a commit started here has not been waited for."""
        return self._running is not None

    async def start(self, batch: Batch, acknowledge: Acknowledge) -> None:
        """Wait for the commit in flight, then start ``batch``'s; return once it is sent.

        A stop during the commit lets it finish: acknowledging needs it, and
        Redis applies it atomically anyway.
        """
        await self.finish()
        sent = asyncio.Event()
        running = asyncio.ensure_future(self.commit(batch, sent=sent, acknowledge=acknowledge))
        self._running = running
        if running.done():
            return
        waiter = asyncio.ensure_future(sent.wait())
        try:
            await asyncio.wait((waiter, running), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()

    async def finish(self) -> None:
        """Wait for the commit in flight (and so its acknowledgement), if any.

        A failed commit raises here, and stays in flight for ``leave``.
        """
        running = self._running
        if running is None:
            return
        await asyncio.shield(running)
        self._running = None

    async def leave(self) -> None:
        """The source leaves (its connection is gone, or it stops): settle the commit in flight.

        Let it end before the next connection's batches are applied (acknowledging
        on a closed connection sends nothing: its batch comes back unacknowledged,
        and dedup absorbs it). Cancelled (the shutdown grace ran out), cancel the
        commit too, so it closes its Redis connection instead of being left
        pending; its batch comes back, and a chunk Redis already applied is a
        duplicate then.
        """
        running, self._running = self._running, None
        if running is None:
            return
        task = asyncio.current_task()
        if task is None or task.cancelling() == 0:
            try:
                await asyncio.shield(running)
            except Exception:
                log.exception("commit failed while the source left its connection")
        else:
            running.cancel()
            await asyncio.wait({running}, timeout=1.0)
