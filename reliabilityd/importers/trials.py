"""What a reader makes of a result file: trials, and the names they are counted under.

Names: the suite is the caller's, else the one the file gives, else the file's
stem, mapped by ``suite_name``; tasks by ``task_name``. Trial ids are
``<run>/<trial in the file>``; the run id is the caller's or one derived from
the content (``content_run``), so two runs of the same tasks both count.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator

import msgspec

from reliabilityd.events import Outcome
from reliabilityd.importers._detect import ImportFileError
from reliabilityd.names import MAX_NAME_BYTES, NAME_FORBIDDEN

MAX_RUN_BYTES = 100
# What no name may hold (names.NAME_FORBIDDEN: control and invisible format
# characters, surrogates, noncharacters).
_CONTROL = NAME_FORBIDDEN
_SUITE_FORBIDDEN = re.compile(r"[{}/+#]")


class Trial(msgspec.Struct, frozen=True):
    """One trial as the file records it; ``trial`` is local to the run."""

    task: str
    trial: str
    outcome: Outcome
    # Where to read the trial (an absolute URL, or relative to the suite's url_base).
    url: str | None = None


class Parsed(msgspec.Struct):
    """What a reader found in one file."""

    format: str
    name: str | None
    run: str
    trials: list[Trial]
    notes: list[str] = msgspec.field(default_factory=list)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()


def fit(name: str, limit: int = MAX_NAME_BYTES) -> str:
    """Cut to ``limit`` bytes of UTF-8, ending in ``~<8 hex>`` of the full name when cut."""
    raw = name.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return name
    head = raw[: limit - 9].decode("utf-8", "ignore")
    return f"{head}~{_digest(name)}"


def suite_name(raw: str) -> str:
    """A valid suite name for ``raw``.

    The name is normalised to NFC; ``{ } / + #`` and the characters no name
    may hold (``names.NAME_FORBIDDEN``) become ``_`` (so ``openai/gpt-4o``
    is ``openai_gpt-4o``), surrounding white space goes, and a name over 200
    bytes of UTF-8 keeps its first 191 bytes plus ``~`` and 8 hex digits of
    a hash of the whole name, so long names stay distinct.
    """
    name = _CONTROL.sub("_", _SUITE_FORBIDDEN.sub("_", unicodedata.normalize("NFC", raw))).strip()
    return fit(name) if name else "imported"


def task_name(raw: str) -> str:
    """A valid task name: NFC; forbidden characters (newlines of a prompt) become spaces; cut."""
    name = _CONTROL.sub(" ", unicodedata.normalize("NFC", raw)).strip()
    return fit(name) if name else "(empty)"


def content_run(data: bytes) -> str:
    """A run id derived from content: 16 hex digits of its BLAKE2b hash."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def check_run(run: str) -> str:
    if not run or len(run.encode()) > MAX_RUN_BYTES or _CONTROL.search(run):
        raise ImportFileError(
            f"run id {run!r} must be 1 to {MAX_RUN_BYTES} bytes without control characters"
        )
    return run


def trial_events(
    parsed: Parsed, suite: str, run: str
) -> Iterator[tuple[str, str, str, Outcome, str | None]]:
    """(suite, task, trial id, outcome, url) for every trial, trial ids carrying the run id."""
    for t in parsed.trials:
        yield suite, task_name(t.task), f"{run}/{t.trial}", t.outcome, t.url
