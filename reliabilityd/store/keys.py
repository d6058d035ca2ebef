"""The Redis key schema: every key name reliabilityd reads or writes, in one place.

Every key of a suite lives under the Redis Cluster hash tag ``{<suite>}``::

    <p>:{<suite>}:meta        hash  trials errors skips duplicates version last_trial_at
    <p>:{<suite>}:tasks       hash  task -> "n:c" (window 0) or "n:c:<last W outcomes as 0/1>"
    <p>:{<suite>}:hist        hash  "n:c" -> number of tasks in that cell
    <p>:{<suite>}:lottery     zset  "%010d:%010d:<task>" (score 0) for tasks with 0 < c < n
    <p>:{<suite>}:trials      list  the trial log: one entry of records per apply chunk
    <p>:{<suite>}:recent      hash  task -> its last trials' records (store/_recent.py)
    <p>:{<suite>}:failures    list  "<task>\x1f<record>", the suite's last failures
    <p>:{<suite>}:runs        zset  run -> unix seconds of its last trial (store/_runs.py)
    <p>:{<suite>}:run         hash  run -> "<first> <last> <trials> <passes>"
    <p>:{<suite>}:run:<run>   hash  task -> "n:c", that run's own counts
    <p>:{<suite>}:dedup:<w>:<b>  set with TTL: digests of the (task, trial)s applied in
                              bucket b of the clock (b = floor(unix seconds / width w))
    <p>:{<suite>}:snapshot    hash  flat numbers for redis-cli, plus `json`
    <p>:{<suite>}:snapshot:h:k<k>     string  the suite's history at k: a header and records
                              in tiers that grow with the points (stats/history.py), TTL
                              refreshed by every point
    <p>:{<suite>}:snapshot:transitions  list  alert transitions (capped, newest last)
    <p>:{<suite>}:touched     zset  task -> time of its last event (suites with an idle expiry)
    <p>:{<suite>}:imported    hash  import ledger: digest of every imported (task, trial) -> 1
    <p>:{<suite>}:imports     hash  run id -> note of its first finished import
    <p>:{<suite>}:alert:<rule> hash alert rule state: seq, snap (its snapshot version), doc
    <p>:{<suite>}:alert:<rule>:baseline             hash  every task's counts at the breach start
    <p>:{<suite>}:alert:<rule>:outbox:<sink>        list  notifications not yet delivered
    <p>:{<suite>}:alert:<rule>:outbox:<sink>:lease  string  the daemon draining it
    <p>:{<suite>}:alert:<rule>:am-resend            string  Alertmanager re-send pacing
    <p>:{<suite>}:slices      hash  slice id -> unix seconds of its first event (the registry)
    <p>:{<suite>}:labels      set   label keys seen in the suite's events (at most LABELS_KEPT)
    <p>:{<suite>}:slice:<id>:<name>  a slice's own meta, tasks, hist, lottery, snapshot and
                              alert keys, the same as the suite's (``Keys.series``)

Change marks share the tag ``{/ci}`` (no suite can be named ``/ci``), so the
claim script can move a suite between them atomically::

    <p>:{/ci}:changed         set   suites whose data moved since their snapshot
    <p>:{/ci}:claims          zset  suite -> claim deadline (ms) of the replica recomputing it
    <p>:{/ci}:released        zset  suite -> when its last claim was released (ms), kept
                              for a minute so the reconcile does not re-mark it

The suite set and its quotas share the tag ``{/suites}``, so the admission
script counts a new suite against its grant and the deployment at once::

    <p>:{/suites}             set   every suite, at most stats.max_suites (the admit script)
    <p>:{/suites}:pool-of     hash  suite -> the pool it was admitted into ("" = shared)
    <p>:{/suites}:pools       hash  pool -> suites admitted into it

The summary rows the list-wide reads page through share the tag ``{/rows}``
(written after each tick's snapshots; ``store.rows``)::

    <p>:{/rows}               hash  series member -> its row (MessagePack ``store.Row``)
    <p>:{/rows}:version       hash  series member -> the snapshot version of its row
    <p>:{/rows}:names         zset  every suite (score 0, by name): rows or not yet
    <p>:{/rows}:states        hash  suite -> its state's index in ``ROW_STATES`` (1-based)
    <p>:{/rows}:state:<state> zset  the suites in that state (score 0, by name)

Outside any tag, written by separate idempotent commands:
``<p>:deadletter`` (the shared dead-letter stream) and ``<p>:deadletter:<grant>``
(one per ``[[grants]]`` entry), listed in ``<p>:deadletter-streams``;
``<p>:rejected:<minute>`` (dead letters by suite per minute),
``<p>:outbox-deadletter``, ``<p>:stats``,
``<p>:heartbeat:<instance>``, ``<p>:stream-cursor:<stream>:<group>``,
``<p>:dedup-width`` (the bucket width, fixed by the first writer) and
``<p>:dedup-ttls`` (the writers' dedup TTLs): see dedup.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import NamedTuple

CHANGES_TAG = "{/ci}"
SUITES_TAG = "{/suites}"
ROWS_TAG = "{/rows}"
# A suite's state in the rows, the state that needs a person most first; "none":
# no rule watches it.
ROW_STATES = ("firing", "pending", "undecodable", "resolved", "inactive", "none")
# Label keys kept per suite for ``status`` ("labels seen, not sliced").
LABELS_KEPT = 32
_BLAKE2B_16 = hashlib.blake2b(digest_size=16)


_GLOB_SPECIAL = frozenset("*?[]\\")


def glob_escape(text: str) -> str:
    """``text`` matched literally in a SCAN MATCH pattern."""
    return "".join("\\" + ch if ch in _GLOB_SPECIAL else ch for ch in text)


def digests(pairs: Iterable[tuple[str, str]]) -> list[bytes]:
    """16 bytes of BLAKE2b per (task, trial): the dedup records' and the import ledger's name.

    A fixed-size digest bounds a record's memory whatever the names.
    """
    # Copying a configured hash object costs less than making a new one.
    fresh = _BLAKE2B_16.copy
    out = []
    for task, trial in pairs:
        h = fresh()
        h.update(f"{task}\x00{trial}".encode())
        out.append(h.digest())
    return out


class Series(NamedTuple):
    """A suite as a whole (``slice`` None) or one slice of it (its canonical id)."""

    suite: str
    slice: str | None = None

    @property
    def member(self) -> str:
        """The series' name in the change marks: the suite, or ``<suite>/<slice id>``.

        Unambiguous: a suite name never holds ``/``.
        """
        return self.suite if self.slice is None else f"{self.suite}/{self.slice}"

    @classmethod
    def of_member(cls, member: str) -> Series:
        suite, sep, sid = member.partition("/")
        return cls(suite, sid if sep else None)

    @property
    def label(self) -> str:
        """For logs and messages: ``suite`` or ``suite[model=x]``."""
        return self.suite if self.slice is None else f"{self.suite}[{self.slice}]"


class Keys:
    """Key names under one prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def suite(self, suite: str, name: str) -> str:
        return f"{self.prefix}:{{{suite}}}:{name}"

    def series(self, series: Series, name: str) -> str:
        """One of a series' keys: the suite's own, or ``slice:<id>:<name>`` under its tag."""
        if series.slice is None:
            return self.suite(series.suite, name)
        return self.suite(series.suite, f"slice:{series.slice}:{name}")

    def slices(self, suite: str) -> str:
        """The suite's slice registry: slice id -> unix seconds of its first event."""
        return self.suite(suite, "slices")

    def labels(self, suite: str) -> str:
        """Label keys seen in the suite's events (at most ``LABELS_KEPT``)."""
        return self.suite(suite, "labels")

    def dedup_bucket(self, suite: str, width: int, bucket: int) -> str:
        """The set of the digests applied in one bucket (``width`` seconds) of the clock."""
        return self.suite(suite, f"dedup:{width}:{bucket}")

    @property
    def dedup_width(self) -> str:
        return f"{self.prefix}:dedup-width"

    @property
    def dedup_ttls(self) -> str:
        return f"{self.prefix}:dedup-ttls"

    def imported(self, suite: str) -> str:
        """The import ledger: digest of every imported (task, trial), never expiring."""
        return self.suite(suite, "imported")

    def imports(self, suite: str) -> str:
        """Run id -> note of its first finished import."""
        return self.suite(suite, "imports")

    def alert(self, suite: str, rule: str) -> str:
        return self.suite(suite, f"alert:{rule}")

    def baseline(self, suite: str, rule: str) -> str:
        """Every task's counts when the rule's latest breach began (a copy of ``tasks``)."""
        return self.suite(suite, f"alert:{rule}:baseline")

    def outbox(self, suite: str, rule: str, sink: str) -> str:
        return self.suite(suite, f"alert:{rule}:outbox:{sink}")

    def canary_view(self, suite: str, rule: str) -> str:
        """A canary rule's latest comparison (``rules.canary.CanaryView``), as JSON."""
        return self.suite(suite, f"alert:{rule}:view")

    def canary_points(self, suite: str, rule: str) -> str:
        """A canary rule's difference over time: minute -> MessagePack ``[t, value, lo, hi]``."""
        return self.suite(suite, f"alert:{rule}:points")

    def outbox_lease(self, suite: str, rule: str, sink: str) -> str:
        return self.outbox(suite, rule, sink) + ":lease"

    def am_resend(self, suite: str, rule: str) -> str:
        return self.alert(suite, rule) + ":am-resend"

    def snapshot(self, suite: str, slice: str | None = None) -> str:
        """A series' snapshot hash: the suite's, or one slice's (``slice:<id>:snapshot``)."""
        return self.suite(suite, "snapshot" if slice is None else f"slice:{slice}:snapshot")

    @staticmethod
    def history(snapshot: str, k: int) -> str:
        """The history string at ``k`` of the series whose snapshot hash is ``snapshot``.

        Named after the snapshot key, so every series with a snapshot has its
        history in the same hash slot.
        """
        return f"{snapshot}:h:k{k}"

    @staticmethod
    def transitions(snapshot: str) -> str:
        """The alert transitions of the series whose snapshot hash is ``snapshot``."""
        return f"{snapshot}:transitions"

    @property
    def suites(self) -> str:
        return f"{self.prefix}:{SUITES_TAG}"

    @property
    def suite_pools(self) -> str:
        return f"{self.prefix}:{SUITES_TAG}:pool-of"

    @property
    def pool_sizes(self) -> str:
        return f"{self.prefix}:{SUITES_TAG}:pools"

    @property
    def rows(self) -> str:
        return f"{self.prefix}:{ROWS_TAG}"

    @property
    def row_versions(self) -> str:
        return f"{self.prefix}:{ROWS_TAG}:version"

    @property
    def row_names(self) -> str:
        return f"{self.prefix}:{ROWS_TAG}:names"

    @property
    def row_states(self) -> str:
        return f"{self.prefix}:{ROWS_TAG}:states"

    def row_state(self, state: str) -> str:
        """The suites whose rows are in ``state`` (one of ``ROW_STATES``)."""
        return f"{self.prefix}:{ROWS_TAG}:state:{state}"

    @property
    def changed(self) -> str:
        return f"{self.prefix}:{CHANGES_TAG}:changed"

    @property
    def claims(self) -> str:
        return f"{self.prefix}:{CHANGES_TAG}:claims"

    @property
    def released(self) -> str:
        return f"{self.prefix}:{CHANGES_TAG}:released"

    @property
    def deadletter(self) -> str:
        """The shared dead-letter stream: letters of suites no grant owns, and of no suite."""
        return f"{self.prefix}:deadletter"

    def deadletter_of(self, grant: str | None) -> str:
        """The dead-letter stream of ``grant`` (a ``[[grants]]`` name), or the shared one."""
        return self.deadletter if not grant else f"{self.prefix}:deadletter:{grant}"

    @property
    def deadletter_streams(self) -> str:
        """The set of every dead-letter stream written (what the readers merge)."""
        return f"{self.prefix}:deadletter-streams"

    def rejected_minute(self, minute: int) -> str:
        """Dead letters by suite ("" = none named) in one minute (Unix time // 60)."""
        return f"{self.prefix}:rejected:{minute}"

    @property
    def outbox_deadletter(self) -> str:
        return f"{self.prefix}:outbox-deadletter"

    @property
    def stats(self) -> str:
        return f"{self.prefix}:stats"

    def heartbeat(self, instance: str) -> str:
        return f"{self.prefix}:heartbeat:{instance}"

    def stream_cursor(self, stream: str, group: str) -> str:
        return f"{self.prefix}:stream-cursor:{stream}:{group}"

    def probe(self, instance: str) -> str:
        return f"{self.prefix}:probe:{instance}"
