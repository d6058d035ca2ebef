"""Real Prometheus and Alertmanager (Debian's packages) against the daemon.

Prometheus scrapes the daemon's /metrics and evaluates a rule taken verbatim
(bar its `for`) from deploy/prometheus/rules.yml, on a suite's pass^k bound
and on paused ingest; Alertmanager receives the daemon's firing and
resolved alerts, read back through its own API (/api/v2/alerts).
tests/alertmanager_stub.py remains where a real server cannot do the job:
answering 503 on demand (retry and backoff tests) and receiving the generic
JSON webhook.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec
import yaml

from reliabilityd.alerting.notify import Notification, alertmanager_alert, generator_url
from reliabilityd.config import AlertmanagerSinkConfig, Config, SinksConfig
from reliabilityd.rules import Rule
from tests.support.daemon import store_for
from tests.support.helpers import current_snapshot, publish, stored_state, wait_until
from tests.support.http import event, get, http_config, post, scrape, serving
from tests.support.servers import Alertmanager, Mosquitto, RedisServer, StartPrometheus, free_port

SUITE = "deploy-bot"

# The deploy files users copy, at the repository root.
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def flaky_batch(tasks: int, run: str, *, flaky: bool) -> list[dict[str, str]]:
    """10 trials per task; with `flaky` three tasks in four pass only half their runs."""
    return [
        event(
            f"task {t}",
            f"{run}-{j}",
            "pass" if not flaky or t % 4 == 0 or j % 2 == 0 else "fail",
            suite=SUITE,
        )
        for t in range(tasks)
        for j in range(10)
    ]


def example_rule(tmp_path: Path, name: str) -> Path:
    """One rule of the shipped rules file, unchanged but for `for: 0s`."""
    doc = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    rule = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == name)
    rule["for"] = "0s"
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "test", "rules": [rule]}]}))
    return path


async def api(url: str) -> Any:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_prometheus_scrapes_the_daemon_and_an_example_rule_fires(
    redis_server: RedisServer, prefix: str, tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    cfg = http_config(redis_server, prefix, ks=[1, 5])
    rules = example_rule(tmp_path, "ReliabilitydPassHatKLowerBoundLow")
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        assert (await post(base, flaky_batch(20, "a", flaky=True)))[0] == 200

        # The snapshot of all 200 trials (the body is applied in chunks, each a version).
        snap = await current_snapshot(store, SUITE)
        assert snap["trials"] == 200
        (est,) = [e for e in snap["pass_hat_k"] if e["k"] == 5]
        assert est["ci"][0] < 0.75

        prom = start_prometheus([f"127.0.0.1:{cfg.http.port}"], (rules,))
        query = quote(f'reliabilityd_pass_hat_k_ci_lower_ratio{{suite="{SUITE}",k="5"}}')

        async def scraped() -> bool:
            result = (await api(f"{prom.url}/api/v1/query?query={query}"))["data"]["result"]
            return bool(result) and float(result[0]["value"][1]) == est["ci"][0]

        await wait_until(scraped, within=60, interval=0.5)

        async def firing() -> list[dict[str, Any]]:
            alerts = (await api(f"{prom.url}/api/v1/alerts"))["data"]["alerts"]
            return [a for a in alerts if a["state"] == "firing"]

        async def fired() -> bool:
            return bool(await firing())

        await wait_until(fired, within=60, interval=0.5)
        (alert,) = await firing()
        assert alert["labels"]["alertname"] == "ReliabilitydPassHatKLowerBoundLow"
        assert alert["labels"]["suite"] == SUITE
        assert alert["labels"]["k"] == "5"
        assert float(alert["value"]) == est["ci"][0]


async def test_alertmanager_receives_firing_and_resolved_and_the_link_answers(
    redis_server: RedisServer, prefix: str, alertmanager: Alertmanager
) -> None:
    cfg = http_config(redis_server, prefix, ks=[5])
    base = f"http://127.0.0.1:{cfg.http.port}"
    cfg = msgspec.structs.replace(
        cfg,
        stats=msgspec.structs.replace(cfg.stats, window=10),
        alerts=[
            Rule(
                name="deploy-reliability",
                suite="deploy-*",
                k=5,
                below=0.75,
                resolve_above=0.8,
                trigger="ci-low",
            )
        ],
        sinks=SinksConfig(
            alertmanager=AlertmanagerSinkConfig(url=alertmanager.url, resend_interval=3600)
        ),
        external_url=base,
    )
    am_alerts = f"{alertmanager.url}/api/v2/alerts?filter=" + quote(
        'alertname="deploy-reliability"'
    )
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        assert (await post(base, flaky_batch(20, "a", flaky=True)))[0] == 200

        async def received() -> bool:
            return bool(await api(am_alerts))

        await wait_until(received, within=30, interval=0.2)
        (alert,) = await api(am_alerts)
        assert alert["status"]["state"] == "active"
        assert alert["labels"]["suite"] == SUITE
        assert alert["labels"]["severity"] == "page"
        assert float(alert["annotations"]["ci_low"]) < 0.75
        # generatorURL is the daemon's own snapshot of the suite, and it answers.
        url = alert["generatorURL"]
        assert url.startswith(f"{base}/suites/{SUITE}")
        status, body = await get(url, "")
        assert status == 200
        assert msgspec.json.decode(body)["suite"] == SUITE

        # Every task passes its last 10 runs: the bound recovers, the alert resolves.
        assert (await post(base, flaky_batch(20, "b", flaky=False)))[0] == 200

        async def resolved() -> bool:
            # Alertmanager drops an alert whose endsAt has passed from its API view.
            return not await api(am_alerts)

        await wait_until(resolved, within=30, interval=0.2)
        state = await stored_state(store, SUITE, "deploy-reliability")
        assert state.state == "resolved"
        assert await store.alerts.outbox_lengths(
            [(SUITE, "deploy-reliability", "alertmanager")]
        ) == [0]
        assert state.ended_at is not None
        assert state.ended_at <= time.time()


async def test_a_sink_that_is_down_shows_in_failures_and_outbox_depth(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix, ks=[5])
    nobody = f"http://127.0.0.1:{free_port()}"
    cfg = msgspec.structs.replace(
        cfg,
        alerts=[
            Rule(name="deploy-reliability", suite="deploy-*", k=5, below=0.75, trigger="ci-low")
        ],
        sinks=SinksConfig(alertmanager=AlertmanagerSinkConfig(url=nobody, timeout=1.0)),
    )
    async with serving(cfg) as (_, base):
        before = await scrape(base)
        failures = ("reliabilityd_sink_failures_total", (("sink", "alertmanager"),))
        assert before[failures] == 0
        assert (await post(base, flaky_batch(20, "a", flaky=True)))[0] == 200

        async def failing() -> bool:
            seen = await scrape(base)
            depth = seen.get(("reliabilityd_outbox_depth", (("sink", "alertmanager"),)), 0)
            return seen[failures] >= 1 and depth >= 1

        await wait_until(failing, within=30, interval=0.2)
        seen = await scrape(base)
        firing = (
            "reliabilityd_alert_state",
            (("rule", "deploy-reliability"), ("state", "firing"), ("suite", SUITE)),
        )
        assert seen[firing] == 1
        # The Redis sink took it: its outbox is empty.
        assert seen[("reliabilityd_outbox_depth", (("sink", "redis"),))] == 0


def test_no_generator_url_without_external_url() -> None:
    cfg = Config()
    assert generator_url(cfg, SUITE, "r") is None
    note = Notification(
        id="x",
        rule="r",
        suite=SUITE,
        metric="pass^k",
        k=5,
        trigger="ci-low",
        state="firing",
        reason="below",
        value=0.1,
        ci_low=0.0,
        ci_high=0.2,
        below=0.75,
        resolve_above=0.75,
        tasks=20,
        runs=5,
        started_at=None,
        severity="page",
        lottery=[],
        at="2026-11-30T00:00:00.000Z",
        generator_url=generator_url(cfg, SUITE, "r"),
    )
    assert "generatorURL" not in alertmanager_alert(note, now=0.0, resend_interval=60)
    with_url = msgspec.structs.replace(cfg, external_url="http://127.0.0.1:9780/")
    assert generator_url(with_url, SUITE, "r") == (f"http://127.0.0.1:9780/suites/{SUITE}?rule=r")


async def test_prometheus_pages_on_paused_ingest_while_redis_is_down(
    private_redis: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    start_prometheus: StartPrometheus,
) -> None:
    cfg = http_config(private_redis, prefix, broker=mosquitto)
    cfg = msgspec.structs.replace(cfg, redis=msgspec.structs.replace(cfg.redis, timeout=1.0))
    rules = example_rule(tmp_path, "ReliabilitydIngestPaused")
    async with serving(cfg) as (daemon, _):
        prom = start_prometheus([f"127.0.0.1:{cfg.http.port}"], (rules,))

        async def alerts() -> list[dict[str, Any]]:
            return list((await api(f"{prom.url}/api/v1/alerts"))["data"]["alerts"])

        async def scraped() -> bool:
            query = quote('reliabilityd_ingest_paused{job="reliabilityd"}')
            return bool((await api(f"{prom.url}/api/v1/query?query={query}"))["data"]["result"])

        await wait_until(scraped, within=60, interval=0.5)
        assert await alerts() == []
        private_redis.kill()
        message = msgspec.json.encode(event("t", "1"))
        await publish(mosquitto.port, f"{prefix}/trials/x", [message], client_id=f"{prefix}-p")

        async def firing() -> bool:
            return any(a["state"] == "firing" for a in await alerts())

        await wait_until(firing, within=60, interval=0.5)
        (alert,) = await alerts()
        assert alert["labels"]["alertname"] == "ReliabilitydIngestPaused"
        assert daemon.is_paused()
        private_redis.start()

        async def cleared() -> bool:
            return await alerts() == []

        await wait_until(cleared, within=60, interval=0.5)
        assert not daemon.is_paused()
