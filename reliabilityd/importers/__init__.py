"""Result files of other harnesses, imported as trials, each counted once for good."""

from __future__ import annotations

from reliabilityd.importers._import import (
    FORMATS,
    ImportFileError,
    ImportReport,
    Parsed,
    describe,
    detect,
    import_file,
    read,
)

__all__ = [
    "FORMATS",
    "ImportFileError",
    "ImportReport",
    "Parsed",
    "describe",
    "detect",
    "import_file",
    "read",
]
