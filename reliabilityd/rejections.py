"""What a rejection is: its reason class, a small fixed set fit for metric labels,
and the suite a rejected payload names (so ``reliabilityd rejected SUITE`` can filter).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from reliabilityd.events import _is_json, _name_problem

# What kind of problem a rejection is: a small fixed set, fit for metric labels.
REASON_CLASSES = (
    "too_large",
    "empty",
    "undecodable",
    "not_an_event",
    "missing_field",
    "invalid_field",
    "topic_mismatch",
    "forbidden",
    "too_many_suites",
    "other",
)
_ELEMENT = re.compile(r"^element \d+: ")


def reason_class(reason: str) -> str:
    """The class (one of ``REASON_CLASSES``) of a reason ``decode`` gave."""
    text = _ELEMENT.sub("", reason, count=1)
    if text.startswith("topic "):  # topics.Binding: the topic binds another suite
        return "topic_mismatch"
    if text.startswith("forbidden: "):  # daemon.auth: the token may not write the suite
        return "forbidden"
    if text.startswith("not a trial event ("):
        text = text.partition("): ")[2]
    if text.startswith("payload of ") and " exceeds " in text:
        return "too_large"
    if text.startswith(("empty payload", "empty array")):
        return "empty"
    if text.startswith(
        ("not valid ", "not JSON", "undecodable payload", "RecursionError", "JSON nested too")
    ):
        return "undecodable"
    if "malformed" in text or "truncated" in text or "Input data was truncated" in text:
        return "undecodable"
    if "stats.max_suites" in text:
        return "too_many_suites"
    if text.startswith("labels."):
        return "invalid_field"  # a label a suite is sliced by cannot name a slice
    if text.startswith("Object missing required field"):
        return "missing_field"
    if text.startswith("Expected `") and " - at `$" not in text:
        return "not_an_event"  # the payload or element is no object at all
    if " - at `$" in text or text.startswith(("suite ", "task ", "trial ", "ts ", "outcome ")):
        return "invalid_field"
    return "other"


class _Named(msgspec.Struct):
    suite: Any = None


_json_named = msgspec.json.Decoder(_Named)
_mp_named = msgspec.msgpack.Decoder(_Named)


def named_suite(raw: bytes) -> str | None:
    """The suite a rejected payload or element names, when it names a valid one."""
    try:
        named = (_json_named if _is_json(raw) else _mp_named).decode(raw)
    except Exception:  # not an object, or not decodable: it names none
        return None
    suite = named.suite
    if isinstance(suite, str) and _name_problem("suite", suite, suite=True) is None:
        return suite
    return None
