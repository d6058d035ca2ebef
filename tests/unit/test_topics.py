"""Suite-to-topic binding (mqtt.bind_suite): parsing, matching, coverage, the bound decode."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from reliabilityd.config import load
from reliabilityd.errors import ConfigError
from reliabilityd.events import MAX_LETTERS
from reliabilityd.topics import Binding, decode_bound, emitter_topic


def _event(suite: str, trial: str = "1") -> dict[str, str]:
    return {"suite": suite, "task": "t", "trial": trial, "outcome": "pass"}


def test_last_level_binds_the_topics_last_level() -> None:
    b = Binding.parse("last-level")
    assert b.suite_of("reliability/trials/teamA") == "teamA"
    assert b.suite_of("teamA") == "teamA"
    assert b.suite_of("reliability/trials/") == ""
    assert b.topic_for("teamA") is None


def test_a_pattern_binds_its_suite_level_and_needs_the_rest() -> None:
    b = Binding.parse("tenants/+/trials/{suite}")
    assert b.suite_of("tenants/x/trials/teamA") == "teamA"
    assert b.suite_of("tenants/x/trials/teamA/more") is None
    assert b.suite_of("tenants/x/other/teamA") is None
    assert b.topic_for("teamA") is None  # the + level is the publisher's
    fixed = Binding.parse("reliability/{suite}/trials")
    assert fixed.suite_of("reliability/teamA/trials") == "teamA"
    assert fixed.topic_for("teamA") == "reliability/teamA/trials"


@pytest.mark.parametrize(
    "spec",
    ["", "reliability/trials", "a/{suite}/{suite}", "a/x{suite}", "a/#/{suite}", "a/b+/{suite}"],
)
def test_bad_bindings_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match=r"level|pattern"):
        Binding.parse(spec)


@pytest.mark.parametrize(
    ("spec", "topic_filter", "covered"),
    [
        ("last-level", "reliability/trials/#", True),
        ("last-level", "reliability/trials/+", True),
        ("last-level", "reliability/trials/emit", False),
        ("reliability/trials/{suite}", "reliability/trials/#", True),
        ("reliability/trials/{suite}", "reliability/#", True),
        ("reliability/trials/{suite}", "#", True),
        ("reliability/trials/{suite}", "reliability/trials/+", True),
        ("reliability/trials/{suite}", "+/trials/+", True),
        ("reliability/trials/{suite}", "reliability/trials/teamA", False),
        ("reliability/trials/{suite}", "reliability/other/#", False),
        ("reliability/trials/{suite}", "reliability/trials/+/x", False),
        ("reliability/trials/{suite}", "reliability/trials", False),
        ("a/+/{suite}", "a/b/+", False),
        ("a/+/{suite}", "a/+/+", True),
    ],
)
def test_the_subscription_must_cover_every_bound_topic(
    spec: str, topic_filter: str, covered: bool
) -> None:
    assert (Binding.parse(spec).uncovered(topic_filter) is None) is covered


def test_the_config_check_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[mqtt]\nbind_suite = "reliability/trials"\n')
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == "$.mqtt.bind_suite"
    path.write_text(
        '[mqtt]\ntopic = "reliability/x/#"\nbind_suite = "reliability/trials/{suite}"\n'
    )
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == "$.mqtt.topic"
    assert "must receive every topic" in str(info.value)
    path.write_text('[mqtt]\nbind_suite = "reliability/trials/{suite}"\n')
    assert load(path, environ={}).mqtt.bind_suite == "reliability/trials/{suite}"


def test_each_element_is_held_to_its_topic() -> None:
    b = Binding.parse("last-level")
    mixed = msgspec.json.encode([_event("a", "1"), _event("b", "2"), _event("a", "3")])
    alone = msgspec.json.encode(_event("b", "4"))
    good, bad = decode_bound(
        [(mixed, "mqtt:r/t/a"), (alone, "mqtt:r/t/b"), (alone, "mqtt:r/t/a")], b
    )
    assert sorted((e.suite, e.trial) for e in good) == [("a", "1"), ("a", "3"), ("b", "4")]
    reasons = [r.reason for r, _ in bad]
    classes = {r.reason_class for r, _ in bad}
    assert reasons == [
        "topic 'r/t/a' binds suite 'a', not 'b' (mqtt.bind_suite 'last-level')",
        "topic 'r/t/a' binds suite 'a', not 'b' (mqtt.bind_suite 'last-level')",
    ]
    assert [source for _, source in bad] == ["mqtt:r/t/a", "mqtt:r/t/a"]
    assert classes == {"topic_mismatch"}
    # The letter holds the element itself.
    assert msgspec.json.decode(bad[0][0].raw)["suite"] == "b"


def test_a_suites_events_keep_their_order_and_invalid_ones_keep_their_reason() -> None:
    b = Binding.parse("r/{suite}")
    payloads = [(msgspec.json.encode(_event("a", str(i))), "mqtt:r/a") for i in range(5)]
    payloads.insert(2, (b'{"suite": "a"}', "mqtt:r/a"))
    good, bad = decode_bound(payloads, b)
    assert [e.trial for e in good] == ["0", "1", "2", "3", "4"]
    assert [r.reason_class for r, _ in bad] == ["missing_field"]
    good, bad = decode_bound([(msgspec.json.encode(_event("a")), "mqtt:elsewhere/a")], b)
    assert good == []
    assert bad[0][0].reason.startswith("topic 'elsewhere/a' names no suite")


def test_mismatched_events_yield_a_bounded_number_of_letters() -> None:
    b = Binding.parse("last-level")
    many = msgspec.json.encode([_event("other", str(i)) for i in range(500)])
    good, bad = decode_bound([(many, "mqtt:r/mine"), (many, "mqtt:r/mine")], b)
    assert good == []
    assert len(bad) == MAX_LETTERS + 1
    assert "990 more events" in bad[-1][0].reason
    assert bad[-1][0].reason_class == "topic_mismatch"


@pytest.mark.parametrize(
    ("topic_filter", "bind", "topic"),
    [
        ("reliability/trials/#", "", "reliability/trials/emit"),
        ("reliability/trials/x", "", "reliability/trials/x"),
        ("reliability/trials/+", "", None),
        ("reliability/trials/#", "last-level", "reliability/trials/{suite}"),
        ("reliability/trials/+", "last-level", "reliability/trials/{suite}"),
        ("+/trials/#", "last-level", None),
        ("#", "t/{suite}", "t/{suite}"),
        ("#", "t/+/{suite}", None),
    ],
)
def test_the_emitter_topic_for_a_config(topic_filter: str, bind: str, topic: str | None) -> None:
    assert emitter_topic(topic_filter, bind) == topic
