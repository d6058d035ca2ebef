"""A reload (what SIGHUP runs) against a real daemon and Redis: rules, sinks, tokens, suite
overrides and the log level change without a restart; a bad file keeps the running config
and says why; keys that need a restart are logged as ignored and keep their values."""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest

from reliabilityd.alerting import registry
from reliabilityd.config import (
    Config,
    DaemonConfig,
    GrantConfig,
    HttpConfig,
    HttpToken,
    MqttConfig,
    RedisConfig,
    SinksConfig,
    StatsConfig,
    SuiteOverride,
    WebhookSinkConfig,
)
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon._reload import Reloader, merge
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.rules.canary import CanaryRule, Compare
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Row, Series, Store
from reliabilityd.testing import TestingSource
from tests.support.alertmanager import Receiver
from tests.support.helpers import judged, stored_snapshot, stored_state, toml_of, wait_until
from tests.support.http import event, post, serving
from tests.support.servers import RedisServer, free_port

SUITE = "quiet-bot"
# pass^3 of the suite below is 0.77: its lower bound is under 0.95, so this rule fires.
RULE = Rule(name="pass3-low", suite="quiet-*", k=3, below=0.95, trigger="ci-low")


def config(redis: RedisServer, prefix: str, **changes: object) -> Config:
    cfg = Config(
        redis=RedisConfig(url=redis.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1, 3], ci_interval=0.2, n_boot=200),
        http=HttpConfig(port=free_port(), token="token-a"),
    )
    return msgspec.structs.replace(cfg, **changes)


def trials() -> list[TrialEvent]:
    return [
        TrialEvent(SUITE, f"task {t}", f"t{t}-r{r}", "fail" if t < 5 and r % 2 else "pass")
        for t in range(20)
        for r in range(10)
    ]


def write(path: Path, cfg: Config) -> str:
    path.write_bytes(toml_of(cfg))
    return str(path)


async def snapshot_of(store: Store) -> Snapshot | None:
    return await stored_snapshot(store, SUITE)


def reloader(daemon: Daemon, path: str) -> Reloader:
    return Reloader(daemon, path, logging.INFO)


async def test_tokens_reload_a_new_one_works_and_a_removed_one_is_refused(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    cfg = config(redis_server, prefix)
    async with serving(cfg) as (daemon, base):
        assert (await post(base, [event("t", "1")], token="token-a"))[0] == 200
        tokens = [HttpToken(token="token-b", grant="web")]
        new = msgspec.structs.replace(cfg.http, token="", tokens=tokens)
        grants = [GrantConfig(name="web", suites=["web"])]
        path = write(tmp_path / "c.toml", msgspec.structs.replace(cfg, http=new, grants=grants))
        assert await reloader(daemon, path).reload()
        assert (await post(base, [event("t", "2")], token="token-a"))[0] == 401
        assert (await post(base, [event("t", "3")], token="token-b"))[0] == 200
        # The new token's scopes hold too: another suite is forbidden to it.
        status, _, _ = await post(base, [event("t", "4", suite="other")], token="token-b")
        assert status == 403


async def test_a_rule_and_a_webhook_added_by_a_reload_page_without_a_restart(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    cfg = config(redis_server, prefix)
    with Receiver() as receiver:
        async with serving(cfg) as (daemon, _):
            await TestingSource(trials()).run(daemon.commit)

            async def computed() -> bool:
                snap = await snapshot_of(daemon.store)
                return snap is not None and snap.estimate("pass^k", 3) is not None

            await wait_until(computed, 20)
            hook = SinksConfig(webhook=WebhookSinkConfig(url=f"{receiver.url}/hook"))
            path = write(
                tmp_path / "c.toml", msgspec.structs.replace(cfg, alerts=[RULE], sinks=hook)
            )
            assert await reloader(daemon, path).reload()

            async def paged() -> bool:
                return any(n.get("rule") == RULE.name for n in receiver.webhook)

            await wait_until(paged, 20)
            state = await stored_state(daemon.store, SUITE, RULE.name)
            assert state.state == "firing"
            note = next(n for n in receiver.webhook if n.get("rule") == RULE.name)
            assert note["state"] == "firing"


async def test_a_suite_override_reloads_and_the_stored_snapshot_is_recomputed_under_it(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    cfg = config(redis_server, prefix)
    async with serving(cfg) as (daemon, _):
        await TestingSource(trials()).run(daemon.commit)

        async def interval_is(name: str) -> bool:
            snap = await snapshot_of(daemon.store)
            est = None if snap is None else snap.estimate("pass^k", 3)
            return est is not None and est.interval == name

        await wait_until(lambda: interval_is("gaffke"), 20)
        override = [SuiteOverride(match="quiet-*", interval="percentile")]
        path = write(tmp_path / "c.toml", msgspec.structs.replace(cfg, suites=override))
        assert await reloader(daemon, path).reload()
        # No trial arrives: the reconcile finds the snapshot computed under other settings.
        await wait_until(lambda: interval_is("percentile"), 20)


async def test_a_bad_file_keeps_the_running_config_and_says_why(
    redis_server: RedisServer, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reliabilityd")
    cfg = config(redis_server, prefix)
    async with serving(cfg) as (daemon, base):
        path = tmp_path / "c.toml"
        reload = reloader(daemon, str(path))
        zero_k = msgspec.structs.replace(cfg.stats, k=[0])
        bad_files = [
            (b"[stats\nk = [1]\n", "not valid TOML"),
            (toml_of(msgspec.structs.replace(cfg, stats=zero_k)), "$.stats.k[0]"),
            (toml_of(cfg) + b"\n[nonsense]\nx = 1\n", "unknown field `nonsense`"),
        ]
        for raw, why in bad_files:
            path.write_bytes(raw)
            caplog.clear()
            assert not await reload.reload(), raw
            (line,) = [r.getMessage() for r in caplog.records if "reload_failed" in r.getMessage()]
            assert str(path) in line
            assert why in line
            assert "kept=" in line
            # The running config is whole: the token still works.
            assert (await post(base, [event("t", why)], token="token-a"))[0] == 200
        # A good file after the bad ones applies: without a token, writes are open.
        open_http = msgspec.structs.replace(cfg.http, token="")
        path.write_bytes(toml_of(msgspec.structs.replace(cfg, http=open_http)))
        assert await reload.reload()
        assert (await post(base, [event("t", "2")]))[0] == 200


async def test_keys_that_need_a_restart_are_logged_as_ignored_and_keep_their_values(
    redis_server: RedisServer, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reliabilityd")
    cfg = config(redis_server, prefix)
    async with serving(cfg) as (daemon, base):
        moved = msgspec.structs.replace(
            cfg,
            http=msgspec.structs.replace(cfg.http, port=free_port(), max_inflight=3),
            redis=msgspec.structs.replace(cfg.redis, timeout=3.0),
            stats=msgspec.structs.replace(cfg.stats, k=[1, 2, 3]),
        )
        assert await reloader(daemon, write(tmp_path / "c.toml", moved)).reload()
        (ignored,) = [r.getMessage() for r in caplog.records if "reload_ignored" in r.getMessage()]
        assert "keys=redis.timeout,http.port,http.max_inflight needs=" in ignored, ignored
        (done,) = [r.getMessage() for r in caplog.records if "event=reloaded" in r.getMessage()]
        assert "changed=stats.k" in done
        assert daemon.config.http.port == cfg.http.port  # still listening where it was
        assert daemon.config.stats.k == [1, 2, 3]
        assert (await post(base, [event("t", "1")], token="token-a"))[0] == 200


async def test_the_log_level_reloads_and_empty_means_the_command_lines(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    cfg = config(redis_server, prefix)
    root = logging.getLogger()
    async with serving(cfg) as (daemon, _):
        reload = Reloader(daemon, str(tmp_path / "c.toml"), logging.WARNING)
        verbose = msgspec.structs.replace(cfg, daemon=DaemonConfig(log_level="DEBUG"))
        write(tmp_path / "c.toml", verbose)
        assert await reload.reload()
        assert root.level == logging.DEBUG
        write(tmp_path / "c.toml", cfg)
        assert await reload.reload()
        assert root.level == logging.WARNING


def test_merge_takes_only_the_reloadable_keys(redis_server: RedisServer) -> None:
    running = config(redis_server, "p")
    loaded = msgspec.structs.replace(
        running,
        mqtt=msgspec.structs.replace(running.mqtt, topic="other/#"),
        http=msgspec.structs.replace(running.http, token="new", read_timeout=1.0),
        alerts=[RULE],
        external_url="http://x",
    )
    merged, ignored = merge(running, loaded)
    assert ignored == ["mqtt.topic", "http.read_timeout"]
    assert merged.mqtt == running.mqtt
    assert merged.http == msgspec.structs.replace(running.http, token="new")
    assert merged.alerts == [RULE]
    assert merged.external_url == "http://x"


# A canary of v2 against v1, and trials on which it fires: 8 of v2's 20 tasks pass 1 of 6.
CANARY = CanaryRule(
    name="v2-worse",
    compare=Compare(baseline={"suite": "v1"}, candidate={"suite": "v2"}),
    k=1,
)
V1_V2 = [
    TrialEvent(suite, f"task {t}", f"{suite}-{t}-{r}", "pass" if ok else "fail")
    for suite in ("v1", "v2")
    for t in range(20)
    for r in range(6)
    for ok in [suite == "v1" or t >= 8 or r == 0]
]


def canary_keys(store: Store) -> list[str]:
    """The canary's view and its points over time."""
    return [store.keys.canary_view("v2", CANARY.name), store.keys.canary_points("v2", CANARY.name)]


async def test_a_canary_a_reload_removes_leaves_no_view_points_or_listing(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    """A canary judged (its view and its points stored, both sides' rows listing it),
    then a reload without it: its keys are deleted and no surface lists it any more,
    while the threshold rule that stays is still listed."""
    # The rule that stays watches the candidate only: the baseline's row lists no rule after.
    stays = Rule(name="low", suite="v2", k=1, below=0.5, trigger="ci-low")
    cfg = config(redis_server, prefix, alerts=[CANARY, stays])
    async with serving(cfg) as (daemon, _):
        store = daemon.store
        keys = canary_keys(store)
        await TestingSource(V1_V2).run(daemon.commit)

        async def rows_list(name: str) -> bool:
            rows = await store.rows.read([Series("v1"), Series("v2")])
            return all(isinstance(r, Row) and name in {x[0] for x in r.rules} for r in rows)

        async def stored() -> bool:
            return await store.client.exists(*keys) == 2 and await rows_list(CANARY.name)

        await wait_until(stored, 30)
        path = write(tmp_path / "c.toml", msgspec.structs.replace(cfg, alerts=[stays]))
        assert await reloader(daemon, path).reload()
        assert await store.client.exists(*keys) == 0

        async def unlisted() -> bool:
            rows = await store.rows.read([Series("v1"), Series("v2")])
            return [[x[0] for x in r.rules] if isinstance(r, Row) else None for r in rows] == [
                [],
                [stays.name],
            ]

        await wait_until(unlisted, 30)
        names = {w.watch.name for w in await registry.statuses(store, daemon.config.alerts)}
        assert names == {stays.name}
        await daemon.metrics.refresh(store, daemon.config.alerts, [])
        text = daemon.metrics.render().decode()
        assert 'rule="low"' in text
        assert CANARY.name not in text
        page = await store.rows.page()
        assert all(
            CANARY.name not in {x[0] for x in r.rules} for r in page.rows if isinstance(r, Row)
        )
        # Passes of the judge since: none writes them again.
        await judged(store, "v2", daemon, passes=2)
        assert await store.client.exists(*keys) == 0


async def test_rules_removed_while_no_daemon_ran_leave_no_view_points_or_listing(
    redis_server: RedisServer, prefix: str
) -> None:
    """A canary and a threshold rule judged, the daemon stopped, then started without
    them and with no new trial: the rows of both sides drop them at its first tick, the
    canary's view and points are deleted, and the rule that stays is still listed."""
    gone = Rule(name="gone", suite="v1", k=1, below=0.5, trigger="ci-low")
    stays = Rule(name="low", suite="v2", k=1, below=0.5, trigger="ci-low")
    cfg = config(redis_server, prefix, alerts=[CANARY, gone, stays])

    async def listed(store: Store) -> list[list[str] | None]:
        rows = await store.rows.read([Series("v1"), Series("v2")])
        return [sorted(x[0] for x in r.rules) if isinstance(r, Row) else None for r in rows]

    async with serving(cfg) as (daemon, _):
        store = daemon.store
        keys = canary_keys(store)
        await TestingSource(V1_V2).run(daemon.commit)

        async def stored() -> bool:
            return await store.client.exists(*keys) == 2 and await listed(store) == [
                ["gone", "v2-worse"],
                ["low", "v2-worse"],
            ]

        await wait_until(stored, 30)
    async with serving(msgspec.structs.replace(cfg, alerts=[stays])) as (daemon, _):
        store = daemon.store

        async def unlisted() -> bool:
            return await listed(store) == [[], ["low"]]

        await wait_until(unlisted, 30)
        assert await store.client.exists(*keys) == 0
        await daemon.metrics.refresh(store, daemon.config.alerts, [])
        text = daemon.metrics.render().decode()
        assert 'rule="low"' in text
        assert CANARY.name not in text
        assert 'rule="gone"' not in text
