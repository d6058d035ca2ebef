"""Alerts end to end: real redis-server and mosquitto, an Alertmanager stand-in."""

from __future__ import annotations

import time
from datetime import datetime
from functools import partial
from typing import Any

import msgspec

from reliabilityd.alerting.evaluator import Evaluator, LastFailures
from reliabilityd.alerting.notify import LOTTERY_CASES
from reliabilityd.alerting.outbox import Outbox
from reliabilityd.config import (
    Config,
)
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Series, Store
from tests.support.alerting import (
    SUITE,
    Phase,
    alert_config,
    alert_is,
    alert_state,
    collect,
    flushed,
    history,
    phase_message,
    send,
    settled_alerts,
)
from tests.support.alertmanager import Receiver
from tests.support.daemon import running, store_for
from tests.support.helpers import (
    current_snapshot,
    publish,
    stored_snapshot,
    stored_states,
    wait_until,
)
from tests.support.servers import Mosquitto, RedisServer


async def test_degrade_fires_once_and_recovery_resolves_once(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        cfg = alert_config(redis_server, mosquitto, prefix, am)
        async with (
            collect(mosquitto.port, f"{prefix}/alerts/#") as mqtt_msgs,
            running(cfg) as daemon,
            store_for(cfg) as store,
        ):
            await send(Phase.events(range(20), flaky=False), cfg)
            # Judged, and a reliable suite does not fire.
            await settled_alerts(store, daemon)
            assert await alert_state(store) == "inactive"
            assert await history(store, cfg) == []

            flaky = Phase.events(range(20), flaky=True)
            await publish(mosquitto.port, f"{prefix}/trials/a", phase_message(flaky))
            published = time.monotonic()
            await wait_until(lambda: _has(mqtt_msgs, "firing"), 20)
            # How soon is make bench-ci's to measure, not a test's: a busy machine moves it.
            latency = time.monotonic() - published
            print(f"breach published {latency * 1000:.0f} ms after the events")

            await send(Phase.events(range(20), flaky=False), cfg)
            await wait_until(lambda: _has(mqtt_msgs, "resolved"), 20)
            await wait_until(lambda: _count(am.alerts, 2), 20)
            await wait_until(lambda: _count(am.webhook, 2), 20)
            # The last snapshot judged and every notification delivered: nothing more comes.
            await settled_alerts(store, daemon)
            await flushed(mosquitto.port, f"{prefix}/alerts/~flush", mqtt_msgs)

            notes = await history(store, cfg)
            assert [n["state"] for n in notes] == ["firing", "resolved"]
            assert [m["state"] for m in mqtt_msgs] == ["firing", "resolved"]
            assert am.webhook == notes
            firing = notes[0]
            assert firing["rule"] == "deploy-reliability"
            assert (firing["suite"], firing["metric"], firing["k"]) == (SUITE, "pass^k", 5)
            # The numbers are those of the data at that moment, computed independently:
            # the window (10) holds the flaky phase, every fourth task reliable.
            breached = expected_pass_hat_5([(10, 10)] * 5 + [(10, 5)] * 15)
            assert (firing["value"], firing["ci_low"], firing["ci_high"]) == breached
            assert firing["ci_low"] < 0.75
            assert (firing["below"], firing["resolve_above"]) == (0.75, 0.8)
            assert (firing["tasks"], firing["runs"]) == (20, 10)
            datetime.fromisoformat(firing["started_at"])
            assert firing["started_at"].endswith("Z")
            assert 1 <= len(firing["lottery"]) <= 3
            assert set(firing["lottery"][0]) == {"task", "n", "c"}
            assert (firing["lottery"][0]["n"], firing["lottery"][0]["c"]) == (10, 5)
            resolved = notes[1]
            reliable = expected_pass_hat_5([(10, 10)] * 20)
            assert (resolved["value"], resolved["ci_low"], resolved["ci_high"]) == reliable
            assert resolved["ci_low"] >= 0.8
            assert resolved["started_at"] == firing["started_at"]
            assert resolved["ended_at"] is not None

            # Alertmanager got the same two, in its own format.
            assert am.rejected == []
            first, second = am.alerts
            assert first["labels"] == {
                "alertname": "deploy-reliability",
                "suite": SUITE,
                "metric": "pass^k",
                "k": "5",
                "severity": "page",
            }
            assert first["startsAt"] == firing["started_at"]
            assert first["generatorURL"].startswith("https://reliability.example/")
            assert "below 0.750" in first["annotations"]["summary"]
            assert second["labels"] == first["labels"]
            assert second["endsAt"] == resolved["ended_at"]


def expected_pass_hat_5(cells: list[tuple[int, int]]) -> tuple[float, float, float]:
    """pass^5 value and CI as the daemon's settings (B = 500, seed 0) compute them."""
    (est,) = [
        e
        for e in snapshot.full_estimates(
            Histogram.from_pairs(cells), snapshot.StatsSettings(ks=(5,), n_boot=500)
        )
        if e.metric == "pass^k"
    ]
    assert est.value is not None
    assert est.ci_low is not None
    assert est.ci_high is not None
    return est.value, est.ci_low, est.ci_high


async def _has(messages: list[dict[str, Any]], state: str) -> bool:
    return any(m.get("state") == state for m in messages)


async def _count(items: list[Any], n: int) -> bool:
    return len(items) >= n


async def test_straddling_the_threshold_does_not_flap(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    """Bound between `below` and `resolve_above`: neither fires anew nor resolves."""
    with Receiver() as am:
        # 40 perfect tasks: Wilson lower bound 40 / (40 + 3.84) = 0.912, between the
        # thresholds; 80 perfect tasks: 0.954, above resolve_above.
        cfg = alert_config(redis_server, mosquitto, prefix, am, below=0.85, resolve_above=0.95)
        async with running(cfg) as daemon, store_for(cfg) as store:
            for flaky in (False, True, False, True, False):
                await send(Phase.events(range(40), flaky=flaky), cfg)
                await settled_alerts(store, daemon)  # each phase judged before the next
            assert await alert_state(store) == "firing"
            assert [n["state"] for n in await history(store, cfg)] == ["firing"]
            await send(Phase.events(range(40, 80), flaky=False), cfg)
            await wait_until(partial(alert_is, store, "resolved"), 20)
            await settled_alerts(store, daemon)
            assert [n["state"] for n in await history(store, cfg)] == ["firing", "resolved"]


async def test_restart_while_firing_does_not_refire(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        cfg = alert_config(redis_server, mosquitto, prefix, am)
        async with running(cfg), store_for(cfg) as store:
            await send(Phase.events(range(20), flaky=True), cfg)
            await wait_until(partial(alert_is, store, "firing"), 20)
        async with running(cfg) as daemon, store_for(cfg) as store:
            await send(Phase.events(range(20), flaky=True), cfg)
            # The restarted daemon judged the new (still breached) snapshot.
            await settled_alerts(store, daemon)
            assert await alert_state(store) == "firing"
            assert [n["state"] for n in await history(store, cfg)] == ["firing"]
            assert len(am.alerts) == 1


async def test_two_daemons_notify_once(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        a = alert_config(
            redis_server, mosquitto, prefix, am, client_id=f"{prefix}-a", instance=f"{prefix}-a"
        )
        b = alert_config(
            redis_server, mosquitto, prefix, am, client_id=f"{prefix}-b", instance=f"{prefix}-b"
        )
        async with (
            collect(mosquitto.port, f"{prefix}/alerts/#") as mqtt_msgs,
            running(a) as first,
            running(b) as second,
            store_for(a) as store,
        ):
            # Both daemons read every message (no shared group); counting stays exact.
            await send(Phase.events(range(20), flaky=True), a)
            await wait_until(partial(alert_is, store, "firing"), 20)
            # Both judged the breached snapshot, and what they sent has arrived.
            await settled_alerts(store, first, second)
            await flushed(mosquitto.port, f"{prefix}/alerts/~flush", mqtt_msgs)
            assert [n["state"] for n in await history(store, a)] == ["firing"]
            assert len(am.alerts) == 1
            assert len(am.webhook) == 1
            assert [m["state"] for m in mqtt_msgs] == ["firing"]
            assert (await store.reads.read_state(SUITE)).counters.trials == 200


async def test_alertmanager_down_is_retried_while_ingest_goes_on(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        am.failing = True
        cfg = alert_config(redis_server, mosquitto, prefix, am)
        async with running(cfg) as daemon, store_for(cfg) as store:
            await send(Phase.events(range(20), flaky=True), cfg)
            await wait_until(partial(alert_is, store, "firing"), 20)
            # The other sinks do not wait for Alertmanager.
            await wait_until(lambda: _history_len(store, cfg, 1), 10)
            await wait_until(lambda: _attempts(am, 2), 20)
            assert am.alerts == []
            # Ingest goes on while Alertmanager is down.
            more = Phase.events(range(20, 30), flaky=False)
            await send(more, cfg)
            assert (await store.reads.read_state(SUITE)).counters.trials == 300
            am.failing = False
            await wait_until(lambda: _count(am.alerts, 1), 30)
            assert am.alerts[0]["labels"]["alertname"] == "deploy-reliability"
            # The webhook retries on its own (jittered) schedule.
            await wait_until(lambda: _count(am.webhook, 1), 30)
            await settled_alerts(store, daemon)  # every sink has taken what it was due
            assert len(am.webhook) == 1
            assert len(am.alerts) == 1


async def _history_len(store: Store, cfg: Config, n: int) -> bool:
    return len(await history(store, cfg)) >= n


async def _attempts(am: Receiver, n: int) -> bool:
    return am.attempts >= n


async def test_stale_suite_pages_and_recovers_when_trials_return(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        cfg = alert_config(redis_server, mosquitto, prefix, am)
        stale_after = 1.5
        rule = msgspec.structs.replace(cfg.alerts[0], stale_after=stale_after)
        cfg = msgspec.structs.replace(cfg, alerts=[rule])
        async with running(cfg), store_for(cfg) as store:
            await send(Phase.events(range(20), flaky=False), cfg)
            last_trial = (await current_snapshot(store, SUITE))["last_trial_at"]
            await wait_until(partial(alert_is, store, "firing"), 10)  # nobody sends trials any more
            await wait_until(lambda: _history_len(store, cfg, 1), 10)
            (note,) = await history(store, cfg)
            assert (note["state"], note["reason"]) == ("firing", "stale")
            # Paged once the suite had been quiet for stale_after, not before (both
            # times are stored to the millisecond).
            quiet = _seconds(note["started_at"]) - _seconds(last_trial)
            assert quiet > stale_after - 0.002, quiet
            await wait_until(lambda: _count(am.alerts, 1), 10)
            assert "stale suite" in am.alerts[0]["annotations"]["summary"]
            await send(Phase.events(range(20), flaky=False), cfg)
            await wait_until(partial(alert_is, store, "resolved"), 10)
            # The state is stored first; the history is the outbox's to write.
            await wait_until(lambda: _history_len(store, cfg, 2), 10)
            assert [n["state"] for n in await history(store, cfg)] == ["firing", "resolved"]


def _seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


async def test_a_page_links_the_last_failing_trial_of_each_lottery_case(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    """The webhook body, the MQTT payload and the Alertmanager annotation carry the link
    of each top lottery case's last failure: the page leads to a transcript."""
    with Receiver() as am:
        cfg = alert_config(redis_server, mosquitto, prefix, am)
        flaky = [
            msgspec.structs.replace(
                e, url=f"https://logs.example/{e.task}/{e.trial}".replace(" ", "-")
            )
            for e in Phase.events(range(20), flaky=True)
        ]
        last_failure = {e.task: e for e in flaky if e.outcome == "fail"}
        async with (
            collect(mosquitto.port, f"{prefix}/alerts/#") as mqtt_msgs,
            running(cfg),
        ):
            await send(flaky, cfg)
            await wait_until(lambda: _has(mqtt_msgs, "firing"), 20)
            await wait_until(lambda: _count(am.alerts, 1), 20)
            await wait_until(lambda: _count(am.webhook, 1), 20)
        firing = next(m for m in mqtt_msgs if m["state"] == "firing")
        cases = [c["task"] for c in firing["lottery"]]
        assert cases
        assert [f["task"] for f in firing["failing_trials"]] == cases
        for f in firing["failing_trials"]:
            event = last_failure[f["task"]]
            assert (f["trial"], f["url"]) == (event.trial, event.url)
            datetime.fromisoformat(f["at"])
        assert am.webhook[0]["failing_trials"] == firing["failing_trials"]
        annotation = am.alerts[0]["annotations"]["failing_trials"]
        assert annotation.splitlines() == [
            f"{f['task']}: {f['url']}" for f in firing["failing_trials"]
        ]


async def test_an_evaluation_reads_a_suites_last_failures_once_for_all_its_firing_rules(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    """Two firing rules on one suite, three lottery cases each: one evaluation reads the
    trial log once (one ``task_trials`` pipeline), counted by the real server."""
    with Receiver() as am:
        cfg = alert_config(redis_server, mosquitto, prefix, am)
        second = msgspec.structs.replace(cfg.alerts[0], name="deploy-reliability-2")
        cfg = msgspec.structs.replace(cfg, alerts=[cfg.alerts[0], second])
        flaky = [
            msgspec.structs.replace(e, url=f"https://logs.example/{e.trial}")
            for e in Phase.events(range(20), flaky=True)
        ]
        last_failure = {e.task: e for e in flaky if e.outcome == "fail"}
        async with running(cfg), store_for(cfg) as store:
            await send(flaky, cfg)

            async def both_firing() -> bool:
                states = await stored_states(store, [(SUITE, r.name) for r in cfg.alerts])
                return all(s.state == "firing" for s in states)

            await wait_until(both_firing, 20)
        async with store_for(cfg) as store:
            snap = await stored_snapshot(store, SUITE)
            assert snap is not None
            assert len(snap.lottery.rows) >= LOTTERY_CASES
            evaluator = Evaluator(cfg, store, Outbox(cfg, store, {}, "counting"))
            await store.client.config_resetstat()
            await evaluator.evaluate([SUITE])
            stats = await store.client.info("commandstats")
            # The trial log is read once for the suite (the old path: once per case per
            # rule, six here).
            assert stats["cmdstat_lrange"]["calls"] == 1
            # What that read gives each rule: the last failure of each top case.
            failures = LastFailures(store, cfg, {Series(SUITE): snap})
            got = await failures.of(SUITE, snap)
            cases = [c.task for c in snap.lottery.rows[:LOTTERY_CASES]]
            assert [r.task for r in got] == cases
            assert [(r.trial, r.url) for r in got] == [
                (last_failure[t].trial, last_failure[t].url) for t in cases
            ]
            await store.client.config_resetstat()
            assert await failures.of(SUITE, snap) == got  # a second rule: no read at all
            assert "cmdstat_lrange" not in await store.client.info("commandstats")
