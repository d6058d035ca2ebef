"""Slices of a suite: the canonical id of a combination of label values, and label filters.

A suite configured with ``slice_by = ["model", "agent_version"]`` splits its
events by the values of those labels; each distinct combination is a slice,
named by its canonical id: ``key=value`` pairs in ``slice_by`` order, joined
by ``,``, each key and value escaped (``escape``), e.g.
``model=gpt-5,agent_version=1.5``. The id is safe inside a Redis key, a hash
tag's suite, an MQTT topic level and a Prometheus label.

A label's value is its text: a string as it is, ``true`` / ``false``, a
number as JSON writes it. An event without the label (or with ``null``) has
the empty value, shown as ``(none)``. A value that is an object or an array,
or that would not pass as a name (``events``' rules: at most 200 bytes, no
control or invisible characters), cannot name a slice: the event is
dead-lettered with the reason.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from reliabilityd.names import MAX_NAME_BYTES, NAME_FORBIDDEN

__all__ = [
    "NONE_SHOWN",
    "Ids",
    "escape",
    "label_keys",
    "label_text",
    "matches",
    "parse_filter",
    "parse_id",
    "shown",
    "slice_id",
    "unescape",
]

NONE_SHOWN = "(none)"
# Characters that carry meaning in an id, a key name, a hash tag or an MQTT topic.
_ESCAPED = frozenset("%,=/+#{}:*?[]\\ ")


def escape(text: str) -> str:
    """``text`` with every character an id or a key gives a meaning to written as ``%XX``."""
    if not any(ch in _ESCAPED for ch in text):
        return text
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in text)


def unescape(text: str) -> str:
    """The inverse of ``escape``."""
    if "%" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%" and _is_hex(text[i + 1 : i + 3]):
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair)


def label_text(key: str, value: Any) -> str:
    """The text a label value slices by; ``ValueError`` (the reason) when it cannot."""
    if value is None:
        return ""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"labels.{key} is not a finite number, so it cannot name a slice")
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        raise ValueError(
            f"labels.{key} is {type(value).__name__}: a label that slices a suite must be a "
            "string, a number or a boolean"
        )
    if len(text.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise ValueError(f"labels.{key} is longer than {MAX_NAME_BYTES} bytes of UTF-8")
    if NAME_FORBIDDEN.search(text):
        raise ValueError(f"labels.{key} contains a control or invisible character")
    return text


def slice_id(slice_by: Sequence[str], labels: Mapping[str, Any] | None) -> str:
    """The canonical id of the slice an event with ``labels`` belongs to.

    ``ValueError`` with the reason when a label value cannot name a slice.
    """
    got = labels or {}
    return ",".join(f"{escape(key)}={escape(label_text(key, got.get(key)))}" for key in slice_by)


class Ids:
    """``slice_id`` for one ``slice_by``, each combination of label values made once.

    A batch's events share few combinations; making an id costs tens of
    microseconds, looking one up well under one. Keep one per batch: the
    cache holds every combination it saw.
    """

    def __init__(self, slice_by: Sequence[str]) -> None:
        self.slice_by = tuple(slice_by)
        self._made: dict[tuple[Any, ...], str] = {}

    def __call__(self, labels: Mapping[str, Any] | None) -> str:
        """The id of the slice of an event with ``labels``; ``ValueError`` as ``slice_id``."""
        got = labels or {}
        # The type too: 1, 1.0 and True are equal keys but name different slices.
        values = tuple((type(v), v) for v in (got.get(k) for k in self.slice_by))
        try:
            sid = self._made.get(values)
        except TypeError:  # an unhashable value (an object, an array): slice_id says why
            return slice_id(self.slice_by, labels)
        if sid is None:
            sid = slice_id(self.slice_by, labels)
            self._made[values] = sid
        return sid


def parse_id(sid: str) -> dict[str, str]:
    """The label values an id names (unescaped), in its order."""
    out: dict[str, str] = {}
    if not sid:
        return out
    for pair in sid.split(","):
        key, _, value = pair.partition("=")
        out[unescape(key)] = unescape(value)
    return out


def shown(sid: str) -> str:
    """An id for people: ``model=gpt-5,agent_version=(none)``."""
    return ",".join(
        f"{key}={value if value else NONE_SHOWN}" for key, value in parse_id(sid).items()
    )


def parse_filter(text: str) -> dict[str, str]:
    """``agent_version=1.4,model=x`` as a label filter; ``ValueError`` when malformed.

    Values are taken as written (``%2C`` for a comma in one); ``(none)`` or
    an empty value selects the events without the label.
    """
    out: dict[str, str] = {}
    for pair in text.split(","):
        key, eq, value = pair.partition("=")
        key, value = unescape(key.strip()), unescape(value.strip())
        if not eq or not key:
            raise ValueError(f"a label filter is key=value[,key=value...], got {text!r}")
        if key in out:
            raise ValueError(f"label {key!r} is named twice in {text!r}")
        out[key] = "" if value == NONE_SHOWN else value
    return out


def matches(sid: str, labels: Mapping[str, str]) -> bool:
    """Whether the slice ``sid`` has every label value of the filter ``labels``."""
    values = parse_id(sid)
    return all(key in values and values[key] == want for key, want in labels.items())


def label_keys(slice_ids: Sequence[str]) -> set[str]:
    """Every label key the slices are split by."""
    return {key for sid in slice_ids for key in parse_id(sid)}
