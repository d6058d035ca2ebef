"""Trial links and the last trials of each task, through every source, against real servers."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import msgspec
import pytest

from reliabilityd.cli._main import main
from reliabilityd.client import AsyncClient
from reliabilityd.config import HttpConfig, OtlpConfig, StatsConfig, SuiteOverride
from reliabilityd.events import TrialEvent
from reliabilityd.importers import import_file
from reliabilityd.logs import redact
from reliabilityd.store import Recent, Store, TrialRecord, _recent, connect
from reliabilityd.store._base import _text
from tests.support.daemon import make_config, running, store_for, with_stream
from tests.support.helpers import publish, wait_until
from tests.support.http import event, http_config, post, serving
from tests.support.otlp import otlp_config, post_logs, records_request
from tests.support.query import cli
from tests.support.servers import Mosquitto, RedisServer, free_port

RECENT = {"s": Recent(trials=5, failures=4)}


def trials_of(rows: list[TrialRecord]) -> list[tuple[str, str]]:
    return [(r.trial, r.outcome) for r in rows]


async def linked(store: Store, suite: str, task: str | None, count: int) -> list[TrialRecord]:
    """The suite's (or task's) recent trials once there are ``count`` of them."""
    rows: list[TrialRecord] = []

    async def enough() -> bool:
        nonlocal rows
        rows = await store.reads.trials(suite, task)
        return len(rows) >= count

    await wait_until(enough, 30)
    return rows


# --- the store: kept once, bounded, folded, forgotten, reset, expired -------------------


async def test_each_task_keeps_its_last_trials_exactly_once_folded_or_not(
    redis_server: RedisServer, prefix: str
) -> None:
    store = Store(connect(redis_server.url), prefix)
    try:
        evs = [
            TrialEvent("s", f"t{i % 3}", f"r{i}", "pass" if i % 4 else "fail", url=f"/x/{i}")
            for i in range(40)
        ]
        # One event per call (a log entry each), then a redelivery of the first 25 with
        # five new ones: the duplicates add no record, in the log or once folded.
        for e in evs[:20]:
            await store.ingest.apply({"s": [e]}, windows={}, dedup_ttl=7200, recent=RECENT)
        await store.ingest.apply({"s": evs[:25]}, windows={}, dedup_ttl=7200, recent=RECENT)
        expected = [(f"r{i}", "pass" if i % 4 else "fail") for i in (24, 21, 18, 15, 12)]
        unfolded = await store.reads.trials("s", "t0", keep=5)
        assert trials_of(unfolded) == expected
        assert unfolded[0].url == "/x/24"
        failures = await store.reads.trials("s", failed=True, limit=10)
        assert [r.trial for r in failures] == ["r24", "r20", "r16", "r12", "r8", "r4", "r0"]
        assert await store.ingest.fold("s", RECENT["s"])
        assert await store.client.llen(store.key("s", "trials")) == 0
        assert trials_of(await store.reads.trials("s", "t0", keep=5)) == expected
        # The suite's failures list is bounded (4 here), newest first.
        failed = await store.reads.trials("s", failed=True, limit=10)
        assert [r.trial for r in failed] == ["r24", "r20", "r16", "r12"]
        # The whole batch again: nothing added anywhere.
        await store.ingest.apply({"s": evs[:25]}, windows={}, dedup_ttl=7200, recent=RECENT)
        assert await store.client.llen(store.key("s", "trials")) == 0
        assert trials_of(await store.reads.trials("s", "t0", keep=5)) == expected
        # Past FOLD_AT log entries the apply folds by itself.
        for e in evs[25:]:
            await store.ingest.apply({"s": [e]}, windows={}, dedup_ttl=7200, recent=RECENT)
        assert trials_of(await store.reads.trials("s", "t0", keep=5))[0] == ("r39", "pass")
        assert await store.client.hlen(store.key("s", "recent")) == 3
    finally:
        await store.client.aclose()


async def test_forget_reset_and_expiry_take_a_tasks_trials_with_it(
    redis_server: RedisServer, prefix: str
) -> None:
    store = Store(connect(redis_server.url), prefix)
    try:
        old = [TrialEvent("s", "old", f"o{i}", "fail") for i in range(3)]
        new = [TrialEvent("s", "new", f"n{i}", "fail") for i in range(3)]
        await store.ingest.apply(
            {"s": old + new}, windows={}, dedup_ttl=7200, recent=RECENT, touch={"s"}
        )
        assert await store.admin.forget_task("s", "new", RECENT["s"])
        assert await store.reads.trials("s", "new") == []
        assert {r.task for r in await store.reads.trials("s", failed=True)} == {"old"}
        # Idle expiry: the task leaves the counts and its trials with it.
        assert await store.admin.expire_idle("s", time.time() + 1, recent=RECENT["s"]) == 1
        assert await store.reads.trials("s", "old") == []
        assert await store.reads.trials("s", failed=True) == []
        # A task's trials also leave with a reset, folded or still in the log (a
        # forgotten task's old trials stay duplicates: its dedup records stay).
        again = [TrialEvent("s", "new", f"g{i}", "fail") for i in range(2)]
        await store.ingest.apply({"s": again[:1]}, windows={}, dedup_ttl=7200, recent=RECENT)
        await store.ingest.fold("s", RECENT["s"])
        await store.ingest.apply({"s": again[1:]}, windows={}, dedup_ttl=7200, recent=RECENT)
        assert len(await store.reads.trials("s", "new")) == 2
        await store.admin.reset_suite("s")
        for name in ("trials", "recent", "failures"):
            assert not await store.client.exists(store.key("s", name))
        assert await store.reads.trials("s") == []
    finally:
        await store.client.aclose()


async def test_an_imported_run_is_logged_once_across_imports(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    store = Store(connect(redis_server.url), prefix)
    try:
        lines = [
            json.dumps(
                {
                    "suite": "imp",
                    "task": "t",
                    "trial": f"e{i}",
                    "outcome": "fail" if i == 2 else "pass",
                    "url": f"https://viewer.example/log.eval#/samples/t/{i}",
                    "run": "eval-7",
                }
            )
            for i in range(1, 4)
        ]
        path = tmp_path / "trials.jsonl"
        path.write_text("\n".join(lines) + "\n")
        await import_file(store, path)
        await import_file(store, path)  # the ledger holds them: no record twice
        rows = await store.reads.trials("imp", "t")
        assert [(r.trial, r.run) for r in rows] == [
            ("e3", "eval-7"),
            ("e2", "eval-7"),
            ("e1", "eval-7"),
        ]
        assert rows[1].url == "https://viewer.example/log.eval#/samples/t/2"
    finally:
        await store.client.aclose()


# --- every source ----------------------------------------------------------------------


async def test_mqtt_and_redis_streams_carry_url_and_run(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    key = f"{prefix}:in"
    cfg = with_stream(cfg, key)
    async with running(cfg), store_for(cfg) as store:
        one = {"suite": "m", "task": "t", "trial": "a", "outcome": "fail"}
        await publish(
            mosquitto.port,
            f"{prefix}/trials/x",
            [msgspec.json.encode({**one, "url": "https://trace.example/a", "run": "r1"})],
        )
        await store.client.xadd(
            key,
            {
                "payload": msgspec.json.encode(
                    {**one, "trial": "b", "url": "https://trace.example/b", "run": "r2"}
                )
            },
        )
        rows = await linked(store, "m", "t", 2)
        assert {(r.trial, r.url, r.run) for r in rows} == {
            ("a", "https://trace.example/a", "r1"),
            ("b", "https://trace.example/b", "r2"),
        }


async def test_http_refuses_bad_links_into_the_dead_letters_and_keeps_good_ones(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    bad = {
        "javascript:alert(1)": "javascript: scheme",
        "data:text/html,x": "scheme data:",
        "https://a\u0007b": "control character",
        "https://" + "x" * 520: "longer than 512 bytes",
        "//evil.example/x": "protocol-relative",
        "https://user:pw@host/x": "credentials",
    }
    batch = [{**event("t", f"bad{i}"), "url": url} for i, url in enumerate(bad)]
    batch.append({**event("t", "good", "fail"), "url": "logs/x.eval#/samples/t/1", "run": "r"})
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, body, _ = await post(base, batch)
        assert status == 422
        reasons = [r.get("reason", "") for r in body["results"]]
        for reason, want in zip(reasons, bad.values(), strict=False):
            assert want in reason
        assert body["results"][-1]["status"] == "accepted"
        letters = await store.reads.deadletters()
        assert sorted(d.reason for d in letters) == sorted(reasons[:-1])
        assert {d.reason_class for d in letters} == {"invalid_field"}
        rows = await store.reads.trials("web", "t")
        assert [(r.trial, r.url, r.run) for r in rows] == [
            ("good", "logs/x.eval#/samples/t/1", "r")
        ]


JAEGER = "http://jaeger.example:16686/trace/{trace_id}"


async def test_otlp_records_get_their_link_from_the_template(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = otlp_config(redis_server, prefix)
    otlp = OtlpConfig(enabled=True, link_template=JAEGER, run=["attribute:eval.run"])
    cfg = msgspec.structs.replace(cfg, http=HttpConfig(port=free_port(), otlp=otlp))
    request = records_request(
        [
            {
                "gen_ai.evaluation.name": "task-a",
                "gen_ai.response.id": "resp-1",
                "gen_ai.evaluation.score.label": "fail",
                "eval.run": "exp-3",
            }
        ],
        service="agent",
    )
    record = request.resource_logs[0].scope_logs[0].log_records[0]
    record.trace_id = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
    record.span_id = bytes.fromhex("00f067aa0ba902b7")
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, _, _ = await post_logs(base, request.SerializeToString(), "application/x-protobuf")
        assert status == 200
        rows = await store.reads.trials("agent", "task-a")
        assert [(r.trial, r.outcome, r.run) for r in rows] == [("resp-1", "fail", "exp-3")]
        assert rows[0].url == "http://jaeger.example:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"


async def test_emit_command_and_emitter_carry_links_to_the_trials_command(
    redis_server: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    async with running(cfg), store_for(cfg) as store:
        argv = ["emit", "cli", "task 1", "fail", "--mqtt", mosquitto.url]
        argv += ["--topic", f"{prefix}/trials/emit", "--trial", "run-42"]
        argv += ["--url", "https://smith.example/r/42?poll=true", "--run", "exp-1"]
        assert await asyncio.to_thread(main, argv) == 0
        capsys.readouterr()
        await linked(store, "cli", "task 1", 1)
        where = ["--redis", redis_server.url, "--prefix", prefix]
        code, out, _ = await asyncio.to_thread(cli, capsys, "trials", "cli", "--failed", *where)
        assert code == 0
        assert "run-42" in out
        assert "https://smith.example/r/42?poll=true" in out
        assert "exp-1" in out
        code, out, _ = await asyncio.to_thread(
            cli, capsys, "trials", "cli", "task 1", "--json", *where
        )
        assert code == 0
        (row,) = json.loads(out)
        assert row["trial"] == "run-42"
        assert row["outcome"] == "fail"
        assert row["url"] == "https://smith.example/r/42?poll=true"
        code, _, err = await asyncio.to_thread(cli, capsys, "trials", "nope", *where)
        assert code == 2
        assert "no suite named 'nope'" in err


async def test_the_client_resolves_relative_links_and_fills_suite_templates(
    redis_server: RedisServer, prefix: str
) -> None:
    store = Store(connect(redis_server.url), prefix)
    try:
        events = [
            TrialEvent("c", "t/1", "e 1", "fail", run="r 9", url="logs/a.eval#/samples/1"),
            TrialEvent("c", "t/1", "e2", "pass"),
        ]
        await store.ingest.apply({"c": events}, windows={}, dedup_ttl=7200, recent={"c": Recent()})
    finally:
        await store.client.aclose()
    async with AsyncClient(redis_server.url, prefix=prefix) as client:
        rows = await client.trials("c", "t/1", url_base="https://viewer.example/app/")
        assert [(r.trial, r.url) for r in rows] == [
            ("e2", None),
            ("e 1", "https://viewer.example/app/logs/a.eval#/samples/1"),
        ]
        template = "https://ui.example/{suite}/{task}/{trial}?run={run}"
        rows = await client.trials("c", "t/1", failed=True, url_template=template)
        assert [r.url for r in rows] == ["https://ui.example/c/t%2F1/e%201?run=r%209"]


def test_a_suite_template_keeps_no_url_in_memory() -> None:
    cfg = make_config(redis_url="redis://x", mqtt_url="mqtt://x", prefix="p")
    stats = StatsConfig(url_template="https://ui.example/{suite}/{trial}")
    over = SuiteOverride(match="raw-*", url_template="")
    cfg = msgspec.structs.replace(cfg, stats=stats, suites=[over])
    assert cfg.recent("a") == Recent(keep_url=False)
    assert cfg.recent("raw-1") == Recent(keep_url=True)
    runs_only = msgspec.structs.replace(cfg, stats=StatsConfig(recent_trials=0))
    assert runs_only.recent("a") == Recent(trials=0, runs=20)
    off = msgspec.structs.replace(cfg, stats=StatsConfig(recent_trials=0, max_runs=0))
    assert off.recent("a") is None


def test_redaction_leaves_trial_links_intact() -> None:
    # The links trace tools and viewers give: redact (every log line and message goes
    # through it) changes none of them; a url with credentials never gets this far.
    links = [
        "https://cloud.langfuse.com/project/cm1/traces/4bf92f3577b34da6a3ce929d0e0e4736",
        "http://jaeger.example:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736",
        "http://localhost:7575/#/logs/2025-01-01T00-00-00_task_abc.eval/samples/sample/3/2",
        "https://smith.langchain.com/o/abc/projects/p/r/123?poll=true",
        "https://www.braintrust.dev/app/org/p/proj/experiments/exp?r=span-1&s=span-2",
    ]
    for url in links:
        assert redact(url) == url
        assert redact(f"trial run-42 failed: {url}") == f"trial run-42 failed: {url}"


async def test_the_trial_log_entry_names_its_duplicates(
    redis_server: RedisServer, prefix: str
) -> None:
    store = Store(connect(redis_server.url), prefix)
    try:
        kept = {"d": Recent()}
        first = [TrialEvent("d", "t", "a", "pass")]
        await store.ingest.apply({"d": first}, windows={}, dedup_ttl=7200, recent=kept)
        again = [TrialEvent("d", "t", "a", "fail"), TrialEvent("d", "t", "b", "fail")]
        await store.ingest.apply({"d": again}, windows={}, dedup_ttl=7200, recent=kept)
        (entry, _) = await store.client.lrange(store.key("d", "trials"), 0, -1)
        _, dupes, _ = _text(entry).split("\x1d", 2)
        assert dupes == "1"  # the first event of the second chunk: a duplicate
        rows = await store.reads.trials("d", "t")
        assert trials_of(rows) == [("b", "fail"), ("a", "pass")]  # first write wins
        assert _recent.FOLD_AT > 2
    finally:
        await store.client.aclose()
