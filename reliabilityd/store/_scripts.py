"""The Lua scripts reliabilityd runs in Redis, loaded from ``lua/`` beside this module.

Each script lives in its own ``.lua`` file with its KEYS and ARGV described at
its top; some are put together from parts here (the argument check in front
of APPLY, the shared ``forget`` function, the import guard). Every script
receives every key it touches in KEYS, and all of them share one hash tag,
so each runs unchanged on Redis Cluster. Scripts are sent with EVAL (Redis
caches them by hash; redis-py refuses pipelined EVALSHA on a cluster), so a
SCRIPT FLUSH or a Redis restart never leaves a NOSCRIPT behind.
"""

from __future__ import annotations

from importlib import resources

__all__ = [
    "ADMIT",
    "ALERT_CAS",
    "APPLY",
    "CLAIM",
    "CURSOR_MAX",
    "DROP_ROWS",
    "EXPIRE_IDLE",
    "FOLD",
    "FORGET",
    "IMPORT_APPLY",
    "LEASE",
    "LOTTERY",
    "MARK_UNCLAIMED",
    "OUTBOX_POP",
    "READ",
    "READ_WINDOWS",
    "RELEASE",
    "RELEASE_CLAIMS",
    "ROW_STATES",
    "WRITE_ROWS",
    "WRITE_SNAPSHOT",
]


def _lua(name: str) -> str:
    """The script file without its comment lines and indentation.

    Redis hashes the whole body on every EVAL; for a chunk of one event that
    hash is about a tenth of the call's cost.
    """
    body = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")
    lines = (line.strip() for line in body.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("--")) + "\n"


_APPLY_CHECK = _lua("apply_check")
_APPLY = _lua("apply")
# What the import guard (import_filter) tells APPLY; nothing outside an import.
APPLY = _APPLY_CHECK + "local origin, gone = nil, {}\n" + _APPLY
ADMIT = _lua("admit")
RELEASE = _lua("release")
READ = _lua("read")
READ_WINDOWS = _lua("read_windows")
WRITE_SNAPSHOT = _lua("write_snapshot")
WRITE_ROWS = _lua("write_rows")
ROW_STATES = _lua("row_states")
DROP_ROWS = _lua("drop_rows")
ALERT_CAS = _lua("alert_cas")
TRIGGER_CAS = _lua("trigger_cas")
TRIGGER_READ = _lua("trigger_read")
OUTBOX_POP = _lua("outbox_pop")
LEASE = _lua("lease")
LOTTERY = _lua("lottery")
CLAIM = _lua("claim")
RELEASE_CLAIMS = _lua("release_claims")
MARK_UNCLAIMED = _lua("mark_unclaimed")
CURSOR_MAX = _lua("cursor_max")
FOLD = _lua("fold")
_FORGET_ONE = _lua("forget_one")
FORGET = _FORGET_ONE + _lua("forget")
EXPIRE_IDLE = _FORGET_ONE + _lua("expire_idle")
IMPORT_APPLY = _lua("import_ledger") + _APPLY_CHECK + _lua("import_filter") + _APPLY_CHECK + _APPLY
