"""``logs.redact``: credentials masked, everything else (links, prose, names) as it was."""

from __future__ import annotations

import pytest

from reliabilityd.logs import redact

MASKED = [
    ("redis://:PW@host/0", "redis://***@host/0"),
    ("cannot reach redis://user:PW@h:1/0 (--redis)", "cannot reach redis://***@h:1/0 (--redis)"),
    ("mqtt://agent:s3cr3t%20pass@127.0.0.1:1883", "mqtt://***@127.0.0.1:1883"),
    (
        "redis://h:1/0?password=PW&socket_keepalive=true",
        "redis://h:1/0?password=***&socket_keepalive=true",
    ),
    ("http://hook:PW@127.0.0.1:5/hook?key=PW", "http://***@127.0.0.1:5/hook?key=***"),
    ("https://h/x?access_token=PW&a=1", "https://h/x?access_token=***&a=1"),
    ("https://h/x?X-Amz-Signature=PW", "https://h/x?X-Amz-Signature=***"),
    ("https://h/x?api_key=PW", "https://h/x?api_key=***"),
    ("https://h/x?client_secret=PW#frag", "https://h/x?client_secret=***#frag"),
    ("Authorization: Bearer PW", "Authorization: Bearer ***"),
    ("Authorization Bearer PW", "Authorization Bearer ***"),
    ("Authorization Basic PW", "Authorization Basic ***"),
    ("headers {'Authorization': 'Basic PW'}", "headers {'Authorization': 'Basic ***'}"),
    ("authorization=PW x", "authorization=*** x"),
    ("x-api-key: PW", "x-api-key: ***"),
    ("cookie=PW; next", "cookie=*** next"),
    ("sent bearer PW to the hook", "sent bearer *** to the hook"),
]

KEPT = [
    "https://ci.example.com/runs/42?attempt=3&task=basic",
    "http://127.0.0.1:41877/suites/deploy-bot?rule=r&at=2026-12-01T13:24:40Z",
    "suite 'x' has no task 'basic arithmetic'",
    "no token configured: POST /v1/trials is open on loopback",
    "the Authorization header is missing",
    "https://h/x?monkey=1&keyboard=2",
    "redis://127.0.0.1:6379/0 (the default; no embedded daemon runs in /home/me)",
]


@pytest.mark.parametrize(("text", "masked"), MASKED)
def test_credentials_are_masked(text: str, masked: str) -> None:
    assert redact(text) == masked
    assert "PW" not in redact(text)


@pytest.mark.parametrize("text", KEPT)
def test_data_stays_as_it_is(text: str) -> None:
    assert redact(text) == text
