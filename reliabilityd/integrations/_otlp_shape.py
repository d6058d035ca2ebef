"""Where an OTLP request is malformed: the path of its first bad field, in either encoding.

protobuf's own parsers say *that* a body is wrong, rarely *where*: ``json_format``
names a field in some of its messages and not in others, and upb's
``DecodeError`` is "Wire format was corrupt". A field of the wrong wire type
upb even keeps as an unknown field and parses on. These two walkers follow
a message descriptor through the body and stop at the first field that does
not fit, naming it by its path (``resourceLogs[0].scopeLogs`` as the JSON
spells it, ``resource_logs[0].scope_logs`` for protobuf):

* ``json_problem``: a decoded OTLP/JSON document against the descriptor, as
  strict as ``json_format.ParseDict`` (or stricter) on every value it checks,
  so what passes here parses there. It also drops ``traceId`` / ``spanId``,
  which OTLP/JSON writes in hex where protobuf's JSON expects base64 (the
  mapping needs neither).
* ``wire_problem``: protobuf bytes, field by field: a truncated varint or
  length, a known field number with another wire type than its type's, a
  string that is not UTF-8, nesting past ``MAX_DEPTH``. Unknown field
  numbers are skipped, as protobuf skips them (a newer OTLP may add fields).

Both walk with a stack, not recursion, so no nesting depth raises
``RecursionError``; both are pure and run in the HTTP port's worker thread.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

# As deep as upb parses by default; OTLP's own nesting (AnyValue in AnyValue) rarely passes 10.
MAX_DEPTH = 100
_INT_TEXT = re.compile(r"-?[0-9]+\Z")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}\Z")
# Fields OTLP/JSON writes in hex (protobuf JSON would want base64); the mapping ignores them.
_HEX_IDS = frozenset({"traceId", "spanId", "trace_id", "span_id"})

_T = FieldDescriptor
_INT_RANGES = {
    _T.TYPE_INT32: (-(2**31), 2**31 - 1),
    _T.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _T.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _T.TYPE_ENUM: (-(2**31), 2**31 - 1),
    _T.TYPE_UINT32: (0, 2**32 - 1),
    _T.TYPE_FIXED32: (0, 2**32 - 1),
    _T.TYPE_INT64: (-(2**63), 2**63 - 1),
    _T.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _T.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _T.TYPE_UINT64: (0, 2**64 - 1),
    _T.TYPE_FIXED64: (0, 2**64 - 1),
}
_FLOAT32_MAX = 3.4028234663852886e38
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_WIRE_NAMES = {0: "varint", 1: "64-bit", 2: "length-delimited", 3: "group", 4: "group", 5: "32-bit"}


def _message(field: FieldDescriptor) -> Descriptor:
    message = field.message_type
    if message is None:  # a message field always has its type
        raise TypeError(f"field {field.full_name} has no message type")
    return message


def _wire_type(field: FieldDescriptor) -> int:
    kind = field.type
    if kind in (_T.TYPE_STRING, _T.TYPE_BYTES, _T.TYPE_MESSAGE):
        return _LEN
    if kind in (_T.TYPE_DOUBLE, _T.TYPE_FIXED64, _T.TYPE_SFIXED64):
        return _I64
    if kind in (_T.TYPE_FLOAT, _T.TYPE_FIXED32, _T.TYPE_SFIXED32):
        return _I32
    return _VARINT


class _Path:
    """A field path kept as parts, formatted only for the message of a problem."""

    __slots__ = ("name", "parent")

    def __init__(self, parent: _Path | None, name: str) -> None:
        self.parent = parent
        self.name = name

    def __str__(self) -> str:
        parts: list[str] = []
        node: _Path | None = self
        while node is not None:
            parts.append(node.name)
            node = node.parent
        out = ""
        for part in reversed(parts):
            out += part if part.startswith("[") or not out else f".{part}"
        return out


def _at(path: _Path | None) -> str:
    return "(the request)" if path is None else str(path)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class ShapeProblem(Exception):
    """A field that does not fit its message: ``path`` and what is wrong with it."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


# --- OTLP/JSON -------------------------------------------------------------


def _json_fields(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    fields: dict[str, FieldDescriptor] = {}
    for field in descriptor.fields:
        fields[field.name] = field
        fields[field.json_name] = field
    return fields


_FIELDS: dict[str, dict[str, FieldDescriptor]] = {}


def _fields_of(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    fields = _FIELDS.get(descriptor.full_name)
    if fields is None:
        fields = _FIELDS[descriptor.full_name] = _json_fields(descriptor)
    return fields


def _scalar_problem(field: FieldDescriptor, value: Any) -> str | None:
    """Why ``value`` cannot be this scalar field's JSON value, or None."""
    kind = field.type
    if kind == _T.TYPE_STRING:
        if not isinstance(value, str):
            return f"expected a string, got {_kind(value)}"
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:
                return "the string holds a lone surrogate (not UTF-8)"
        return None
    if kind == _T.TYPE_BYTES:
        if not isinstance(value, str) or not _BASE64.match(value):
            return f"expected base64 bytes in a string, got {_kind(value)}"
        return None
    if kind == _T.TYPE_BOOL:
        return None if isinstance(value, bool) else f"expected true or false, got {_kind(value)}"
    if kind in (_T.TYPE_DOUBLE, _T.TYPE_FLOAT):
        if isinstance(value, str):
            if value in ("NaN", "Infinity", "-Infinity"):
                return None
            try:
                number = float(value) if value.isascii() else math.nan
            except ValueError:
                number = math.nan
            if math.isnan(number):
                return f"expected a number, got {_kind(value)}"
        elif isinstance(value, float):
            number = value
        elif isinstance(value, int) and not isinstance(value, bool):
            number = float(value) if abs(value) < 2**1000 else math.inf  # float() would raise
        else:
            return f"expected a number, got {_kind(value)}"
        if math.isinf(number) or (kind == _T.TYPE_FLOAT and abs(number) > _FLOAT32_MAX):
            width = "float" if kind == _T.TYPE_FLOAT else "double"
            return f"{str(value)[:40]} is out of range for a {width}"
        return None
    if kind == _T.TYPE_ENUM and isinstance(value, str):
        return None  # an enum by name; unknown names are ignored like unknown fields
    low, high = _INT_RANGES.get(kind, (-(2**63), 2**63 - 1))
    if isinstance(value, bool):
        return f"expected an integer, got {_kind(value)}"
    if isinstance(value, str):
        if not _INT_TEXT.match(value):
            return f"expected an integer (or a string of digits), got {_kind(value)}"
        number_int = int(value)
    elif isinstance(value, float):
        if not value.is_integer():
            return f"expected an integer, got {_kind(value)}"
        number_int = int(value)
    elif isinstance(value, int):
        number_int = value
    else:
        return f"expected an integer, got {_kind(value)}"
    if not low <= number_int <= high:
        return f"{number_int} is out of range [{low}, {high}]"
    return None


# An object to check: its value, its message, its path, how deep it sits.
_JsonFrame = tuple[dict[str, Any], Descriptor, "_Path | None", int]


def json_problem(doc: Any, descriptor: Descriptor) -> ShapeProblem | None:
    """The first field of ``doc`` that does not fit ``descriptor``, else None.

    Drops the hex ``traceId`` / ``spanId`` fields on the way (see the module
    docstring), so ``doc`` is ready for ``json_format.ParseDict``.
    """
    if not isinstance(doc, dict):
        return ShapeProblem(_at(None), f"expected an object, got {_kind(doc)}")
    stack: list[_JsonFrame] = [(doc, descriptor, None, 0)]
    while stack:
        obj, message, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            return ShapeProblem(_at(path), f"nested more than {MAX_DEPTH} messages deep")
        fields = _fields_of(message)
        oneofs: dict[str, str] = {}
        named: dict[str, str] = {}
        children: list[_JsonFrame] = []
        for key in [k for k in obj if k in _HEX_IDS]:
            field = fields.get(key)
            if field is not None and field.type == _T.TYPE_BYTES:
                del obj[key]
        for key, value in obj.items():
            field = fields.get(key)
            if field is None or value is None:
                continue  # unknown fields are ignored, as json_format is told to
            here = _Path(path, key)
            spelled = named.setdefault(field.name, key)
            if spelled != key:
                return ShapeProblem(str(here), f"the same field as {spelled}, given twice")
            oneof = field.containing_oneof
            if oneof is not None:
                other = oneofs.setdefault(oneof.name, key)
                if other != key:
                    return ShapeProblem(
                        str(here), f"{other} is set too: {oneof.name} takes one of its fields"
                    )
            if field.is_repeated:
                if not isinstance(value, list):
                    return ShapeProblem(str(here), f"expected an array, got {_kind(value)}")
                items: Sequence[Any] = value
                paths = [_Path(here, f"[{i}]") for i in range(len(value))]
            else:
                items, paths = (value,), [here]
            for item, where in zip(items, paths, strict=True):
                if field.type == _T.TYPE_MESSAGE:
                    if not isinstance(item, dict):
                        return ShapeProblem(str(where), f"expected an object, got {_kind(item)}")
                    children.append((item, _message(field), where, depth + 1))
                    continue
                problem = _scalar_problem(field, item)
                if problem is not None:
                    return ShapeProblem(str(where), problem)
        stack.extend(reversed(children))  # depth first, in document order
    return None


# --- protobuf --------------------------------------------------------------


def _varint(data: bytes, at: int, end: int) -> tuple[int, int] | None:
    """(value, next position) of the varint at ``at``, or None when it is cut or too long."""
    value = shift = 0
    while at < end and shift < 70:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return None


def wire_problem(data: bytes, descriptor: Descriptor) -> ShapeProblem | None:
    """The first field of the protobuf ``data`` that does not fit ``descriptor``, else None."""
    # Each frame: a message's bytes [at, end), its descriptor, its path, its depth,
    # and how many of each repeated field it has held so far (for the indices).
    stack: list[tuple[int, int, Descriptor, _Path | None, int]] = [
        (0, len(data), descriptor, None, 0)
    ]
    while stack:
        at, end, message, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            return ShapeProblem(_at(path), f"nested more than {MAX_DEPTH} messages deep")
        by_number = message.fields_by_number
        counts: dict[int, int] = {}
        children: list[tuple[int, int, Descriptor, _Path | None, int]] = []
        while at < end:
            tag = _varint(data, at, end)
            if tag is None:
                return ShapeProblem(_at(path), f"a field's tag is cut off at byte {at}")
            key, at = tag
            number, wire = key >> 3, key & 7
            field = by_number.get(number)
            if field is None:
                here = _Path(path, f"#{number}")
            elif field.is_repeated:
                index = counts.get(number, 0)
                counts[number] = index + 1
                here = _Path(_Path(path, field.name), f"[{index}]")
            else:
                here = _Path(path, field.name)
            if number < 1:
                return ShapeProblem(str(here), f"field number {number} (they start at 1)")
            if field is not None:
                expected = _wire_type(field)
                packed = wire == _LEN and field.is_repeated and expected != _LEN
                if wire != expected and not packed:
                    return ShapeProblem(
                        str(here),
                        f"sent as {_WIRE_NAMES.get(wire, f'wire type {wire}')}, but "
                        f"{_type_name(field)} is {_WIRE_NAMES[expected]}",
                    )
            if wire == _VARINT:
                step = _varint(data, at, end)
                if step is None:
                    return ShapeProblem(str(here), "a varint is cut off or longer than 10 bytes")
                at = step[1]
            elif wire in (_I64, _I32):
                at += 8 if wire == _I64 else 4
                if at > end:
                    return ShapeProblem(str(here), "a fixed-size value is cut off")
            elif wire == _LEN:
                size = _varint(data, at, end)
                if size is None:
                    return ShapeProblem(str(here), "a length is cut off")
                length, at = size
                if at + length > end:
                    return ShapeProblem(
                        str(here), f"says {length} bytes, {end - at} are left in its message"
                    )
                if field is not None and field.type == _T.TYPE_MESSAGE:
                    children.append((at, at + length, _message(field), here, depth + 1))
                elif field is not None and field.type == _T.TYPE_STRING:
                    try:
                        data[at : at + length].decode()
                    except UnicodeDecodeError:
                        return ShapeProblem(str(here), "a string that is not valid UTF-8")
                at += length
            else:
                return ShapeProblem(
                    str(here), f"wire type {wire} ({_WIRE_NAMES.get(wire, 'unknown')}) is not used"
                )
        stack.extend(reversed(children))
    return None


def _type_name(field: FieldDescriptor) -> str:
    """The field's type with its article: "a string", "an integer", "a message (KeyValue)"."""
    if field.type == _T.TYPE_MESSAGE:
        return f"a message ({_message(field).name})"
    names = {
        _T.TYPE_STRING: "a string",
        _T.TYPE_BYTES: "a bytes field",
        _T.TYPE_BOOL: "a bool",
        _T.TYPE_ENUM: "an enum",
        _T.TYPE_DOUBLE: "a double",
        _T.TYPE_FLOAT: "a float",
    }
    return names.get(field.type, "an integer")
