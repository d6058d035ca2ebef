"""The store decodes what it keeps, once: no other module of the package decodes a snapshot
or an alert state, and the store's decoding gives the record back or ``Undecodable``.

Readers take the store's records (``store.snapshots.documents``,
``store.alerts.alert_states``) and handle ``store.Undecodable``; a decoder
written anywhere else would bring back a second error policy.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from reliabilityd.rules import AlertState
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Undecodable
from reliabilityd.store._documents import alert_state_of, snapshot_of

PACKAGE = Path(__file__).resolve().parents[2] / "reliabilityd"
STORE = PACKAGE / "store"
# A msgspec decode, Decoder or convert call whose arguments name a stored document's
# record: `json.decode(raw, type=Snapshot)`, `msgpack.Decoder(AlertState)`,
# `Decoder(list[snapshot.Snapshot])`, over several lines too.
CALL = re.compile(
    r"\b(?:decode|Decoder|convert)\((?:[^()]|\([^()]*\))*?\b(Snapshot|AlertState)\b"
    r"(?:[^()]|\([^()]*\))*\)",
    re.S,
)


def _decoders(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [
        f"{path.relative_to(PACKAGE.parent)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for m in CALL.finditer(text)
    ]


def test_no_module_outside_the_store_decodes_a_snapshot_or_an_alert_state() -> None:
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if STORE not in path.parents
        for hit in _decoders(path)
    ]
    assert not found, "\n".join(found)


def test_the_search_finds_the_stores_own_decoders() -> None:
    """The pattern matches real decoders: the store's two are found by it."""
    found = "\n".join(_decoders(STORE / "_documents.py"))
    assert "Decoder(Snapshot)" in found
    assert "Decoder(AlertState)" in found


def test_the_search_finds_each_shape_a_decoder_had() -> None:
    for line in (
        "_snapshot_decoder = msgspec.json.Decoder(Snapshot)",
        "snap = None if raw is None else msgspec.json.decode(raw, type=Snapshot)",
        "kept[one] = msgspec.json.decode(\n    raw, type=snapshot.Snapshot\n)",
        "msgspec.convert(doc, type=list[AlertState])",
        "msgspec.msgpack.decode(raw, type=dict[str, Snapshot])",
    ):
        assert CALL.search(line), line
    assert not CALL.search("msgspec.json.decode(raw, type=Note)")
    assert not CALL.search("msgspec.json.encode(snap)  # a Snapshot")


def _snapshot() -> snapshot.Snapshot:
    hist = Histogram.from_pairs([(4, 3), (4, 4), (4, 1)])
    settings = snapshot.StatsSettings(ks=(1, 2), n_boot=100)
    return snapshot.build(
        suite="s",
        hist=hist,
        trials=12,
        errors=0,
        skips=0,
        duplicates=0,
        version=7,
        settings=settings,
        estimates=snapshot.full_estimates(hist, settings),
        lottery_k=2,
        lottery_rows=[],
        now=1_000_000.0,
    )


def test_a_stored_snapshot_comes_back_as_the_record_it_was() -> None:
    snap = _snapshot()
    ci, _ = snapshot.redis_fields(snap)
    assert snapshot_of("k", str(ci["json"]).encode()) == snap
    assert snapshot_of("k", None) is None


@pytest.mark.parametrize(
    "raw",
    [b"", b"{cut", b"[]", b'{"schema": 99}', b'{"schema": 1, "suite": 3}', "\u2603".encode()],
)
def test_anything_else_is_undecodable_with_its_key_and_why(raw: bytes) -> None:
    got = snapshot_of("rel:{s}:snapshot", raw)
    assert isinstance(got, Undecodable)
    assert (got.document, got.key) == ("snapshot", "rel:{s}:snapshot")
    assert got.error


def test_an_alert_state_keeps_its_compare_and_set_fields_decodable_or_not() -> None:
    doc = msgspec.json.encode(AlertState(state="firing", started_at=5.0, seq=1))
    state = alert_state_of("a", b"4", b"9", doc)
    assert state == AlertState(state="firing", started_at=5.0, seq=4, snapshot_version=9)
    assert alert_state_of("a", None, None, None) == AlertState()
    bad = alert_state_of("a", b"4", b"9", b'{"state": "on fire"}')
    assert isinstance(bad, Undecodable)
    assert bad == Undecodable("alert_state", "a", bad.error, seq=4, snapshot_version=9)
    assert "state" in bad.error
    wrong = alert_state_of("a", b"four", b"9", doc)
    assert isinstance(wrong, Undecodable)
    assert (wrong.seq, wrong.snapshot_version) == (0, -1)
