"""A testing source and sink: payloads through the daemon's own commit path, no broker.

A ``TestingSource`` hands a list of payloads to a commit (``sources.Commit``)
exactly as the MQTT source hands it the messages it takes: in batches, the
next batch decoded while the last one commits, each acknowledged only once
Redis has applied it. A ``TestingSink`` records what came out: each batch's
``Committed`` (what every suite counted, the dead letters with their reason
classes, the events refused at admission) and the order of the
acknowledgements. The commit is the real one, against a real Redis: the
decoder, ``mqtt.bind_suite``, the label screen, the suite cap, the Lua
apply and the dead letters, with the configuration under test.

A pipeline's own test, with a throwaway Redis::

    from reliabilityd.config import load
    from reliabilityd.testing import TestingSource, commit_to

    async def test_the_agents_payloads_count() -> None:
        config = load("config.toml")  # its [redis] a Redis the test may write
        async with commit_to(config) as commit:
            sink = await TestingSource(payloads, topic="reliability/trials/x").run(commit)
        assert sink.counted("deploy-bot") == 20
        assert sink.reason_classes() == []

``daemon.commit`` of a running ``Daemon`` is a commit too: a source run
through it also moves the daemon's metrics and live values.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from functools import partial

import msgspec

from reliabilityd.config import Config
from reliabilityd.events import TrialEvent
from reliabilityd.rejections import ReasonClass
from reliabilityd.sources import Commit, Committed, Committer, Flight, Letter
from reliabilityd.store import Applied, Store, connect

__all__ = ["Item", "TestingSink", "TestingSource", "commit_to"]

# One item of a source: a payload's bytes (JSON or MessagePack, as a producer
# sends them), one event, or a list of events (one array payload).
Item = bytes | TrialEvent | Sequence[TrialEvent]


class TestingSink:
    """What the commit did with a ``TestingSource``'s items, batch by batch."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        # Each batch's result, in commit order.
        self.committed: list[Committed] = []
        # The positions of the source's items, in the order they were acknowledged.
        self.acknowledged: list[int] = []

    def acknowledge(self, positions: range, committed: Committed) -> None:
        """The commit's acknowledge hook: called once Redis has applied the batch."""
        self.committed.append(committed)
        self.acknowledged.extend(positions)

    @property
    def applied(self) -> list[Applied]:
        """Every suite's result of every batch, in commit order."""
        return [a for c in self.committed for a in c.applied]

    @property
    def letters(self) -> list[Letter]:
        """Every dead letter the commit wrote, with its source."""
        return [letter for c in self.committed for letter in c.letters]

    def counted(self, suite: str | None = None) -> int:
        """Trials (pass or fail) counted, of ``suite`` or of all; duplicates are not."""
        return sum(a.counted for a in self.applied if suite is None or a.suite == suite)

    def duplicates(self, suite: str | None = None) -> int:
        """Events found already applied (the same trial id), of ``suite`` or of all."""
        return sum(a.duplicates for a in self.applied if suite is None or a.suite == suite)

    def reason_classes(self) -> list[ReasonClass]:
        """The reason class of every dead letter, in order."""
        return [rejected.reason_class for rejected, _ in self.letters]


class TestingSource:
    """Items handed to a commit as a source hands it messages (module docstring).

    ``topic`` makes each item an MQTT message on that topic (source
    ``mqtt:<topic>``, held to it by ``mqtt.bind_suite``); else ``source``
    names where the dead letters say the items came from. ``batch_size`` is
    the most items per batch (``ingest.max_batch`` for MQTT).
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        items: Iterable[Item],
        *,
        topic: str | None = None,
        source: str = "testing",
        batch_size: int = 1000,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        self.payloads = [_payload(item) for item in items]
        self.source = f"mqtt:{topic}" if topic is not None else source
        self.batch_size = batch_size

    async def run(self, commit: Committer, sink: TestingSink | None = None) -> TestingSink:
        """Commit every item, in order; return the sink once the last batch is acknowledged.

        A Redis error pauses the commit (it retries, as every source's does)
        unless the commit was made without retry.
        """
        out = sink if sink is not None else TestingSink()
        flight = Flight(commit)
        try:
            for start in range(0, len(self.payloads), self.batch_size):
                chunk = self.payloads[start : start + self.batch_size]
                batch = commit.decode([(payload, self.source) for payload in chunk])
                positions = range(start, start + len(chunk))
                await flight.start(batch, partial(out.acknowledge, positions))
            await flight.finish()
        finally:
            await flight.leave()
        return out


def _payload(item: Item) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, TrialEvent):
        return msgspec.json.encode(item)
    return msgspec.json.encode(list(item))


@contextlib.asynccontextmanager
async def commit_to(config: Config) -> AsyncIterator[Commit]:
    """A commit into the Redis ``config`` names (its URL, prefix, cluster mode), with
    ``config``'s settings; its connections are closed on exit."""
    client = connect(config.redis.url, cluster=config.redis.cluster, timeout=config.redis.timeout)
    try:
        yield Commit(config, Store(client, config.redis.prefix))
    finally:
        await client.aclose()
