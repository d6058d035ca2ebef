"""Which names validation accepts: nothing MQTT refuses, nothing invisible, NFC only."""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reliabilityd.events import TrialEvent, all_valid, validate
from reliabilityd.importers.trials import suite_name, task_name
from reliabilityd.names import NAME_FORBIDDEN

NONCHARACTERS = [*range(0xFDD0, 0xFDF0)] + [
    plane << 16 | low for plane in range(17) for low in (0xFFFE, 0xFFFF)
]


def _suite(name: str) -> str | None:
    return validate(TrialEvent(name, "t", "1", "pass"))


def test_every_noncharacter_surrogate_control_and_format_character_is_refused() -> None:
    assert len(NONCHARACTERS) == 66
    refused = [
        code
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Cs", "Zl", "Zp")
        or code in NONCHARACTERS
    ]
    missed = [f"U+{c:04X}" for c in refused if not NAME_FORBIDDEN.search(chr(c))]
    assert missed == []
    # And nothing else: the letters, marks, symbols and spaces of every script pass.
    extra = [
        f"U+{c:04X}"
        for c in range(sys.maxunicode + 1)
        if NAME_FORBIDDEN.search(chr(c))
        and c not in refused
        and unicodedata.category(chr(c)) != "Cn"  # Cf characters of a later Unicode
    ]
    assert extra == []


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("a\uffff", "a Unicode noncharacter U+FFFF"),
        ("a\ufdd0", "a Unicode noncharacter U+FDD0"),
        ("a\U0010fffe", "a Unicode noncharacter U+10FFFE"),
        ("a\ud800", "a surrogate U+D800"),
        ("a\x00", "a control character U+0000"),
        ("a\x85", "a control character U+0085"),
        ("ad\u200bmin", "an invisible format character U+200B"),
        ("a\u202eb", "an invisible format character U+202E"),
        ("a\u2066b", "an invisible format character U+2066"),
        ("\ufeffa", "an invisible format character U+FEFF"),
        ("a\u2028b", "an invisible format character U+2028"),
        ("suite ", "begins or ends with white space"),
        ("\u3000suite", "begins or ends with white space"),
        ("e\u0301", "not in Unicode normalization form NFC"),
    ],
)
def test_a_refused_name_says_which_character_and_why(name: str, reason: str) -> None:
    problem = _suite(name)
    assert problem is not None
    assert reason in problem
    assert validate(TrialEvent("s", name, "1", "pass")) is not None
    assert validate(TrialEvent("s", "t", name, "pass")) is not None
    assert not all_valid([TrialEvent("s", "t", "1", "pass"), TrialEvent(name, name, name, "pass")])


@pytest.mark.parametrize(
    "name",
    ["\u00e9", "caf\u00e9 au lait", "Привет", "日本語", "a b", "emoji \U0001f600", "x\u00a0y"],
)
def test_names_in_any_script_pass(name: str) -> None:
    assert _suite(name) is None
    assert all_valid([TrialEvent(name, name, name, "pass")])


names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20) | st.text(
    st.sampled_from(" a\u00e9e\u0301\u200b\ufffe\x00\x85\u3000"), min_size=1, max_size=6
)


# One name of each kind the checks refuse (in any field; the last two in a suite only).
REFUSED = ["a\x00b", "a\x1fb", "a\x7fb", "a\x85b", "a\ufffeb", "a\ud800b", "a\u200bb",
           "a\u2028b", " a", "a ", "e\u0301", ""]  # fmt: skip
SUITE_REFUSED = ["a#b", "a{b"]


@pytest.mark.parametrize("bad", REFUSED + SUITE_REFUSED)
@pytest.mark.parametrize("place", [0, 1, 2])
def test_each_kind_of_bad_name_is_refused_by_the_event_and_the_batch_check(
    bad: str, place: int
) -> None:
    triple = ["good", "name", "here"]
    triple[place] = bad
    suite, task, trial = triple
    event = TrialEvent(suite, task, trial, "pass")
    refused = bad in REFUSED or place == 0
    assert (validate(event) is not None) == refused
    assert all_valid([TrialEvent("fine", "t", "r", "pass"), event]) == (not refused)


def each_refused(test: Callable[..., None]) -> Any:
    """``test`` with each bad name in each field, beside a good event, in every run: the
    batch check's one scan over the names joined by NUL must agree with the event check."""
    for bad in REFUSED + SUITE_REFUSED:
        for place in range(3):
            triple = ["good", "name", "here"]
            triple[place] = bad
            test = example([("fine", "t", "r"), tuple(triple)])(test)
    return test


@each_refused
@given(st.lists(st.tuples(names, names, names), min_size=1, max_size=5))
def test_the_batch_check_agrees_with_the_event_check(triples: list[tuple[str, str, str]]) -> None:
    events = [TrialEvent(s.replace("/", "_"), t, r, "pass") for s, t, r in triples]
    each = all(validate(e) is None for e in events)
    assert all_valid(events) == each


def test_imported_names_are_made_valid() -> None:
    for raw in ("a\uffffb", "e\u0301", " x\u200b ", "a\u202eb/c", "\ud800"):
        assert _suite(suite_name(raw)) is None, raw
        assert validate(TrialEvent("s", task_name(raw), "1", "pass")) is None, raw
