"""``Store``: reliabilityd's view of Redis, one facade composed of parts.

Each part owns one concern and holds the client and the key schema; callers
reach a command through its part (``store.ingest.apply``,
``store.reads.read_state``, ``store.alerts.alert_cas``, ``store.history.read``,
``store.triggers.write``),
so a newcomer finds a command by what it is for. The parts are the only code that names a key
(``keys``) or sends a Redis command; the Lua scripts are in ``lua/``.
"""

from __future__ import annotations

from reliabilityd.store._admin import Admin
from reliabilityd.store._alerts import Alerts
from reliabilityd.store._base import Redis
from reliabilityd.store._history import Histories
from reliabilityd.store._imports import Imports
from reliabilityd.store._ingest import Ingest
from reliabilityd.store._reads import Reads
from reliabilityd.store._rows import Rows
from reliabilityd.store._snapshots import Snapshots
from reliabilityd.store._streams import Streams
from reliabilityd.store._triggers import Triggers
from reliabilityd.store.keys import Keys

__all__ = ["Store"]


class Store:
    """reliabilityd's view of Redis: the parts, over one client and one key prefix."""

    def __init__(self, client: Redis, prefix: str = "rel") -> None:
        self.client = client
        self.prefix = prefix
        self.keys = Keys(prefix)
        self.ingest = Ingest(client, self.keys)
        self.reads = Reads(client, self.keys)
        self.snapshots = Snapshots(client, self.keys)
        self.history = Histories(client, self.keys)
        self.alerts = Alerts(client, self.keys)
        self.triggers = Triggers(client, self.keys)
        self.streams = Streams(client, self.keys)
        self.imports = Imports(client, self.keys, self.ingest)
        self.rows = Rows(client, self.keys)
        self.admin = Admin(client, self.keys, self.rows)

    def key(self, suite: str, name: str) -> str:
        """The name of one of a suite's keys (for tools and tests)."""
        return self.keys.suite(suite, name)
