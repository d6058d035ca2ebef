"""What the HTTP port answers: JSON answers and their errors, the body's elements,
their per-element results, /readyz."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
from aiohttp import web

from reliabilityd.config import parse_mqtt_url
from reliabilityd.daemon._offload import Busy
from reliabilityd.events import TrialEvent, elements, letters
from reliabilityd.rejections import Rejected
from reliabilityd.store import Store, StoreError

# Seconds /readyz waits for Redis and for the broker.
PROBE_TIMEOUT = 2.0


class ElementResult(msgspec.Struct, omit_defaults=True):
    index: int
    status: str  # "accepted" or "rejected"
    reason: str | None = None


class SuiteResult(msgspec.Struct):
    counted: int
    duplicates: int
    errors: int
    skips: int


class IngestResponse(msgspec.Struct):
    accepted: int
    rejected: int
    results: list[ElementResult]
    suites: dict[str, SuiteResult]


def decode_elements(
    payload: bytes, max_payload: int
) -> tuple[list[TrialEvent | Rejected], list[Rejected], bool]:
    """(each element's event or rejection in order, the dead letters, whether any element).

    ``events.elements`` decodes, so an element is valid here exactly when it
    would count over MQTT, an element that is itself an array is rejected
    whole, and the dead letters are the ones MQTT would write (a bounded
    number per payload). False: nothing in the body is an element (not JSON
    or MessagePack, empty, ``[]``, nested too deeply): a 400.
    """
    whole, outcomes = elements(payload, max_payload)
    if whole is not None:
        return [], [whole], False
    return outcomes, letters(outcomes), True


async def probe(store: Store, mqtt_url: str | None) -> dict[str, str]:
    """/readyz: Redis answers PING, the broker accepts a TCP connection; what fails, why."""
    problems: dict[str, str] = {}
    try:
        await asyncio.wait_for(store.admin.ping(), PROBE_TIMEOUT)
    except (StoreError, TimeoutError) as exc:
        problems["redis"] = f"{type(exc).__name__}: {exc}"
    if mqtt_url is not None:
        broker = parse_mqtt_url(mqtt_url)
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for, cancelled
            # just as the connection is made, drops it unclosed.
            async with asyncio.timeout(PROBE_TIMEOUT):
                _, writer = await asyncio.open_connection(broker.host, broker.port)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        except (OSError, TimeoutError) as exc:
            problems["mqtt"] = f"{broker.host}:{broker.port}: {type(exc).__name__} {exc}"
    return problems


RETRY_AFTER = 2  # seconds a client should wait after a 503


def json_answer(body: Any, status: int, **headers: str) -> web.Response:
    """A JSON answer with ``status`` and any extra headers."""
    return web.Response(
        body=msgspec.json.encode(body),
        status=status,
        content_type="application/json",
        headers=headers or None,
    )


def busy(exc: Busy) -> web.Response:
    """503 with Retry-After: no place came free in time."""
    return json_answer({"error": f"{exc}: retry"}, 503, **{"Retry-After": str(RETRY_AFTER)})


def unauthorised() -> web.Response:
    """401 asking for the bearer token."""
    return json_answer(
        {"error": "a valid bearer token is required"},
        401,
        **{"WWW-Authenticate": 'Bearer realm="reliabilityd"'},
    )
