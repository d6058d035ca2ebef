"""Redis: the only package that names a key or sends a command.

``Store`` is the facade every other layer talks to; ``keys`` is the key
schema, ``dedup`` the bucket sets that make counting idempotent, and the Lua
scripts live beside the module that runs them.
"""

from __future__ import annotations

from reliabilityd.store._store import (
    Applied,
    Counters,
    DeadLetter,
    Redis,
    Store,
    StreamCursor,
    SuiteState,
    connect,
)

__all__ = [
    "Applied",
    "Counters",
    "DeadLetter",
    "Redis",
    "Store",
    "StreamCursor",
    "SuiteState",
    "connect",
]
