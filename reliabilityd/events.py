"""The wire format: trial events in JSON or MessagePack, decoded once by msgspec.

A payload is one event object or an array of them. The format is detected
from the first byte (JSON starts with ``{`` or ``[`` after white space;
anything else is tried as MessagePack). A good payload decodes in one pass;
only when that fails is it split into elements, so that in an array each bad
element is rejected alone and the good ones still count.

``decode`` never raises: a payload or element that fails in any way (malformed
syntax, wrong types, nesting deeper than the decoder's recursion limit, values
out of range) comes back as a ``Rejected`` with the reason and its class
(``rejections``), set here where the failure is seen. A message that raised
instead would never be acknowledged, and the broker would redeliver it to
every restarted daemon for ever.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import msgspec

from reliabilityd.names import (
    SHORT_NAME,
    SUITE_FORBIDDEN,
    name_problem,
    names_clean,
    url_problem,
)
from reliabilityd.rejections import ReasonClass, Rejected

Outcome = Literal["pass", "fail", "error", "skip"]
_JSON_START = frozenset(b'{["-0123456789tfn')
_WHITESPACE = b" \t\r\n"
# ``ts`` is Unix seconds. Any date after 1973 in milliseconds is past this
# (which in seconds is the year 5138), so a millisecond stamp cannot pass.
MAX_TS = 1e11


class TrialEvent(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One trial outcome. ``trial`` is unique per (suite, task).

    Not tracked by the garbage collector (``gc=False``): a batch allocates
    thousands of them, and the collections they set off cost the ingest path
    10% to 15% of its throughput. An event cannot reference itself unless its
    ``labels`` dict is made to hold it, which nothing here does.
    """

    suite: str
    task: str
    trial: str
    outcome: Outcome
    ts: float | None = None
    labels: dict[str, Any] | None = None
    # Also record the trial for good in the suite's import ledger, as
    # ``reliabilityd import`` does: a later import of the same run (or a
    # redelivery however late) counts nothing twice, after the dedup records
    # expired too. Harness integrations whose results are also imported set it.
    ledger: bool = False
    # Where to read the trial (a transcript, a trace, a log viewer's sample):
    # an absolute http(s) URL or a path relative to the suite's configured
    # ``url_base`` (``url_problem``). Kept with the task's recent trials.
    url: str | None = None
    # The run, eval or experiment the trial belongs to: a name like ``trial``,
    # never a label (it counts against no ``max_slices``).
    run: str | None = None


# Dead letters one payload yields at most, besides the one that counts the rest.
MAX_LETTERS = 10
# A rejected element past the first MAX_LETTERS of its payload (no copy, no reason of its own).
UNREPORTED = Rejected(
    b"", "rejected (past the first elements of its payload given a reason)", "other"
)


_json_batch = msgspec.json.Decoder(TrialEvent | list[TrialEvent])
_json_list = msgspec.json.Decoder(list[msgspec.Raw])
_json_one = msgspec.json.Decoder(TrialEvent)
_mp_batch = msgspec.msgpack.Decoder(TrialEvent | list[TrialEvent])
_mp_list = msgspec.msgpack.Decoder(list[msgspec.Raw])
_MSGPACK_ARRAY = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}
_mp_one = msgspec.msgpack.Decoder(TrialEvent)


def validate(event: TrialEvent) -> str | None:
    """The reason an event is unusable, or None when it is fine."""
    suite, task, trial = event.suite, event.task, event.trial
    # Fast path for the common case, one scan for all three names:
    # 50 characters are at most 200 bytes of UTF-8 (4 bytes per code point).
    if (
        0 < len(suite) <= SHORT_NAME
        and 0 < len(task) <= SHORT_NAME
        and 0 < len(trial) <= SHORT_NAME
        and names_clean((suite, task, trial))
        and not SUITE_FORBIDDEN.search(suite)
        and (event.ts is None or -MAX_TS < event.ts < MAX_TS)
        and event.url is None
        and event.run is None
    ):
        return None
    return (
        name_problem("suite", event.suite, suite=True)
        or name_problem("task", event.task)
        or name_problem("trial", event.trial)
        or (_ts_problem(event.ts) if event.ts is not None else None)
        or _link_problem(event)
    )


def _link_problem(event: TrialEvent) -> str | None:
    if event.run is not None:
        problem = name_problem("run", event.run)
        if problem:
            return problem
    return url_problem(event.url) if event.url is not None else None


def _ts_problem(ts: float) -> str | None:
    if not math.isfinite(ts):
        return "ts is not a finite number"
    if ts >= MAX_TS:
        return (
            f"ts {ts:.0f} is not Unix seconds (milliseconds?): ts is seconds since "
            f"1970-01-01 UTC, below 1e11"
        )
    if ts <= -MAX_TS:
        return f"ts {ts:.0f} is not Unix seconds: ts is seconds since 1970-01-01 UTC"
    return None


def invalid_class(message: str) -> ReasonClass:
    """The class of a msgspec ``ValidationError``, read from its message once, here.

    The message is all such an error carries: a missing field is "Object
    missing required field `x`", a wrong type or value inside the object ends
    in " - at `$.x`", and a value that is no object at all is "Expected
    `object`, got `int`", without a path. ``tests/unit/test_reason_classes.py``
    pins each against msgspec's own words.
    """
    if message.startswith("Object missing required field"):
        return "missing_field"
    if " - at `$" in message:
        return "invalid_field"
    if message.startswith("Expected `"):
        return "not_an_event"
    return "other"


def _failure(exc: Exception) -> tuple[str, ReasonClass]:
    """A dead-letter reason and its class for an exception msgspec (or anything under it)
    raised."""
    if isinstance(exc, msgspec.ValidationError):
        return str(exc), invalid_class(str(exc))
    if isinstance(exc, msgspec.MsgspecError):
        return str(exc), "undecodable"
    if isinstance(exc, RecursionError):
        return "nested too deeply (RecursionError)", "undecodable"
    # Anything else: the type name tells an operator which class of input it was.
    return f"{type(exc).__name__}: {exc}", "other"


def _is_json(payload: bytes) -> bool:
    """JSON when the first byte after white space can start a JSON value.

    A MessagePack trial event starts with a map or array byte (0x80 and up),
    never with printable ASCII, so a number, string, ``null`` or ``true`` is
    reported as the JSON it is.
    """
    if payload[0] in _JSON_START:
        return True
    stripped = payload.lstrip(_WHITESPACE)
    return bool(stripped) and stripped[0] in _JSON_START


def _split(
    items: Iterable[msgspec.Raw],
    one: msgspec.json.Decoder[TrialEvent] | msgspec.msgpack.Decoder[TrialEvent],
) -> list[TrialEvent | Rejected]:
    """Each element's event or rejection, in order.

    Only the first ``MAX_LETTERS`` rejected elements keep their bytes and
    reason; each later one is the shared ``UNREPORTED`` marker, so a payload
    of a million bad elements costs a million references, not a million
    copies and reasons.
    """
    out: list[TrialEvent | Rejected] = []
    bad = 0
    for index, item in enumerate(items):
        cls: ReasonClass = "invalid_field"
        try:
            event = one.decode(item)
        except Exception as exc:  # any failure of one element rejects that element alone
            problem: str | None
            problem, cls = _failure(exc)
        else:
            problem = validate(event)
            if problem is None:
                out.append(event)
                continue
        bad += 1
        if bad <= MAX_LETTERS:
            out.append(Rejected(bytes(item), f"element {index}: {problem}", cls))
        else:
            out.append(UNREPORTED)
    return out


def letters(outcomes: Sequence[TrialEvent | Rejected], *, noun: str = "elements") -> list[Rejected]:
    """The dead letters of one payload's elements: the first few, and one counting the rest.

    ``noun`` names the pieces in the counting letter (an OTLP request's are records).
    """
    bad = [o for o in outcomes if isinstance(o, Rejected) and o is not UNREPORTED]
    rest = sum(1 for o in outcomes if o is UNREPORTED) if len(bad) >= MAX_LETTERS else 0
    if rest:
        bad.append(
            Rejected(
                b"",
                f"{rest} more rejected {noun} in the same payload (only the first "
                f"{MAX_LETTERS} get their own dead letter)",
                "other",
            )
        )
    return bad


def decode(payload: bytes, max_payload: int = 1 << 20) -> tuple[list[TrialEvent], list[Rejected]]:
    """Decode a payload into good events and rejected pieces with their reasons; never raises.

    At most ``MAX_LETTERS`` + 1 rejected pieces per payload, however many bad
    elements it holds (see ``letters``).
    """
    try:
        whole, outcomes = _decode(payload, max_payload)
    except Exception as exc:  # nothing that arrives from outside may stop the daemon
        return [], [_undecodable(payload, exc)]
    if whole is not None:
        return [], [whole]
    good = [o for o in outcomes if isinstance(o, TrialEvent)]
    return good, (letters(outcomes) if len(good) < len(outcomes) else [])


def elements(payload: bytes, max_payload: int = 1 << 20) -> Outcomes:
    """(whole, outcomes): the payload's rejection when nothing in it is an element
    (not JSON or MessagePack, empty, ``[]``, too large), else each element's event
    or rejection in order (a single object is one element). Never raises.

    The same decoding as ``decode``: an element is valid here exactly when it
    would count over MQTT. Past ``MAX_LETTERS`` rejected elements each further
    one is ``UNREPORTED``.
    """
    try:
        return _decode(payload, max_payload)
    except Exception as exc:  # nothing that arrives from outside may stop the daemon
        return _undecodable(payload, exc), []


Outcomes = tuple[Rejected | None, list[TrialEvent | Rejected]]


def _undecodable(payload: bytes, exc: Exception) -> Rejected:
    return Rejected(bytes(payload), f"undecodable payload: {_failure(exc)[0]}", "undecodable")


def _decode(payload: bytes, max_payload: int) -> Outcomes:
    if len(payload) > max_payload:
        reason = f"payload of {len(payload)} bytes exceeds {max_payload}"
        return Rejected(payload, reason, "too_large"), []
    if not payload:
        return Rejected(payload, "empty payload", "empty"), []
    is_json = _is_json(payload)
    if not is_json and payload[0] < 0x80:
        # A MessagePack event or array starts with a map or array byte (0x80
        # and up); below that it is text, or a MessagePack scalar at best.
        return Rejected(payload, *_not_json(payload)), []
    batch = _json_batch if is_json else _mp_batch
    fmt = "JSON" if is_json else "MessagePack"
    try:
        decoded = batch.decode(payload)
    except msgspec.ValidationError:
        decoded = None  # some element is bad: find which below
    except msgspec.DecodeError as exc:
        return Rejected(payload, f"not valid {fmt}: {exc}", "undecodable"), []
    except RecursionError:
        decoded = None  # nested too deep somewhere: split, so only the culprit is rejected
    if decoded is not None:
        if isinstance(decoded, list) and not decoded:
            # Acknowledged like any message, so it must leave a trace.
            return Rejected(payload, "empty array: no trial events", "empty"), []
        if not isinstance(decoded, list):
            problem = validate(decoded)
            return None, [decoded if problem is None else _invalid(payload, problem)]
        # A batch message gets the same whole-batch check as a batch of messages.
        if all_valid(decoded) or not any(validate(e) for e in decoded):
            return None, list(decoded)
    # Slow path: decode elements one by one.
    first = payload.lstrip(_WHITESPACE)[0] if is_json else payload[0]
    if first == 0x5B or (not is_json and first in _MSGPACK_ARRAY):  # '[' or a MessagePack array
        try:
            parts = (_json_list if is_json else _mp_list).decode(payload)
        except RecursionError:
            return _too_deep(payload, fmt), []
        except Exception as exc:
            return Rejected(payload, f"not valid {fmt}: {_failure(exc)[0]}", "undecodable"), []
        if not parts:
            return Rejected(payload, "empty array: no trial events", "empty"), []
        return None, _split(parts, _json_one if is_json else _mp_one)
    try:
        event = (_json_one if is_json else _mp_one).decode(payload)
    except msgspec.ValidationError as exc:
        reason = f"not a trial event ({fmt}): {exc}"
        return None, [Rejected(payload, reason, invalid_class(str(exc)))]
    except msgspec.DecodeError as exc:
        return Rejected(payload, f"not valid {fmt}: {exc}", "undecodable"), []
    except RecursionError:
        return _too_deep(payload, fmt), []
    except Exception as exc:
        text, cls = _failure(exc)
        return None, [Rejected(payload, f"not a trial event ({fmt}): {text}", cls)]
    problem = validate(event)
    return None, [event if problem is None else _invalid(payload, problem)]


def _invalid(payload: bytes, problem: str) -> Rejected:
    """A rejection for a ``validate`` problem: a name, or ``ts``, that cannot be used."""
    return Rejected(payload, problem, "invalid_field")


def _too_deep(payload: bytes, fmt: str) -> Rejected:
    reason = f"{fmt} nested too deeply to decode (RecursionError)"
    return Rejected(payload, reason, "undecodable")


def _not_json(payload: bytes) -> tuple[str, ReasonClass]:
    expected = "a trial event is a JSON object, an array of them, or MessagePack"
    try:
        _json_one.decode(payload)
    except msgspec.ValidationError as exc:  # JSON, but a scalar
        return f"not a trial event (JSON): {exc}", invalid_class(str(exc))
    except Exception:  # not JSON either: say what it looks like
        pass
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if not "".join(text.split()).isprintable() or not text.strip():
        reason = f"not JSON, and not MessagePack (first byte 0x{payload[0]:02x}): {expected}"
        return reason, "undecodable"
    start = text[:40] + ("..." if len(text) > 40 else "")
    return f"not JSON: plain text {start!r}; {expected}", "undecodable"


def all_valid(events: Sequence[TrialEvent]) -> bool:
    """True when ``validate`` passes every event; a few C-level scans per batch.

    Per event it does one tuple of attribute reads; the names' lengths, their
    control characters and the timestamps are then each checked in one pass
    over the whole batch. False means at least one event may fail: check each
    with ``validate`` then.
    """
    if not events:
        return True
    names = [name for e in events for name in (e.suite, e.task, e.trial)]
    if "" in names or max(map(len, names)) > SHORT_NAME:
        return False
    if not names_clean(names):
        return False
    if any(SUITE_FORBIDDEN.search(suite) for suite in set(names[::3])):
        return False
    linked = [e for e in events if e.url is not None or e.run is not None]
    if linked and any(_link_problem(e) for e in linked):
        return False
    stamps = [e.ts for e in events if e.ts is not None]
    if not stamps:
        return True
    # A sum of floats is finite only if each of them is (an overflow to inf
    # only sends the batch to the per-event check).
    return math.isfinite(sum(stamps)) and min(stamps) > -MAX_TS and max(stamps) < MAX_TS


def decode_many(
    payloads: Sequence[tuple[bytes, str]], max_payload: int = 1 << 20
) -> tuple[list[TrialEvent], list[tuple[Rejected, str]]]:
    """Decode a batch of (payload, source) pairs: the good events in order, and
    every rejected piece with the source it came from. Never raises.

    One event per payload is the shape agents send, so it gets a fast path:
    one decoder call per payload, then ``all_valid`` over the whole batch.
    Whatever the fast path does not accept outright (arrays, leading white
    space, any failure) goes through ``decode``, which gives the reasons;
    both paths accept exactly the same events.
    """
    json_one = _json_one.decode
    msgpack_one = _mp_one.decode
    quick: list[TrialEvent | None] = []
    for payload, _ in payloads:
        event: TrialEvent | None = None
        if 0 < len(payload) <= max_payload:
            first = payload[0]
            try:
                if first == 0x7B:  # '{'
                    event = json_one(payload)
                elif 0x80 <= first <= 0x8F:  # a MessagePack map of up to 15 fields
                    event = msgpack_one(payload)
            except Exception:  # decode() below finds the reason
                event = None
        quick.append(event)
    decoded = [e for e in quick if e is not None]
    if not all_valid(decoded):
        quick = [e if e is not None and validate(e) is None else None for e in quick]
    elif len(decoded) == len(quick):
        return decoded, []
    good: list[TrialEvent] = []
    bad: list[tuple[Rejected, str]] = []
    for event, (payload, source) in zip(quick, payloads, strict=True):
        if event is not None:
            good.append(event)
            continue
        events, rejected = decode(payload, max_payload)
        good.extend(events)
        bad.extend((item, source) for item in rejected)
    return good, bad


class _Named(msgspec.Struct):
    suite: Any = None


_json_named = msgspec.json.Decoder(_Named)
_mp_named = msgspec.msgpack.Decoder(_Named)


def named_suite(raw: bytes) -> str | None:
    """The suite a rejected payload or element names, when it names a valid one.

    A dead letter is filed under it, so ``reliabilityd rejected SUITE`` finds
    a sender's letters even when nothing it sent decoded as an event.
    """
    try:
        named = (_json_named if _is_json(raw) else _mp_named).decode(raw)
    except Exception:  # not an object, or not decodable: it names none
        return None
    suite = named.suite
    if isinstance(suite, str) and name_problem("suite", suite, suite=True) is None:
        return suite
    return None
