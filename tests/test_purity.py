"""The statistics core and the alert rule logic import no I/O (DESIGN.md: pure core)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PURE = [
    "estimators",
    "histogram",
    "bootstrap",
    "estimate",
    "lottery",
    "alerts",
    "snapshot",
    "intervals",
    "saddlepoint",
    "coverage",
]
BANNED = {"redis", "aiomqtt", "paho", "asyncio", "socket", "urllib", "http"}
PACKAGE = Path(__file__).resolve().parent.parent / "reliabilityd"


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_io(module: str) -> None:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & BANNED, f"{module} imports {imported & BANNED}"
