"""Fuzzers at the daemon's edges, against a real daemon, redis-server and mosquitto.

* The HTTP port: random bodies (bytes, JSON and MessagePack of any shape and
  nesting, events with fields mutated), headers, content types and methods,
  through a client and as raw bytes. Every request gets a well-formed answer,
  never a 500, and the daemon keeps serving.
* Names: suite and task names drawn over Unicode categories, lengths and
  separators. For every accepted name the daemon itself publishes the suite's
  snapshot topic and an alert topic to mosquitto, and every Redis key it
  creates for the suite hashes to the suite's slot.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import logging
import re
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import aiohttp
import aiomqtt
import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from reliabilityd.config import DaemonConfig, HttpConfig, MqttSinkConfig, SinksConfig
from reliabilityd.events import TrialEvent, validate
from reliabilityd.rules import Rule
from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import wait_until
from tests.support.http import event, get, http_config, post, serving
from tests.support.names import names
from tests.support.servers import Mosquitto, RedisServer, free_port

T = TypeVar("T")
STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-5]\d\d) ")
# Every answer the port may give; 503 only with Retry-After.
WELL_FORMED = {200, 400, 401, 404, 405, 408, 413, 415, 422, 503}

# --- the HTTP fuzzer ----------------------------------------------------------

leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=40)
    | st.sampled_from(["suite", "task", "trial", "outcome", "pass", "fail", "web"])
)
shapes = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=30,
)
mutated_events = st.fixed_dictionaries(
    {
        "suite": st.just("web") | shapes,
        "task": st.just("t"),
        "trial": st.text(min_size=1, max_size=8),
    },
    optional={
        "outcome": st.sampled_from(["pass", "fail", "error", "skip", "PASS", ""]) | shapes,
        "ts": shapes,
        "labels": shapes,
        "extra": shapes,
    },
)


def _json(value: Any) -> bytes:
    try:
        return msgspec.json.encode(value)
    except (OverflowError, TypeError, ValueError, msgspec.EncodeError):
        return b"{"


def _msgpack(value: Any) -> bytes:
    try:
        return msgspec.msgpack.encode(value)
    except (OverflowError, TypeError, ValueError, msgspec.EncodeError):
        return b"\xc1"


bodies = st.one_of(
    st.binary(max_size=2048),
    shapes.map(_json),
    shapes.map(_msgpack),
    st.lists(mutated_events, max_size=6).map(_json),
    st.lists(mutated_events, max_size=6).map(_msgpack),
    st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 5000).map(lambda n: b"\x91" * n + b"\x90"),
    st.sampled_from([b"", b"[]", b"{}", b"null", b"[[]]", b"[[{}]]", b'"x"', b"0"]),
    st.lists(
        st.builds(
            lambda trial, outcome: {
                "suite": "web",
                "task": "t",
                "trial": trial,
                "outcome": outcome,
            },
            st.text(min_size=1, max_size=8),
            st.sampled_from(["pass", "fail", "error", "skip"]),
        ),
        min_size=1,
        max_size=4,
    ).map(_json),
    # Past ingest.max_payload (64 KiB here).
    st.integers(33_000, 40_000).map(lambda n: b"[" + b"1," * n + b"1]"),
)
content_types = st.sampled_from(
    [
        "application/json",
        "application/msgpack",
        "application/x-msgpack",
        "application/json; charset=latin-1",
        "text/plain",
        "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded",
        "",
    ]
) | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
header_names = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"),
    min_size=1,
    max_size=20,
).filter(lambda n: n.lower() not in {"content-length", "transfer-encoding", "host"})
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60)
headers = st.dictionaries(header_names, header_values, max_size=5)
raw_header_lines = st.lists(
    st.binary(max_size=60).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    max_size=4,
)


# An element of every field valid, and one the validation rejects (an empty task).
VALID = {"suite": "web", "task": "t", "trial": "valid", "outcome": "pass"}
EMPTY_TASK = {"suite": "web", "task": "", "trial": "x", "outcome": "pass"}


class Request(msgspec.Struct, frozen=True):
    """One request of the HTTP fuzzer; ``expect`` the status a deliberate one must get."""

    method: str
    body: bytes
    content_type: str
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    raw_lines: list[bytes] = msgspec.field(default_factory=list)
    as_raw: bool = False
    expect: int | None = None


JSON = "application/json"
# One request of each kind of answer runs in every run, whatever the search draws:
# counted, refused, partly rejected, too large, wrong method.
KNOWN = [
    Request("POST", _json([VALID]), JSON, expect=200),
    Request("POST", _msgpack([VALID]), "application/msgpack", expect=200),
    Request("POST", _json([VALID]), JSON, as_raw=True, expect=200),
    Request("POST", b"{", JSON, expect=400),
    Request("POST", b"[]", JSON, as_raw=True, expect=400),
    Request("POST", _json([VALID, EMPTY_TASK]), JSON, expect=422),
    Request("POST", b"[" + b"1," * 33_000 + b"1]", "", expect=413),
    Request("GET", b"", "", expect=405),
]
valid_events = st.lists(
    st.builds(
        lambda trial, outcome: {"suite": "web", "task": "t", "trial": trial, "outcome": outcome},
        # Printable ASCII without white space: a valid name, whatever is drawn.
        st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=8),
        st.sampled_from(["pass", "fail", "error", "skip"]),
    ),
    min_size=1,
    max_size=4,
)
# Deliberately valid requests, through the client or as raw bytes: every one is counted.
valid_requests = st.builds(
    lambda events, packed, as_raw: Request(
        "POST",
        _msgpack(events) if packed else _json(events),
        "application/msgpack" if packed else "application/json",
        as_raw=as_raw,
        expect=200,
    ),
    valid_events,
    st.booleans(),
    st.booleans(),
)
hostile_requests = st.builds(
    Request,
    method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT"]),
    body=bodies,
    content_type=content_types,
    headers=headers,
    raw_lines=raw_header_lines,
    as_raw=st.booleans(),
)
requests = valid_requests | hostile_requests


async def _raw(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.readline()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _runner(loop: asyncio.AbstractEventLoop) -> Any:
    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    return run


@pytest.mark.hypothesis
async def test_fuzzed_http_requests_get_a_well_formed_answer_and_the_daemon_keeps_serving(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = http_config(redis_server, prefix, max_payload=64 * 1024)
    cfg = msgspec.structs.replace(
        cfg, http=msgspec.structs.replace(cfg.http, read_timeout=2.0, max_inflight=64)
    )
    caplog.set_level(logging.WARNING)
    seen: dict[int, int] = {}
    async with serving(cfg) as (_, base), aiohttp.ClientSession() as http:
        port = cfg.http.port
        run = _runner(asyncio.get_running_loop())

        async def through_client(
            method: str, body: bytes, content_type: str, extra: dict[str, str]
        ) -> tuple[int, dict[str, str]]:
            sent = {**extra, "Content-Type": content_type} if content_type else extra
            async with http.request(method, f"{base}/v1/trials", data=body, headers=sent) as r:
                await r.read()
                return r.status, dict(r.headers)

        @settings(
            max_examples=200,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(request=requests)
        def check(request: Request) -> None:
            if request.as_raw:
                raw = (
                    b"POST /v1/trials HTTP/1.1\r\nHost: x\r\n"
                    + b"".join(line + b"\r\n" for line in request.raw_lines)
                    + b"Content-Type: "
                    + request.content_type.encode()
                    + b"\r\nContent-Length: %d\r\n\r\n" % len(request.body)
                    + request.body
                )
                line = run(_raw(port, raw))
                match = STATUS_LINE.match(line)
                assert match is not None, (raw[:200], line)
                status, answer_headers = int(match.group(1)), {"Retry-After": "2"}
            else:
                status, answer_headers = run(
                    through_client(
                        request.method, request.body, request.content_type, request.headers
                    )
                )
            seen[status] = seen.get(status, 0) + 1
            assert status in WELL_FORMED, (status, request.body[:200])
            if request.expect is not None:
                assert status == request.expect, (request, status)
            if status == 503:
                assert answer_headers.get("Retry-After") == "2"

        for known in KNOWN:
            check = example(request=known)(check)

        started = time.monotonic()
        await asyncio.to_thread(check)
        print(f"http fuzz: statuses {seen} in {time.monotonic() - started:.1f} s")
        assert (await get(base, "/healthz"))[0] == 200
        assert (await post(base, [event("t", "after-fuzz")]))[0] == 200
    assert 500 not in seen
    # The explicit examples ran: answers of every kind were seen (and asserted).
    assert {200, 400, 405, 413, 422} <= set(seen), seen
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]


# --- the name fuzzer through the daemon ---------------------------------------


@pytest.mark.hypothesis
async def test_every_name_the_daemon_accepts_gets_its_topics_published_and_keys_in_its_slot(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(
        redis_url=redis_server.url,
        mqtt_url=mosquitto.url,
        prefix=prefix,
        ks=[1],
        ci_interval=0.2,
        http=HttpConfig(port=free_port()),
        sinks=SinksConfig(mqtt=MqttSinkConfig(topic=f"{prefix}/alerts")),
        # Fires for every suite at its first failed trial.
        alerts=[Rule(name="any", k=1, below=0.99, on_unknown="alert")],
        daemon=DaemonConfig(instance=f"{prefix}-d"),
    )
    topics: set[str] = set()
    seen = {"accepted": 0, "rejected": 0}
    accepted: set[str] = set()
    async with (
        aiomqtt.Client("127.0.0.1", mosquitto.port) as sub,
        running(cfg) as daemon,
        store_for(cfg) as store,
    ):
        await asyncio.wait_for(daemon.http_listening.wait(), 10)
        base = f"http://127.0.0.1:{cfg.http.port}"
        await sub.subscribe(f"{prefix}/snapshot/#", qos=1)
        await sub.subscribe(f"{prefix}/alerts/#", qos=1)

        async def read() -> None:
            async for message in sub.messages:
                topics.add(str(message.topic))

        reader = asyncio.create_task(read())
        loop = asyncio.get_running_loop()
        run = _runner(loop)
        counter = iter(range(1_000_000))

        async def published(suites: list[str]) -> None:
            want = {f"{prefix}/snapshot/{s}" for s in suites} | {
                f"{prefix}/alerts/{s}/any" for s in suites
            }

            async def arrived() -> bool:
                return want <= topics

            try:
                await wait_until(arrived, 20)
            except TimeoutError:
                raise AssertionError(f"never published: {sorted(want - topics)}") from None

        @settings(
            max_examples=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(pairs=st.lists(st.tuples(names, names | st.just("task")), min_size=2, max_size=8))
        # Accepted and rejected names in every run, whatever the search draws.
        @example(
            pairs=[
                ("agent bot", "task"),
                ("\u00e9t\u00e9:v1.2", "t 1"),
                ("a&amp;b", "<script>alert(1)</script>"),
                ('say "hi" it\'s', "task"),
            ]
        )
        @example(
            pairs=[
                ("bad/suite", "task"),
                ("bad#", "task"),
                ("", "task"),
                (" leading", "task"),
                ("nul\x00", "task"),
                ("{tag}", "task"),
            ]
        )
        def check(pairs: list[tuple[str, str]]) -> None:
            body, new = [], []
            for suite, task in pairs:
                trial = f"r{next(counter)}"
                if validate(TrialEvent(suite, task, trial, "fail")) is not None:
                    seen["rejected"] += 1
                    continue
                seen["accepted"] += 1
                body.append({"suite": suite, "task": task, "trial": trial, "outcome": "fail"})
                if suite not in accepted:
                    new.append(suite)
            if not body:
                return
            status, answer, _ = run(post(base, body))
            assert status == 200, (status, answer)
            accepted.update(new)
            run(published(sorted({b["suite"] for b in body})))

        try:
            started = time.monotonic()
            await asyncio.to_thread(check)
            elapsed = time.monotonic() - started
            keys = [k.decode() async for k in store.client.scan_iter(match=f"{prefix}:*")]
        finally:
            reader.cancel()
    print(f"name fuzz: {seen}, {len(accepted)} suites, {len(keys)} keys in {elapsed:.1f} s")
    # The explicit examples ran: accepted suites and rejected names, every run.
    assert len(accepted) >= 4
    assert seen["rejected"] >= 6
    # Keys under a hash tag, but the change marks' {/ci} (no suite may hold "/").
    suite_keys = [
        k for k in keys if k.startswith(f"{prefix}:{{") and not k.startswith(f"{prefix}:{{/")
    ]
    owned = 0
    for suite in accepted:
        slot = binascii.crc_hqx(suite.encode(), 0) % 16384
        mine = [k for k in suite_keys if k.startswith(f"{prefix}:{{{suite}}}:")]
        assert mine, f"no key for suite {suite!r}"
        for key in mine:
            assert key_slot(key.encode()) == slot, key
        owned += len(mine)
    # Every suite key the daemon created belongs to an accepted suite.
    assert owned == len(suite_keys), sorted(suite_keys)[:20]
