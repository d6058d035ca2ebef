"""Which harness wrote a result file, told from its content: the whole document, or a prefix.

``detect`` reads a decoded document. ``detect_head`` reads at most
``DETECT_BYTES`` of a file that is longer than that, so telling the format of
a large file (or that it has none) never holds the whole file in memory: it
scans the prefix's JSON tokens for the keys each format starts with (a
tau-bench list's first run, ``simulations`` or ``info.num_trials``,
``eval.task``, a ``cases`` list) without building any value. Each of those
keys comes in the first kilobytes of the files the harnesses write. Once
the format is known, the reader decodes the whole file as it must.
"""

from __future__ import annotations

import json
import re
from typing import Any

from reliabilityd.errors import ReliabilitydError

FORMATS = ("tau-bench", "tau2-bench", "inspect", "multivon")
# The most of a file read to tell its format when it is longer than this.
DETECT_BYTES = 1 << 20
# A whole JSON string (escapes included), a lone quote (a string the prefix
# cuts), or a bracket, colon or comma.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{}:,]')
_WS = b" \t\r\n"
_TAU_KEYS = frozenset({"task_id", "trial", "reward"})
_EXPECTED = (
    "expected a tau-bench list of runs, tau2-bench results (simulations), an Inspect AI "
    "eval log or a multivon-eval report"
)


class ImportFileError(ReliabilitydError):
    """A result file that cannot be imported; the message says what to do."""

    exit_code = 2


def _cannot_tell(where: str) -> ImportFileError:
    return ImportFileError(
        f"cannot tell the format from {where}: {_EXPECTED}; name it with --format "
        f"({', '.join(FORMATS)})"
    )


def detect(doc: Any) -> str:
    """The format of a decoded JSON document, or ImportFileError saying why not."""
    if isinstance(doc, list):
        if not doc:
            raise ImportFileError("the file holds an empty list: no runs to import")
        first = doc[0]
        if isinstance(first, dict) and first.keys() >= _TAU_KEYS:
            return "tau-bench"
    elif isinstance(doc, dict):
        info = doc.get("info")
        if "simulations" in doc or (isinstance(info, dict) and "num_trials" in info):
            return "tau2-bench"
        if isinstance(doc.get("eval"), dict) and "task" in doc["eval"]:
            return "inspect"
        if isinstance(doc.get("cases"), list):
            return "multivon"
    raise _cannot_tell("the content")


class _Seen:
    """What the prefix showed: the top-level keys (and the kind of value each opens), the
    keys of ``info`` and ``eval``, the keys of a top-level list's first element."""

    def __init__(self) -> None:
        self.top: bytes = b""
        self.keys: dict[str, bytes] = {}
        self.inner: dict[str, set[str]] = {"info": set(), "eval": set()}
        self.first: set[str] = set()
        self.first_kind: bytes = b""
        self.first_closed = False

    def verdict(self) -> str | None:
        """The format, by ``detect``'s order, from what was seen; None when it cannot tell."""
        if self.top == b"[":
            if self.first >= _TAU_KEYS:
                return "tau-bench"
            return None
        if "simulations" in self.keys or "num_trials" in self.inner["info"]:
            return "tau2-bench"
        if "task" in self.inner["eval"]:
            return "inspect"
        if self.keys.get("cases") == b"[":
            return "multivon"
        return None


def _scan(head: bytes) -> _Seen:
    """Walk the prefix's tokens, keeping only the keys ``_Seen`` names."""
    seen = _Seen()
    text = head.lstrip(_WS)
    seen.top = text[:1]
    # Per open container: its bracket, and the key it sits under ('' when none).
    stack: list[tuple[bytes, str]] = []
    key: str | None = None  # the last object key read, until its value opens
    pending: bytes | None = None  # the last string token, until a ':' makes it a key
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token == b'"':
            break  # a string the prefix cuts: nothing after it can be read
        if token.startswith(b'"'):
            pending = token
            continue
        depth = len(stack)
        if token == b":" and pending is not None and stack and stack[-1][0] == b"{":
            try:
                key = json.loads(pending)
            except ValueError:
                key = None
            if isinstance(key, str):
                _key(seen, stack, key, depth)
            pending = None
            continue
        pending = None
        if token in (b"{", b"["):
            if depth == 1 and key is not None and stack[0][0] == b"{":
                seen.keys[key] = token
            if depth == 1 and stack[0][0] == b"[" and not seen.first_kind:
                seen.first_kind = token
            stack.append((token, key or ""))
            key = None
        elif token in (b"}", b"]"):
            if not stack:
                break
            stack.pop()
            if len(stack) == 1 and stack[0][0] == b"[" and seen.first_kind:
                seen.first_closed = True
            key = None
        elif token == b",":
            if depth == 1 and stack[0][0] == b"[" and not seen.first_kind:
                seen.first_kind = b"scalar"  # the first element was no object
            key = None
        if seen.verdict() is not None or seen.first_closed or seen.first_kind == b"scalar":
            break
    return seen


def _key(seen: _Seen, stack: list[tuple[bytes, str]], key: str, depth: int) -> None:
    if depth == 1:
        seen.keys.setdefault(key, b"")
    elif depth == 2 and stack[0][0] == b"{" and stack[1][1] in seen.inner:
        seen.inner[stack[1][1]].add(key)
    elif depth == 2 and stack[0][0] == b"[" and len(seen.first) < 10_000:
        seen.first.add(key)


def detect_head(head: bytes) -> str:
    """The format of a file from its first ``len(head)`` bytes (at most ``DETECT_BYTES``
    read), or ImportFileError: not JSON there, or no format's keys in it."""
    text = head.lstrip(_WS)
    if text[:1] not in (b"[", b"{"):
        raise ImportFileError(
            "not JSON (nor an Inspect .eval zip): a result file is a JSON object or list, "
            f"and this one starts with {text[:20]!r}"
        )
    seen = _scan(head)
    verdict = seen.verdict()
    if verdict is None:
        size = f"{len(head) >> 10} KiB" if len(head) >= 1024 else f"{len(head)} bytes"
        raise _cannot_tell(f"its first {size}")
    return verdict
