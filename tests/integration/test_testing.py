"""The testing source and sink (``reliabilityd.testing``) on the real commit, against Redis.

What docs/testing.md promises: the items are counted once, the rejected
ones come back with their classes, every item is acknowledged once its
batch is in Redis, in order; ``mqtt.bind_suite``, the label screen and the
suite cap apply as they do to MQTT; and what the sink says is what Redis
holds.
"""

from __future__ import annotations

from typing import Any

import msgspec

from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig, SuiteOverride
from reliabilityd.events import TrialEvent
from reliabilityd.testing import Item, TestingSink, TestingSource, commit_to
from tests.support.servers import RedisServer


def config(redis_server: RedisServer, prefix: str, **sections: Any) -> Config:
    cfg = Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1]),
    )
    return msgspec.structs.replace(cfg, **sections)


async def test_the_documented_example_counts_rejects_and_acknowledges(
    redis_server: RedisServer, prefix: str
) -> None:
    payloads: list[Item] = [
        b'{"suite": "deploy-bot", "task": "t1", "trial": "run-1", "outcome": "pass"}',
        TrialEvent("deploy-bot", "t1", "run-2", "fail"),
        [TrialEvent("deploy-bot", "t2", "run-3", "pass")] * 2,
        b"PASS deploy-bot t1",
    ]
    cfg = config(redis_server, prefix)
    async with commit_to(cfg) as commit:
        sink = await TestingSource(payloads, topic="reliability/trials/deploy-bot").run(commit)
        state = await commit.store.reads.read_state("deploy-bot")
        (letter,) = await commit.store.reads.deadletters()
    assert sink.counted("deploy-bot") == 3
    assert sink.duplicates("deploy-bot") == 1
    assert sink.reason_classes() == ["undecodable"]
    assert sink.acknowledged == [0, 1, 2, 3]
    # The sink says what Redis holds.
    assert (state.counters.trials, state.counters.duplicates) == (3, 1)
    assert (letter.reason_class, letter.source) == (
        "undecodable",
        "mqtt:reliability/trials/deploy-bot",
    )


async def test_batches_are_acknowledged_in_order_and_a_redelivery_counts_nothing(
    redis_server: RedisServer, prefix: str
) -> None:
    events = [TrialEvent("s", f"task {i % 7}", f"r{i}", "pass") for i in range(250)]
    cfg = config(redis_server, prefix)
    async with commit_to(cfg) as commit:
        sink = await TestingSource(events, batch_size=40).run(commit)
        assert len(sink.committed) == 7  # 250 items, 40 a batch
        assert sink.acknowledged == list(range(250))
        assert sink.counted() == 250
        # The same items again, as a broker redelivers them: all duplicates.
        again = await TestingSource(events, batch_size=40).run(commit, TestingSink())
        assert (again.counted(), again.duplicates()) == (0, 250)
        assert (await commit.store.reads.read_state("s")).counters.trials == 250


async def test_the_binding_the_label_screen_and_the_suite_cap_apply_as_over_mqtt(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = config(
        redis_server,
        prefix,
        mqtt=MqttConfig(enabled=False, bind_suite="last-level"),
        stats=StatsConfig(k=[1], max_suites=2),
        suites=[SuiteOverride(match="sliced", slice_by=["model"])],
    )
    items = [
        TrialEvent("mine", "t", "1", "pass"),
        TrialEvent("other", "t", "1", "pass"),  # the topic binds "mine"
    ]
    sliced = [
        TrialEvent("sliced", "t", "1", "pass", labels={"model": "m"}),
        TrialEvent("sliced", "t", "2", "pass", labels={"model": {"no": "slice"}}),
    ]
    async with commit_to(cfg) as commit:
        bound = await TestingSource(items, topic="r/mine").run(commit)
        screened = await TestingSource(sliced, topic="r/sliced").run(commit)
        capped = await TestingSource([TrialEvent("third", "t", "1", "pass")], topic="r/third").run(
            commit
        )
        suites = await commit.store.reads.suites()
    assert (bound.counted(), bound.reason_classes()) == (1, ["topic_mismatch"])
    assert (screened.counted(), screened.reason_classes()) == (1, ["invalid_field"])
    assert list(screened.committed[0].not_counted) == [1]
    assert (capped.counted(), capped.reason_classes()) == (0, ["too_many_suites"])
    assert list(capped.committed[0].not_counted) == [0]
    assert capped.acknowledged == [0]  # refused, and acknowledged: it is dead-lettered
    assert suites == ["mine", "sliced"]
