"""The suite gauges' exposition text: what prometheus parses from it, and its per-suite cache."""

from __future__ import annotations

import time
from math import inf, nan

import msgspec
import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from benchmarks._line_text import LineText
from reliabilityd.alerting.notify import parse_time
from reliabilityd.daemon._metrics_text import SuiteText, SuiteView, Summary, _number, _texts
from reliabilityd.daemon._rows import row_of
from reliabilityd.daemon.metrics import ALERT_STATES
from reliabilityd.rules import AlertState
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Gauges, Row
from reliabilityd.store._rows import Compact

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parsed(body: bytes) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out
            out[key] = s.value
    return out


def snap_of(suite: str, pairs: list[tuple[int, int]], now: float, ks: tuple[int, ...]) -> Snapshot:
    hist = Histogram.from_pairs(pairs)
    settings = snapshot.StatsSettings(ks=ks, n_boot=200)
    return snapshot.build(
        suite=suite,
        hist=hist,
        trials=int((hist.n * hist.count).sum()),
        errors=0,
        skips=0,
        duplicates=0,
        version=3,
        settings=settings,
        estimates=snapshot.full_estimates(hist, settings),
        lottery_k=max(ks),
        lottery_rows=[],
        now=now,
        last_trial_at=now - 30.0,
    )


def expected(view: SuiteView) -> Samples:
    """The samples straight from the snapshots, as the gauges are documented."""
    out: Samples = {("reliabilityd_redis_up", ()): 1.0}
    for snap in view.snapshots:
        assert isinstance(snap, Snapshot)
        for metric, ests in (("pass_at_k", snap.pass_at_k), ("pass_hat_k", snap.pass_hat_k)):
            for e in ests:
                labels: tuple[tuple[str, str], ...] = (("k", str(e.k)), ("suite", snap.suite))
                out[(f"reliabilityd_{metric}_unknown", labels)] = float(e.value is None)
                if e.value is not None:
                    out[(f"reliabilityd_{metric}_ratio", labels)] = e.value
                if e.ci is not None:
                    out[(f"reliabilityd_{metric}_ci_lower_ratio", labels)] = e.ci[0]
                    out[(f"reliabilityd_{metric}_ci_upper_ratio", labels)] = e.ci[1]
        out[("reliabilityd_tasks", (("suite", snap.suite),))] = float(snap.tasks)
        last = parse_time(snap.last_trial_at)
        assert last is not None
        out[("reliabilityd_last_trial_age_seconds", (("suite", snap.suite),))] = view.read_at - last
    for suite, rule, state in view.alerts:
        for s in ALERT_STATES:
            out[("reliabilityd_alert_state", (("rule", rule), ("state", s), ("suite", suite)))] = (
                float((state if isinstance(state, str) else state.state) == s)
            )
    for sink, depth in view.outbox.items():
        out[("reliabilityd_outbox_depth", (("sink", sink),))] = float(depth)
    return out


def test_suite_text_is_the_snapshots_and_is_formatted_once_per_change() -> None:
    rng = np.random.default_rng(5)
    now = float(int(time.time()))  # whole seconds: the snapshot keeps milliseconds
    names = ["plain", 'quote " and \\ back', "short"]
    snaps: list[Summary] = [
        snap_of(
            name,
            [(int(n), int(rng.integers(0, n + 1))) for n in rng.integers(1, 20, 30)],
            now,
            (1, 5),
        )
        for name in names
    ]
    firing = AlertState(state="firing")
    view = SuiteView(snaps, [(names[1], "r", firing)], {"mqtt": 2}, redis_up=True, read_at=now)
    text = SuiteText()
    text.view = view
    body = text.render()
    assert parsed(body) == expected(view)
    assert any(e.unknown for s in snaps if isinstance(s, Snapshot) for e in s.pass_hat_k)
    # Nothing new: the very bytes served before.
    assert text.render() is body
    # One suite has a new snapshot, one is gone: only what changed is new.
    changed = snap_of("plain", [(10, 9)] * 12, now + 1.0, (1, 5))
    later = SuiteView([changed, snaps[1]], [], {}, redis_up=True, read_at=now + 1.0)
    text.view = later
    again = parsed(text.render())
    assert again == expected(later)
    assert ("reliabilityd_tasks", (("suite", "short"),)) not in again


def test_without_a_view_only_redis_up() -> None:
    text = SuiteText()
    assert parsed(text.render()) == {("reliabilityd_redis_up", ()): 0.0}
    text.view = SuiteView([], [], {}, redis_up=False, read_at=0.0)
    assert parsed(text.render()) == {("reliabilityd_redis_up", ()): 0.0}


def test_a_view_of_rows_is_the_text_of_their_snapshots(rng: np.random.Generator) -> None:
    """/metrics reads the summary rows: each row exposes what its snapshot would."""
    now = float(int(time.time()))
    snaps = [
        snap_of(
            name,
            [(int(n), int(rng.integers(0, n + 1))) for n in rng.integers(1, 20, 30)],
            now,
            (1, 5),
        )
        for name in ("a", "b")
    ]
    rows: list[Summary] = [row_of(s, [], None, now) for s in snaps]
    alerts: list[tuple[str, str, AlertState | str]] = [("a", "r", "pending")]
    of_snaps = SuiteView(list[Summary](snaps), alerts, {}, redis_up=True, read_at=now)
    of_rows = SuiteView(rows, alerts, {}, redis_up=True, read_at=now)
    text = SuiteText()
    text.view = of_rows
    assert parsed(text.render()) == expected(of_snaps)


def random_rows(rng: np.random.Generator, count: int) -> list[Row]:
    """Rows of every shape the text must say: ks apart, values unknown, intervals
    missing, numbers an exponent writes (tiny, huge, negative, not finite), labels that
    need escaping, slices with and without their counts, times absent or unreadable."""
    specials = [0.0, -0.0, 1.0, 1e-4, 9.99e-5, 3e-7, 1e16, 2.5e17, -0.25, nan, inf, -inf, 0.5]
    names = ["plain", 'quote " in', "back \\ slash", "new\nline", "nul \x00 in", "ünï", "x"]

    def number() -> float | None:
        pick = rng.random()
        if pick < 0.1:
            return None
        if pick < 0.25:
            return specials[int(rng.integers(len(specials)))]
        return float(rng.random())

    def estimates() -> list[Compact]:
        ks = sorted({int(k) for k in rng.integers(1, 12, int(rng.integers(0, 4)))})
        return [(k, number(), number(), number(), 3, 4, 0) for k in ks]

    rows = []
    for i in range(count):
        suite = f"{names[i % len(names)]}-{i}"
        last = [None, "", "not a time", f"2026-12-02T10:{i % 60:02d}:05.250Z"][int(rng.integers(4))]
        counts = rng.random() < 0.3
        rows.append(
            Row(
                suite=suite,
                slice=None if rng.random() < 0.6 else names[int(rng.integers(len(names)))],
                version=1,
                updated_at=f"2026-12-02T10:00:{i % 60:02d}Z",
                k=None,
                value=None,
                ci=None,
                tasks=int(rng.integers(0, 10**6)),
                last_trial_at=last,
                pass_at_k=estimates(),
                pass_hat_k=estimates(),
                slices=int(rng.integers(0, 9)) if counts else 0,
                slice_overflow=int(rng.integers(0, 99)) if counts else 0,
            )
        )
    return rows


def test_the_text_of_random_rows_is_the_line_at_a_time_text_byte_for_byte() -> None:
    """The column-at-a-time text says what the line-at-a-time one says, to the byte,
    for rows as /metrics decodes them (``Gauges``) and as the daemon writes them."""
    rng = np.random.default_rng(28)
    rows = random_rows(rng, 400)
    blob = msgspec.msgpack.encode(rows)
    alerts: list[tuple[str, str, AlertState | str]] = [
        (rows[0].suite, "r", "firing"),
        (rows[1].suite, 'q"uote', AlertState(state="pending")),
    ]
    for decoded in (
        msgspec.msgpack.Decoder(list[Gauges]).decode(blob),
        msgspec.msgpack.Decoder(list[Row]).decode(blob),
    ):
        wholes: list[Summary] = [r for r in decoded if r.slice is None]
        parts: list[Summary] = [r for r in decoded if r.slice is not None]
        new, old = SuiteText(), LineText()
        for at, changed in ((2e9, 0), (2e9 + 7.5, 0), (2e9 + 9.0, 40)):
            # A new snapshot of some series: their row changes, the others stay.
            for j in range(changed):
                wholes[j] = msgspec.structs.replace(
                    wholes[j], updated_at="later", tasks=j, pass_hat_k=[]
                )
            view = SuiteView(
                list(wholes),
                alerts,
                {"s": 3},
                redis_up=True,
                read_at=at,
                slice_snapshots=list(parts),
            )
            new.view = old.view = view
            body = new.render()
            assert body == old.render()
            families = list(text_string_to_metric_families(body.decode()))
            names = [f.name for f in families]
            assert len(names) == len(set(names))  # each family once, its samples together
            assert sum(len(f.samples) for f in families) == body.count(b"\n") - 2 * len(names)


def test_numbers_that_are_no_float_are_written_as_floats() -> None:
    """An int or a numpy scalar among a batch's numbers: each written as its float."""
    numbers = [1, 0.5, True, np.float64(0.1), 3e-5]
    assert _texts(numbers) == [b"1.0\n", b"0.5\n", b"1.0\n", b"0.1\n", b"3e-05\n"]
    assert _texts([0.5, nan, 1e16]) == [b"0.5\n", b"NaN\n", b"1e+16\n"]
    assert _texts([1, 0.5]) == [b"1.0\n", b"0.5\n"]


@given(
    st.lists(st.floats(), min_size=1)
    | st.lists(st.floats(0, 1), min_size=1)  # what the gauges hold
    | st.lists(st.floats(0, 1e-3), min_size=1)  # fixed point in JSON, an exponent in repr
)
@example([0.5, 0.25, 1.0])  # every number plain: the text is taken whole
@example([0.5, 9.5e-05, 0.0001])
@example([0.5, 1e16 - 2, 1e15, -0.0, 0.0])
def test_a_batch_of_numbers_is_written_as_each_number_alone(numbers: list[float]) -> None:
    """Whether the encoded batch is taken whole or mended number by number, each number
    reads as ``repr`` writes it (``NaN``, ``+Inf`` and ``-Inf`` as the format spells them)."""
    assert _texts(numbers) == [_number(x) + b"\n" for x in numbers]


def test_gauges_read_each_field_at_its_row_position() -> None:
    """``Gauges`` decodes a row's bytes: each of its fields sits where ``Row`` has it."""
    gauges, row = Gauges.__struct_fields__, Row.__struct_fields__
    assert row[: len(gauges)] == gauges
    rows = random_rows(np.random.default_rng(3), 20)
    for r in rows:
        g = msgspec.msgpack.decode(msgspec.msgpack.encode(r), type=Gauges)
        for name in ("suite", "slice", "updated_at", "tasks", "last_trial_at", "rules"):
            assert getattr(g, name) == getattr(r, name)
        for metric in ("pass_at_k", "pass_hat_k"):  # the same bytes: NaN is no NaN's equal
            assert msgspec.msgpack.encode(getattr(g, metric)) == msgspec.msgpack.encode(
                getattr(r, metric)
            )
        assert (g.slices, g.slice_overflow) == (r.slices, r.slice_overflow)
