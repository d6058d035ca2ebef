"""The trial log's entries parsed: what the recent trials and the per-run counts fold.

An entry is ``<version> \\x1d <positions of duplicates> \\x1d <records>``,
the records ``<position> \\x1f <task> \\x1f <record>`` joined by ``\\x1e``
(``_recent.chunk_records``); a duplicate's record is never read back.
"""

from __future__ import annotations

from collections.abc import Sequence

from reliabilityd.store._base import _text


def entry(raw: bytes | str) -> tuple[int, list[tuple[str, str]]]:
    """A log entry's version and its counted (task, record) pairs, in chunk order."""
    try:
        version, dupes, body = _text(raw).split("\x1d", 2)
        skip = {int(x) for x in dupes.split(",") if x}
        number = int(version)
    except ValueError:
        return 0, []
    out: list[tuple[str, str]] = []
    for piece in body.split("\x1e") if body else ():
        fields = piece.split("\x1f", 2)
        if len(fields) == 3 and fields[0].isdigit() and int(fields[0]) not in skip:
            out.append((fields[1], fields[2]))
    return number, out


def unfolded(entries: Sequence[bytes | str]) -> list[tuple[str, str]]:
    """The log's counted (task, record) pairs, oldest first (the log is newest first)."""
    out: list[tuple[str, str]] = []
    for raw in reversed(entries):
        out.extend(entry(raw)[1])
    return out
