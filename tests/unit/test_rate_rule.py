"""The "rate" trigger's verdict (``rules.threshold``) and its state's advance
(``rules.views.rate``): an alarm is a breach for ``hold`` seconds, a firing alert
resolves at ``resolve_above``, and a state that is lost or kept under other settings
starts afresh."""

from __future__ import annotations

import itertools
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reliabilityd.config import load
from reliabilityd.errors import ConfigError
from reliabilityd.rules import views
from reliabilityd.rules.state import AlertState
from reliabilityd.rules.threshold import Observation, Rule, step, verdict
from reliabilityd.stats import ratecusum
from reliabilityd.store import Undecodable
from reliabilityd.store._documents import trigger_state_of

RATE = Rule(name="r", k=5, below=0.75, resolve_above=0.8, trigger="rate", hold=600.0)


def robs(
    alarmed_at: float | None, value: float = 0.85, *, low: float = 0.7, high: float = 0.95
) -> Observation:
    return Observation(
        value=value, ci_low=low, ci_high=high, tasks=50, runs=20, alarmed_at=alarmed_at
    )


@pytest.mark.parametrize(
    ("ob", "now", "expected"),
    [
        (robs(1000.0), 1000.0, "breach"),  # an alarm this tick
        (robs(1000.0), 1599.0, "breach"),  # within its hold
        (robs(1000.0), 1600.0, "clear"),  # past it, the estimate at resolve_above
        (robs(1000.0, value=0.78), 1600.0, "between"),  # past it, under resolve_above
        (robs(None), 0.0, "clear"),  # no alarm since the state started
        (robs(None, low=0.3), 0.0, "clear"),  # a low CI lower bound alone is no breach
        (robs(None, value=0.7, low=0.6, high=0.74), 0.0, "breach"),  # the whole CI under
    ],
)
def test_rate_verdicts(ob: Observation, now: float, expected: str) -> None:
    assert verdict(RATE, ob, now=now)[0] == expected


def test_unknown_and_min_tasks_come_first() -> None:
    unknown = Observation(value=None, ci_low=None, ci_high=None, tasks=50, runs=3, alarmed_at=0.0)
    assert verdict(RATE, unknown, now=0.0)[0] == "none"
    few = msgspec.structs.replace(RATE, min_tasks=60)
    assert verdict(few, robs(0.0), now=0.0)[0] == "none"


@given(
    st.lists(
        st.tuples(st.booleans(), st.floats(0.0, 1.0), st.floats(0.0, 900.0)),
        max_size=60,
    )
)
def test_notifications_alternate_and_match_their_reasons(
    seq: list[tuple[bool, float, float]],
) -> None:
    state, now, last = AlertState(), 0.0, None
    notes = []
    for alarm, value, gap in seq:
        now += gap
        last = now if alarm else last
        ob = robs(last, value, low=max(0.0, value - 0.1), high=min(1.0, value + 0.1))
        t = step(RATE, state, ob, now)
        if t.notify == "firing":
            assert (last is not None and now - last < RATE.hold) or value + 0.1 < RATE.below
        if t.notify == "resolved":
            assert value >= RATE.resolve_at
            assert last is None or now - last >= RATE.hold
        if t.notify:
            notes.append(t.notify)
        state = t.new
    assert all(a != b for a, b in itertools.pairwise(notes))
    assert not notes or notes[0] == "firing"


def test_the_rule_config_names_the_knobs(tmp_path: Path) -> None:
    rule = msgspec.toml.decode(
        b'name = "r"\nk = 5\nbelow = 0.75\ntrigger = "rate"\nbudget_days = 28\ngrid = 30\n'
        b"share = 0.1\nkill = 0.5\nprior = 2\nhalf_life = 43200\nhold = 120\n",
        type=Rule,
    )
    knobs = rule.knobs()
    assert (knobs.budget, knobs.grid, knobs.share, knobs.kill) == (28 * 86400.0, 30.0, 0.1, 0.5)
    assert (knobs.prior, knobs.half_life, rule.hold) == (2.0, 43200.0, 120.0)
    for bad in (
        b"share = 1",
        b"kill = 0",
        b"grid = 0.5",
        b"grid = 3601",
        b"hold = 0",
        b"budget_days = 0",
    ):
        with pytest.raises(msgspec.ValidationError):
            msgspec.toml.decode(b'name = "r"\nk = 5\nbelow = 0.75\n' + bad + b"\n", type=Rule)
    path = tmp_path / "c.toml"
    path.write_text(
        '[[alerts]]\nname = "r"\nk = 5\nbelow = 0.75\nmetric = "pass@k"\ntrigger = "rate"\n'
    )
    with pytest.raises(
        ConfigError, match=r"alerts\[0\]\.trigger.*rate trigger \(the default\) watches pass\^k"
    ):
        load(path, environ={})
    # Needs no window, which a detector rule does.
    path.write_text('[[alerts]]\nname = "r"\nk = 5\nbelow = 0.75\ntrigger = "rate"\n')
    assert load(path, environ={}).stats.window == 0
    # Knobs that would make the rule meaningless are refused, naming the key.
    for extra, field, words in (
        ("budget_days = 0.0001", "budget_days", "threshold of"),
        ("hold = 2", "hold", "shorter than stats.ci_interval"),
        ("for = 3600", "for", "not shorter than hold"),
    ):
        path.write_text(f'[[alerts]]\nname = "r"\nk = 5\nbelow = 0.75\n{extra}\n')
        with pytest.raises(ConfigError, match=words) as info:
            load(path, environ={})
        assert info.value.field == f"$.alerts[0].{field}"


def test_a_lost_damaged_or_resettled_state_starts_afresh() -> None:
    tasks, n, c = ["a", "b"], [10, 10], [9, 8]
    fresh = views.rate(RATE, None, tasks, n, c, version=3, now=100.0)
    assert (fresh.version, fresh.last, fresh.alarms) == (3, 100.0, 0)
    assert fresh.seen_n.tolist() == n
    doc = ratecusum.encode(fresh)
    # Stored: it goes on from there (two more fails of "a" are judged).
    stored = ratecusum.decode(doc)
    on = views.rate(RATE, stored, tasks, [12, 10], [9, 8], version=4, now=105.0)
    assert on is stored
    assert on.seen_n.tolist() == [12, 10]
    assert float(on.own[0]) > 0.0
    assert on.ref_n[0] > fresh.ref_n[0]
    # Kept under another `below`: a fresh state on these counts.
    other = msgspec.structs.replace(RATE, below=0.7)
    again = views.rate(other, ratecusum.decode(doc), tasks, [12, 10], [9, 8], version=4, now=105.0)
    assert again.seen_n.tolist() == [12, 10]
    assert np.all(again.own == 0.0)
    # Damaged: the store says so, and the daemon starts afresh.
    assert isinstance(trigger_state_of("k", b"\x00garbage"), Undecodable)
    assert trigger_state_of("k", None) is None


_VALID = ratecusum.encode(
    views.rate(RATE, None, ["a", "b", "c"], [10, 10, 4], [9, 8, 4], version=1, now=0.0)
)


def _with(at: int, value: object) -> bytes:
    """The valid state with one of its fields (in the stored order) replaced."""
    fields = msgspec.msgpack.decode(_VALID)
    fields[at] = value
    return msgspec.msgpack.encode(fields)


@given(
    st.one_of(
        st.binary(max_size=400),
        # A valid state with bytes flipped, cut or added: what a damaged store holds.
        st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255), st.integers(0, 3)).map(
            lambda x: (
                _VALID[: x[0]] + bytes([x[1]]) + _VALID[x[0] + 1 :],
                _VALID[: x[0]],
                _VALID + bytes([x[1]]) * x[2],
                _VALID[: x[0]] + _VALID[x[0] + 1 :],
            )[x[2]]
        ),
    )
)
@example(_with(6, [2**64 - 1, 1, 1]))  # counts past int64
@example(_with(6, [-(2**63), 1, 1]))
@example(_with(2, 1e18))  # started in the far future: never warm
@example(_with(3, 1e18))  # last judged in the far future: judging would follow it
@example(_with(16, -1))  # alarms
def test_whatever_the_store_holds_the_state_advances(doc: bytes) -> None:
    """A stored document is outside input: it decodes into a state or is undecodable,
    never an exception, and a decoded one advances (or, kept under other settings,
    starts afresh)."""
    got = trigger_state_of("k", doc)
    assert got is None or isinstance(got, (ratecusum.Tracker, Undecodable))
    state = got if isinstance(got, ratecusum.Tracker) else None
    t = views.rate(RATE, state, ["a", "b", "d"], [12, 11, 3], [10, 8, 1], version=2, now=30.0)
    assert t.last <= 30.0  # a state from a clock far ahead started afresh
    assert t.started <= 30.0
    assert t.tasks == ["a", "b", "d"]
    assert t.seen_n.tolist() == [12, 11, 3]
    assert np.isfinite(t.s)
    assert ratecusum.decode(ratecusum.encode(t)).tasks == t.tasks
