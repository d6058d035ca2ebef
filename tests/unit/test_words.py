"""The repository speaks for itself: no work-tracking words, no names of modules that moved.

Every sentence of the package, the tests, the docs, the studies and the
benchmarks stands on its own for a reader of the repository: none points
at a ticket, a finding or a session, and none names a module or key that
no longer exists.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ("reliabilityd", "tests", "docs", "studies", "benchmarks")
FILES = ("README.md", "CHANGELOG.md", "CONTRIBUTING.md", "pyproject.toml", "Makefile")

# Words that track work instead of describing the software.
WORK_WORDS = [
    r"\bthe\s+issue\b",
    r"\bthis\s+issue\b",
    r"\bissue\s+#?\d+",
    r"\bfindings?\s+\d+",
    r"\bthe\s+seed's\s+gate\b",
    r"\bseed\s+(example|document)\b",
    r"\bearlier\s+releases?\b",
]
# Modules and keys that moved or were removed, by the name they had.
GONE = [
    r"mqtt_client\.py",
    r"rel:dedup-layout",
    r"alerting\.rules\b",
    r"alerting\.canary\b",
    r"alerting\.rulestate\b",
    r"alerting\.pagesim\b",
    r"alerting\.cadence\b",
    r"alerting\.forecast\b",
    r"importers\.results\b",
    r"importers/results\.py",
    r"reliabilityd\.broker\b",
    r"cli\._oncall\b",
    r"embedded\.processes import .*(Prometheus|Alertmanager|ClusterNode|cluster_create)",
    # The commit: one object every source uses (sources.Commit), classes set where made.
    r"daemon\._admission\b",
    r"\bcommit_decoded\b",
    r"\bIngestUnavailable\b",
    r"\bdaemon\.ingest\(",
    r"\breason_class\(",
    r"events import [^\n]*\bRejected\b",
]


SUFFIXES = (".py", ".md", ".toml", ".lua", ".js", ".css", ".txt")


@functools.cache
def _texts() -> list[tuple[Path, str]]:
    """The repository's own files (not installed packages such as tests/interop's)."""
    paths = [ROOT / name for name in FILES]
    for tree in TREES:
        paths += sorted(
            p
            for p in (ROOT / tree).rglob("*")
            if p.is_file()
            and p.suffix in SUFFIXES
            and "node_modules" not in p.parts
            and "__pycache__" not in p.parts
        )
    me = Path(__file__).resolve()
    return [(p, p.read_text(encoding="utf-8")) for p in paths if p.exists() and p != me]


@pytest.mark.parametrize("pattern", WORK_WORDS + GONE)
def test_no_file_says(pattern: str) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for path, text in _texts()
        for m in re.finditer(pattern, text, re.IGNORECASE)
    ]
    assert not found, "\n".join(found)


def test_the_search_reads_the_package_and_the_docs() -> None:
    """The word list is checked against files that exist: the search finds them."""
    names = {p.relative_to(ROOT).as_posix() for p, _ in _texts()}
    assert "reliabilityd/rules/threshold.py" in names
    assert "docs/architecture.md" in names
    assert "README.md" in names
