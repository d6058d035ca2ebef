"""One result file read as trials: its format told or named, then its format's reader.

Formats (detected from the content, ``_detect``; or named with ``fmt``):
``tau-bench`` and ``tau2-bench`` (``tau``), ``inspect`` (``inspect_log``)
and ``multivon`` (``multivon``); what a reader returns and the names it
gives are in ``trials``.
"""

from __future__ import annotations

import json
from pathlib import Path

from reliabilityd.importers._detect import (
    DETECT_BYTES,
    FORMATS,
    ImportFileError,
    detect,
    detect_head,
)
from reliabilityd.importers.inspect_log import inspect_log, inspect_zip
from reliabilityd.importers.multivon import multivon
from reliabilityd.importers.tau import tau2_bench, tau_bench
from reliabilityd.importers.trials import Parsed

__all__ = ["read"]

_ZIP_MAGIC = b"PK\x03\x04"


def read(path: Path, fmt: str | None = None, *, scorer: str | None = None) -> Parsed:
    """Read one result file (``fmt`` None: detect it); a directory means its results.json.

    A file longer than ``DETECT_BYTES`` has its format told from that prefix
    (``detect_head``) before the rest is read, so a file of no format is
    refused without being read whole.
    """
    if path.is_dir() and (path / "results.json").is_file():
        path = path / "results.json"  # tau2-bench's "dir" format
    if fmt is not None and fmt not in FORMATS:
        raise ImportFileError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    try:
        with path.open("rb") as stream:
            data = stream.read(DETECT_BYTES + 1)
        if data.startswith(_ZIP_MAGIC):
            if fmt not in (None, "inspect"):
                raise ImportFileError(f"{path} is a zip archive, not {fmt} results")
            return inspect_zip(path, path.read_bytes(), scorer)
        if len(data) > DETECT_BYTES:
            if fmt is None:
                try:
                    fmt = detect_head(data[:DETECT_BYTES])
                except ImportFileError as exc:
                    raise ImportFileError(f"{path}: {exc}") from None
            data = path.read_bytes()
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{path}: not JSON (nor an Inspect .eval zip): {exc}") from None
    fmt = fmt or detect(doc)
    try:
        if fmt == "tau-bench":
            return tau_bench(doc, data)
        if fmt == "tau2-bench":
            return tau2_bench(doc, data, path)
        if fmt == "inspect":
            return inspect_log(doc["eval"], doc.get("samples") or [], doc, data, scorer, path=path)
        return multivon(doc, data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ImportFileError):
            raise
        raise ImportFileError(
            f"{path}: does not have the shape of {fmt} results ({type(exc).__name__}: {exc})"
        ) from None
