"""Files in reliabilityd's own wire format, read as a stream of (line, payload) pieces.

Two shapes: JSON lines (one wire payload per line: an event object, or an
array of them, exactly as a live MQTT message carries) and one JSON array of
events. Neither is read whole: lines come from the file one at a time, and
an array is cut into its top-level elements by a scanner that keeps at most
one element plus one read block in memory. Each piece is then decoded by
``events.decode``, the live path's decoder, so the file gets the same
validation as live events.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import re
from collections.abc import Iterator
from typing import BinaryIO

import msgspec

from reliabilityd.errors import ReliabilitydError

BLOCK = 1 << 16
# A line or array element longer than this is refused whole (the daemon's
# default ingest.max_payload); reading it would not be bounded.
MAX_PIECE = 1 << 20
_WIRE_KEYS = frozenset({"suite", "task", "trial", "outcome"})
# Inside an array: a whole string literal (escapes included), a lone quote
# (a string the block cuts short), or a bracket.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{}]')
_WS = b" \t\r\n"
_SCALAR = re.compile(rb"[^\s,]+")


class WireFileError(ReliabilitydError):
    """The file is not wire events in either shape; the message says where."""

    exit_code = 2


def looks_like_wire(head: bytes) -> bool:
    """True when the file's first bytes start with a wire event: its first line (JSON
    lines), or the first element of its array, is an object with the event's keys."""
    text = head.lstrip(_WS)
    if text.startswith(b"["):
        try:
            first = next(iter(Pieces(io.BytesIO(text), "head")), None)
        except WireFileError:  # the first element does not end within the head
            return False
        piece = b"" if first is None else first[1]
    else:
        piece = text.split(b"\n", 1)[0]
    try:
        doc = msgspec.json.decode(piece)
    except msgspec.DecodeError:
        return False
    return isinstance(doc, dict) and doc.keys() >= _WIRE_KEYS


class Pieces:
    """The pieces of a wire file in order: (line number, payload bytes), with a content hash.

    ``digest`` (16 hex digits of BLAKE2b over the bytes read) is complete
    once the iteration ends.
    """

    def __init__(self, stream: BinaryIO, name: str, *, block: int = BLOCK) -> None:
        self.stream = stream
        self.name = name
        self.block = block
        self._hash = hashlib.blake2b(digest_size=8)

    @property
    def digest(self) -> str:
        return self._hash.hexdigest()

    def _blocks(self) -> Iterator[bytes]:
        while block := self.stream.read(self.block):
            self._hash.update(block)
            yield block

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        blocks = self._blocks()
        head = b""
        for block in blocks:
            head += block
            if head.lstrip(_WS):
                break
        if head.lstrip(_WS).startswith(b"["):
            yield from self._array(head, blocks)
        else:
            yield from self._lines(head, blocks)

    def _lines(self, head: bytes, blocks: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
        number = 0
        rest = head
        while True:
            while (cut := rest.find(b"\n")) >= 0:
                number += 1
                line, rest = rest[:cut], rest[cut + 1 :]
                if line.strip(_WS):
                    yield number, self._bounded(line, number)
            if len(rest) > MAX_PIECE:
                self._bounded(rest, number + 1)
            block = next(blocks, None)
            if block is None:
                break
            rest += block
        if rest.strip(_WS):
            yield number + 1, self._bounded(rest, number + 1)

    def _bounded(self, piece: bytes, line: int) -> bytes:
        if len(piece) > MAX_PIECE:
            raise WireFileError(f"{self.name}: line {line} is longer than {MAX_PIECE} bytes")
        return piece

    def _array(self, head: bytes, blocks: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
        """Top-level elements of a JSON array, each with the line it starts on.

        Objects and arrays are found by their brackets (string literals
        skipped whole); anything else between the commas (a number, a
        string) is yielded as it is, for the decoder to reject.
        """
        buf = head
        pos = buf.index(b"[") + 1
        gap = pos  # where the text after the previous element starts
        lines = _LineCounter()
        depth = 0  # nesting inside the current element
        start = 0  # where the current element began, while depth > 0
        while True:
            match = _TOKEN.search(buf, pos)
            if match is None or match.group() == b'"' or (depth and len(buf) - start > MAX_PIECE):
                if depth and len(buf) - start > MAX_PIECE:
                    raise WireFileError(
                        f"{self.name}: the element on line {lines.at(buf, start)} is longer "
                        f"than {MAX_PIECE} bytes"
                    )
                block = next(blocks, None)
                if block is None:
                    where = lines.at(buf, pos)
                    raise WireFileError(f"{self.name}: line {where}: the JSON array is not closed")
                keep = start if depth else min(pos, gap)
                lines.drop(buf, keep)
                buf, pos, gap, start = buf[keep:] + block, pos - keep, gap - keep, start - keep
                continue
            token = match.group()
            at = match.start()
            if depth == 0 and token != b"]":
                yield from self._scalars(buf, gap, at, lines)
            if token in (b"{", b"["):
                if depth == 0:
                    start = at
                depth += 1
            elif token in (b"}", b"]"):
                if depth == 0:  # the array's own closing bracket
                    if token == b"}":
                        raise WireFileError(f"{self.name}: line {lines.at(buf, at)}: stray }}")
                    yield from self._scalars(buf, gap, at, lines)
                    yield from self._after_array(buf[match.end() :], blocks, lines.at(buf, at))
                    return
                depth -= 1
                if depth == 0:
                    yield lines.at(buf, start), buf[start : match.end()]
                    gap = match.end()
            elif depth == 0:  # a string element
                yield lines.at(buf, at), token
                gap = match.end()
            pos = match.end()

    def _after_array(
        self, tail: bytes, blocks: Iterator[bytes], end_line: int
    ) -> Iterator[tuple[int, bytes]]:
        """A first line holding a whole array is a JSON-lines file; else nothing may follow."""
        if end_line == 1:
            yield from self._lines(tail, blocks)
            return
        for block in itertools.chain((tail,), blocks):
            if block.strip(_WS):
                raise WireFileError(
                    f"{self.name}: text after the JSON array closed on line {end_line}"
                )

    def _scalars(
        self, buf: bytes, gap: int, end: int, lines: _LineCounter
    ) -> Iterator[tuple[int, bytes]]:
        """Elements between the commas that are neither objects, arrays nor strings."""
        for found in _SCALAR.finditer(buf, gap, end):
            yield lines.at(buf, found.start()), found.group()


class _LineCounter:
    """Line numbers of positions in a sliding buffer, counted incrementally."""

    def __init__(self) -> None:
        self.line = 1  # the line of buf[self.upto]
        self.upto = 0

    def at(self, buf: bytes, index: int) -> int:
        if index >= self.upto:
            self.line += buf.count(b"\n", self.upto, index)
            self.upto = index
            return self.line
        return self.line - buf.count(b"\n", index, self.upto)

    def drop(self, buf: bytes, keep: int) -> None:
        """``buf[:keep]`` is dropped: positions shift down by ``keep``."""
        self.at(buf, keep)
        self.upto -= keep
