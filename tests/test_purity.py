"""The statistics core and the alert rule logic import no I/O: a pure core, tested fast."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PURE = [
    "estimators",
    "histogram",
    "bootstrap",
    "estimate",
    "intervals",
    "saddlepoint",
    "lottery",
    "alerts",
    "detector",
    "snapshot",
    "rulestate",
    "pagesim",
    "pagerate",
    "coverage",
    "study_pages",
]
# Third-party and standard-library I/O, by top-level package ...
BANNED_PACKAGES = {
    "redis",
    "aiomqtt",
    "gmqtt",
    "paho",
    "aiohttp",
    "prometheus_client",
    "asyncio",
    "socket",
    "ssl",
    "urllib",
    "http",
    "subprocess",
}
# ... and the project's own I/O modules, by full name.
BANNED_MODULES = {
    f"reliabilityd.{name}"
    for name in (
        "store",
        "alertstore",
        "streamstore",
        "scripts",
        "keys",
        "mqtt",
        "mqtt_client",
        "streams",
        "sinks",
        "outbox",
        "evaluator",
        "watchdog",
        "daemon",
        "web",
        "metrics",
        "client",
        "emitter",
        "importers",
        "devservers",
        "embedded",
    )
}
PACKAGE = Path(__file__).resolve().parent.parent / "reliabilityd"


def imports_of(module: str) -> set[str]:
    """Every module a file imports, by full dotted name (``from x import y`` counts x and x.y)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_io(module: str) -> None:
    names = imports_of(module)
    bad = {n for n in names if n.split(".")[0] in BANNED_PACKAGES} | (names & BANNED_MODULES)
    assert not bad, f"{module} imports {sorted(bad)}"


def test_the_check_catches_an_own_io_module() -> None:
    # The daemon wires everything: the check must see its I/O imports.
    names = imports_of("daemon")
    assert names & BANNED_MODULES
    assert "redis.exceptions" in names
