"""Redis: the only package that names a key or sends a command.

``Store`` is the facade every other layer talks to, composed of parts by
concern (ingest, reads, snapshots, alerts, streams, imports, admin). The
documents it keeps come back decoded once (``_documents``), as the records
of the layers below or as ``Undecodable``, never as bytes to parse again.
``Rows`` the summary rows the list-wide reads page through; ``keys`` is the key
schema, ``dedup`` the bucket sets that make counting idempotent, and the Lua
scripts live in ``lua/`` beside the module that loads them.
Whatever fails in Redis leaves the store as a ``StoreError`` (``_errors``):
no caller imports redis to catch it.
"""

from __future__ import annotations

from reliabilityd.store._alerts import Baseline
from reliabilityd.store._base import (
    DEFAULT_CONNECTIONS,
    Applied,
    Counters,
    DeadLetter,
    ImportApplied,
    Redis,
    StreamCursor,
    SuiteState,
    connect,
    url_problem,
)
from reliabilityd.store._documents import Undecodable, UndecodableLog
from reliabilityd.store._errors import (
    StoreCorrupt,
    StoreError,
    StoreRefused,
    StoreTimeout,
    StoreUnavailable,
)
from reliabilityd.store._ingest import Slicing
from reliabilityd.store._reads import TaskHashes, task_counts_of
from reliabilityd.store._recent import Recent, TaskTrials, TrialRecord, link, linked
from reliabilityd.store._rows import Gauges, Row, RowPage
from reliabilityd.store._runs import DEFAULT_RUNS, RunSummary
from reliabilityd.store._snapshots import SnapshotWrite
from reliabilityd.store._store import Store
from reliabilityd.store._triggers import TriggerInput
from reliabilityd.store.keys import ROW_STATES, Series

__all__ = [
    "DEFAULT_CONNECTIONS",
    "DEFAULT_RUNS",
    "ROW_STATES",
    "Applied",
    "Baseline",
    "Counters",
    "DeadLetter",
    "Gauges",
    "ImportApplied",
    "Recent",
    "Redis",
    "Row",
    "RowPage",
    "RunSummary",
    "Series",
    "Slicing",
    "SnapshotWrite",
    "Store",
    "StoreCorrupt",
    "StoreError",
    "StoreRefused",
    "StoreTimeout",
    "StoreUnavailable",
    "StreamCursor",
    "SuiteState",
    "TaskHashes",
    "TaskTrials",
    "TrialRecord",
    "TriggerInput",
    "Undecodable",
    "UndecodableLog",
    "connect",
    "link",
    "linked",
    "task_counts_of",
    "url_problem",
]
