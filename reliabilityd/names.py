"""What a name and a link may hold: suites, tasks, trials, runs and labels, and trial urls.

Every check says why in words a producer can act on (the reason of a dead
letter); none raises. The wire format (``events``) applies them to each
event; the config applies the link checks to its templates.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence

MAX_NAME_BYTES = 200
SHORT_NAME = MAX_NAME_BYTES // 4
# What no name may hold, because some consumer of names refuses it or because it
# hides what a name says (docs/security.md):
# - C0 and C1 controls;
# - surrogates and the 66 noncharacters (U+FDD0-U+FDEF, U+xFFFE and U+xFFFF in
#   every plane): not valid in an MQTT topic, mosquitto disconnects a client
#   that publishes one;
# - format characters (Unicode category Cf: zero-width characters, bidirectional
#   controls, the soft hyphen, tags) and the line and paragraph separators:
#   invisible, they make two names that look the same count as two suites.
# The Cf list is Unicode 15's (tests/unit/test_names.py checks that it holds
# every Cf character of the running Python's unicodedata).
_MQTT_BAD = "\ud800-\udfff\ufdd0-\ufdef" + "".join(
    f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(17)
)
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f\u2028\u2029"
)
NAME_FORBIDDEN = re.compile(f"[\x00-\x1f\x7f-\x9f{_MQTT_BAD}{_FORMAT}]")
# Several names joined by NUL: the same test without NUL, plus white space at
# either end of any of them.
_JOINED_BAD = re.compile(f"[\x01-\x1f\x7f-\x9f{_MQTT_BAD}{_FORMAT}]|\x00\\s|\\s\x00")
MQTT_FORBIDDEN = re.compile(f"[\x00-\x1f\x7f-\x9f{_MQTT_BAD}]")
SUITE_FORBIDDEN = re.compile(r"[{}/+#]")


MAX_URL_BYTES = 512
# A scheme at the start of a URL (RFC 3986: a letter, then letters, digits, + - .).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a trial's link, or None when it can.

    An absolute ``http`` / ``https`` URL with a host, or a relative
    reference (a path, a query, a ``#`` fragment or route) that the suite's
    ``url_base`` resolves. Refused: empty, longer than ``MAX_URL_BYTES``,
    control or invisible format characters, white space at either end, a
    backslash (browsers read ``/\\host`` as ``//host``), a protocol-relative
    ``//host`` (it leaves the base's host), credentials before the host, and
    every other scheme, first of all ``javascript:``.
    """
    if not url:
        return "url is empty"
    if len(url.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        return f"url is longer than {MAX_URL_BYTES} bytes of UTF-8"
    problem = char_problem("url", url)
    if problem:
        return problem
    if url[0].isspace() or url[-1].isspace():
        return "url begins or ends with white space"
    if "\\" in url:
        return "url contains a backslash (browsers read it as a slash; percent-encode it as %5C)"
    scheme = _SCHEME.match(url)
    if scheme is not None:
        name = scheme.group(1).lower()
        if name == "javascript":
            return "url has the javascript: scheme (a link runs no code)"
        if name not in ("http", "https"):
            return f"url has the scheme {name}: (only http and https, or a relative path)"
        rest = url[len(name) + 1 :]
        host = re.split(r"[/?#]", rest[2:], maxsplit=1)[0]
        if not rest.startswith("//") or not host:
            return f"url is not an absolute {name} URL with a host ({name}://host/...)"
        if "@" in host:
            return "url carries credentials (user:password@host): a link is shown to every reader"
        return None
    if url.startswith("//"):
        return "url is protocol-relative (//host): give the scheme, or a path under the base"
    return None


LINK_FIELDS = ("suite", "task", "trial", "run")


def template_problem(template: str) -> str | None:
    """Why ``template`` cannot build trial links, or None when it can.

    Placeholders are ``{suite}``, ``{task}``, ``{trial}`` and ``{run}``, each
    percent-encoded when the link is built; the result must be a url
    ``url_problem`` accepts.
    """
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        return f"not a template: {exc}"
    unknown = sorted(names - set(LINK_FIELDS))
    if unknown:
        return f"unknown placeholder {{{unknown[0]}}} (known: {', '.join(LINK_FIELDS)})"
    return url_problem(template.format(suite="s", task="t", trial="1", run="r"))


# A placeholder of an OTLP link template: {trace_id}, {span_id}, {attribute:KEY}, {resource:KEY}.
RECORD_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def record_template_problem(template: str) -> str | None:
    """Why ``template`` cannot build an OTLP record's link, or None when it can."""
    for name in RECORD_PLACEHOLDER.findall(template):
        scope, sep, key = name.partition(":")
        if name in ("trace_id", "span_id") or (sep and scope in ("attribute", "resource") and key):
            continue
        return (
            f"unknown placeholder {{{name}}} (known: {{trace_id}}, {{span_id}}, "
            "{attribute:KEY}, {resource:KEY})"
        )
    return url_problem(RECORD_PLACEHOLDER.sub("x", template))


def char_problem(field: str, value: str) -> str | None:
    found = NAME_FORBIDDEN.search(value)
    if found is None:
        return None
    char = found.group()
    code = ord(char)
    if code <= 0x1F or 0x7F <= code <= 0x9F:
        kind, why = "a control character", ""
    elif 0xD800 <= code <= 0xDFFF:
        kind, why = "a surrogate", " (not valid UTF-8; MQTT refuses it)"
    elif 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE:
        kind, why = "a Unicode noncharacter", " (MQTT refuses it in a topic)"
    else:
        kind, why = "an invisible format character", " (zero-width, bidirectional control or alike)"
    return f"{field} contains {kind} U+{code:04X}{why}"


def name_problem(field: str, value: str, *, suite: bool = False) -> str | None:
    if not value:
        return f"{field} is empty"
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"{field} is longer than {MAX_NAME_BYTES} bytes of UTF-8"
    problem = char_problem(field, value)
    if problem:
        return problem
    if value[0].isspace() or value[-1].isspace():
        return f"{field} begins or ends with white space"
    if not value.isascii() and not unicodedata.is_normalized("NFC", value):
        return f"{field} is not in Unicode normalization form NFC (normalise it before sending)"
    if suite and SUITE_FORBIDDEN.search(value):
        return "suite contains one of { } / + # (it lives in a Redis hash tag and MQTT topics)"
    return None


def suite_name_problem(value: str) -> str | None:
    """Why ``value`` cannot name a suite, or None when it can."""
    return name_problem("suite", value, suite=True)


def names_clean(names: Sequence[str]) -> bool:
    """True when no name holds a forbidden character, edge white space or non-NFC text.

    A few C-level scans over the names joined by NUL, however many there are.
    """
    joined = "\x00".join(names)
    if joined.count("\x00") != len(names) - 1 or _JOINED_BAD.search(joined):
        return False
    if joined[:1].isspace() or joined[-1:].isspace():
        return False
    return joined.isascii() or unicodedata.is_normalized("NFC", joined)
