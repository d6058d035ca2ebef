"""The canary rule's pure parts: verdicts, hysteresis, sides, config checks, the page."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from reliabilityd.alerting.notify import (
    Notification,
    alertmanager_alert,
    build_canary,
    describe,
)
from reliabilityd.config import Config, load
from reliabilityd.errors import ConfigError
from reliabilityd.rules import AlertState, Rule, canary
from reliabilityd.rules.canary import CanaryRule, Compare, Pair, SideRef
from reliabilityd.stats.compare import Comparison, Side, compare
from reliabilityd.stats.paired import Difference

RULE = CanaryRule(
    name="canary",
    compare=Compare(baseline={"suite": "prod"}, candidate={"suite": "canary"}),
    k=1,
    margin=0.05,
)


def cmp_with(high: float | None, *, metric: str = "pass^k") -> Comparison:
    """A comparison whose difference interval ends at `high` (None: UNKNOWN)."""
    diff = Difference(
        metric="pass^k" if metric == "pass^k" else "pass@k",
        k=1,
        value=None if high is None else high - 0.05,
        ci=None if high is None else (high - 0.1, high),
        baseline=None if high is None else 0.9,
        candidate=None if high is None else 0.85 + high,
        tasks=20,
        unknown_reason=None if high is not None else "UNKNOWN: too few shared tasks",
    )
    return Comparison(
        baseline="prod",
        candidate="canary",
        k=1,
        metric="pass^k",
        shared=20,
        only_baseline=0,
        only_candidate=0,
        min_shared=10,
        differences={"pass^k": diff},
        moved=[],
        unknown_reason=diff.unknown_reason,
    )


def run(rule: CanaryRule, highs: Sequence[float | None]) -> list[tuple[str, str | None]]:
    state = AlertState()
    out: list[tuple[str, str | None]] = []
    for i, high in enumerate(highs):
        t = canary.step(rule, state, cmp_with(high), now=1000.0 + i)
        state = t.new
        out.append((state.state, t.notify))
    return out


@pytest.mark.parametrize(
    ("high", "expected"),
    [
        (-0.2, ("breach", "worse")),
        (-0.0501, ("breach", "worse")),
        (-0.05, ("between", None)),  # equal to -margin is not a breach
        (-0.03, ("between", None)),
        (-0.025, ("clear", None)),  # resolve_margin defaults to margin / 2
        (0.1, ("clear", None)),
        (None, ("none", None)),
    ],
)
def test_verdicts_on_the_upper_bound(high: float | None, expected: tuple[str, str | None]) -> None:
    assert canary.verdict(RULE, cmp_with(high)) == expected


def test_fires_once_and_resolves_with_hysteresis() -> None:
    # Hovering between -margin and -margin/2 neither fires nor resolves.
    got = run(RULE, [0.0, -0.2, -0.2, -0.04, -0.03, -0.2, -0.01, -0.04, -0.2])
    assert [n for _, n in got] == [
        None,
        "firing",
        None,
        None,
        None,
        None,
        "resolved",
        None,
        "firing",
    ]
    assert got[4][0] == "firing"
    assert got[7][0] == "resolved"


def test_resolve_margin_sets_where_it_resolves() -> None:
    rule = msgspec.structs.replace(RULE, resolve_margin=0.0)
    got = run(rule, [-0.2, -0.01, 0.001])
    assert [n for _, n in got] == ["firing", None, "resolved"]


def test_for_and_repeat_behave_as_for_every_rule() -> None:
    rule = msgspec.structs.replace(RULE, for_seconds=2.0, repeat=2.0)
    got = run(rule, [-0.2, -0.2, -0.2, -0.2, -0.2, -0.2])
    assert [s for s, _ in got] == ["pending", "pending", "firing", "firing", "firing", "firing"]
    assert [n for _, n in got] == [None, None, "firing", None, "repeat", None]
    # A breach that does not hold for `for` never fires.
    assert [n for _, n in run(rule, [-0.2, 0.0, -0.2, 0.0])] == [None] * 4


def test_unknown_is_ignored_by_default_alerts_when_asked_and_never_resolves() -> None:
    assert run(RULE, [None, None]) == [("inactive", None)] * 2
    loud = msgspec.structs.replace(RULE, on_unknown="alert")
    assert run(loud, [None])[0] == ("firing", "firing")
    # UNKNOWN while firing holds the alert.
    assert [n for _, n in run(RULE, [-0.2, None, None, 0.0])] == [
        "firing",
        None,
        None,
        "resolved",
    ]


def counts(values: Sequence[int], n: int = 10) -> dict[str, tuple[int, int]]:
    return {f"task {i:02d}": (n, c) for i, c in enumerate(values)}


def test_identical_sides_do_not_breach() -> None:
    side = counts([10, 9, 7, 10, 5, 10, 8, 10, 10, 6, 9, 10, 10, 3, 10, 10, 9, 10, 10, 10])
    for metric in ("pass^k", "pass@k"):
        for k in (1, 3):
            rule = msgspec.structs.replace(RULE, metric=metric, k=k, margin=0.0)
            cmp = compare(side, dict(side), k, metric, n_boot=500)
            assert canary.verdict(rule, cmp) == ("clear", None)


def test_a_regression_breaches_and_the_page_names_the_worse_tasks() -> None:
    base = counts([10] * 20)
    # Gaffke's interval is wide at 20 tasks: half the tasks fall far.
    cand = counts([10] * 10 + [4, 3, 5, 2, 1, 6, 5, 3, 2, 0])
    rule = msgspec.structs.replace(RULE, top=3)
    cmp = compare(base, cand, 1, n_boot=500, top=len(cand), names=("prod", "canary"))
    assert canary.verdict(rule, cmp) == ("breach", "worse")
    t = canary.step(rule, AlertState(), cmp, now=1000.0)
    assert t.notify == "firing"
    state = msgspec.structs.replace(t.new, seq=1)
    note = build_canary(
        Config(), rule=rule, suite="canary", state=state, comparison=cmp, runs=10, now=1000.0
    )
    # Round trip as the outbox stores it.
    note = msgspec.json.decode(msgspec.json.encode(note), type=Notification)
    assert note.canary is not None
    assert [(m.task, m.baseline_c, m.candidate_c) for m in note.canary.worse] == [
        ("task 19", 10, 0),
        ("task 14", 10, 1),
        ("task 13", 10, 2),
    ]
    assert all((m.baseline_n, m.candidate_n) == (10, 10) for m in note.canary.worse)
    diff = cmp.difference()
    assert (note.value, note.ci_low, note.ci_high) == (diff.value, diff.ci_low, diff.ci_high)
    assert note.value == pytest.approx(-69 / 200)
    assert (note.below, note.resolve_above, note.tasks, note.runs) == (-0.05, -0.025, 20, 10)
    assert (note.canary.baseline_value, note.canary.candidate_value) == (
        diff.baseline,
        diff.candidate,
    )
    assert (note.id, note.reason, note.lottery) == ("canary/canary/1", "worse", [])
    text = describe(note)
    assert "'canary' - 'prod'" in text
    assert "task 19 (10/10 -> 0/10)" in text
    am = alertmanager_alert(note, now=1000.0, resend_interval=60.0)
    assert am["labels"]["baseline"] == "prod"
    assert am["labels"]["candidate"] == "canary"
    assert am["annotations"]["worse_tasks"].startswith("task 19 (10/10 -> 0/10), task 14")
    assert "lottery_cases" not in am["annotations"]


def test_too_few_shared_tasks_is_unknown_with_the_reason() -> None:
    base = counts([10] * 5)
    cmp = compare(base, dict(base), 1, min_shared=10)
    assert cmp.unknown
    loud = msgspec.structs.replace(RULE, on_unknown="alert")
    assert canary.verdict(loud, cmp) == ("breach", "unknown")
    t = canary.step(loud, AlertState(), cmp, now=1000.0)
    note = build_canary(
        Config(), rule=loud, suite="canary", state=t.new, comparison=cmp, runs=10, now=1000.0
    )
    assert note.value is None
    assert note.canary is not None
    assert note.canary.unknown_reason is not None
    assert "share 5 tasks" in describe(note)


def test_two_suites_pair_under_the_candidate_suite() -> None:
    assert canary.pairs(RULE, []) == [Pair("canary", SideRef("prod"), SideRef("canary"))]


def test_label_filters_pair_within_each_matching_suite() -> None:
    rule = CanaryRule(
        name="versions",
        suite="deploy-*",
        compare=Compare(
            baseline={"agent_version": "1.4"}, candidate={"agent_version": "1.5", "model": "m"}
        ),
        k=1,
    )
    got = canary.pairs(rule, ["deploy-a", "other", "deploy-b"])
    assert [p.home for p in got] == ["deploy-a", "deploy-b"]
    assert got[0].baseline == SideRef("deploy-a", (("agent_version", "1.4"),))
    assert got[0].candidate.label == "deploy-a[agent_version=1.5,model=m]"
    assert got[0].suites == frozenset({"deploy-a"})


def test_a_label_filtered_side_reads_the_slices_that_carry_its_labels() -> None:
    assert canary.side(SideRef("prod")) == Side("prod")
    ref = SideRef("deploy", (("agent_version", "1.5"), ("model", "")))
    assert canary.side(ref) == Side("deploy", {"agent_version": "1.5", "model": ""})
    assert ref.label == canary.side(ref).label == "deploy[agent_version=1.5,model=(none)]"


def test_an_unknown_comparison_breaches_with_on_unknown_alert() -> None:
    ref = SideRef("deploy", (("agent_version", "1.5"),))
    rule = msgspec.structs.replace(RULE, on_unknown="alert")
    cmp = canary.unknown(rule, Pair("deploy", SideRef("deploy"), ref), "UNKNOWN: why")
    assert canary.verdict(rule, cmp) == ("breach", "unknown")
    assert set(cmp.differences) == {"pass^k", "pass@k"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_both_forms_decode_beside_threshold_rules(tmp_path: Path) -> None:
    cfg = load(
        write(
            tmp_path,
            "[stats]\nwindow = 20\nslice_by = ['agent_version']\n"
            "[[alerts]]\nname = 'floor'\nk = 5\nbelow = 0.75\n"
            "[[alerts]]\nname = 'suites'\nk = 5\nfor = 30\n"
            "compare = { baseline = { suite = 'prod' }, candidate = { suite = 'canary' } }\n"
            "[[alerts]]\nname = 'versions'\nsuite = 'deploy-*'\nmetric = 'pass@k'\nk = 1\n"
            "margin = 0.1\nresolve_margin = 0.02\n"
            "compare = { baseline = { agent_version = '1.4' }, "
            "candidate = { agent_version = '1.5' } }\n",
        ),
        environ={},
    )
    assert [r.name for r in cfg.rules()] == ["floor"]
    assert isinstance(cfg.rules()[0], Rule)
    suites, versions = cfg.canaries()
    assert suites.compare == Compare({"suite": "prod"}, {"suite": "canary"})
    assert (suites.margin, suites.resolve_at, suites.for_seconds, suites.min_shared) == (
        0.05,
        0.025,
        30.0,
        10,
    )
    assert (versions.suite, versions.metric, versions.margin, versions.resolve_at) == (
        "deploy-*",
        "pass@k",
        0.1,
        0.02,
    )


def test_a_canary_may_judge_on_student_and_a_threshold_rule_may_not(tmp_path: Path) -> None:
    """``student`` needs a difference per task: a canary's interval, never a suite's."""
    canary_rule = (
        "[[alerts]]\nname = 'c'\nk = 1\ninterval = 'student'\nfor = 300\n"
        "compare = { baseline = { suite = 'prod' }, candidate = { suite = 'canary' } }\n"
    )
    (rule,) = load(write(tmp_path, canary_rule), environ={}).canaries()
    assert (rule.interval, rule.for_seconds) == ("student", 300.0)
    path = write(tmp_path, "[[alerts]]\nname = 'floor'\nk = 1\nbelow = 0.8\ninterval = 'student'\n")
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == "$.alerts[0].interval"
    assert str(path) in str(info.value)
    path = write(tmp_path, "[stats]\ninterval = 'student'\n")
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == "$.stats.interval"


@pytest.mark.parametrize(
    ("compare_table", "extra", "field", "words"),
    [
        (
            "{ baseline = { suite = 'prod' }, candidate = { agent_version = '1.5' } }",
            "",
            "$.alerts[0].compare.candidate",
            "name the suite on both sides",
        ),
        (
            "{ baseline = { suite = 'prod' }, candidate = { suite = 'canary' } }",
            "suite = 'deploy-*'\n",
            "$.alerts[0].suite",
            "leave `suite` out",
        ),
        (
            "{ baseline = { suite = 'prod' }, candidate = { suite = 'prod' } }",
            "",
            "$.alerts[0].compare",
            "the same side",
        ),
        (
            "{ baseline = { suite = 'prod' }, candidate = { suite = 'a/b' } }",
            "",
            "$.alerts[0].compare.candidate.suite",
            "{ } / + #",
        ),
        (
            "{ baseline = { suite = 'prod' }, candidate = { suite = 'canary' } }",
            "margin = 0.05\nresolve_margin = 0.1\n",
            "$.alerts[0].resolve_margin",
            "resolve_margin <= margin",
        ),
        (
            "{ baseline = { agent_version = '1.4' }, candidate = { agent_version = 1.5 } }",
            "",
            "$.alerts[0].compare.candidate[...]",
            "Expected `str`",
        ),
        (
            "{ baseline = { agent_version = '1.4' }, candidate = { agent_version = '1.5' } }",
            "",
            "$.alerts[0].compare.baseline",
            "filters by agent_version, and the suites matching '*' are not sliced by it",
        ),
        (
            "{ baseline = { suite = 'prod', model = 'a' }, candidate = { suite = 'canary' } }",
            "",
            "$.alerts[0].compare.baseline",
            "filters by model, and suite 'prod' is not sliced by it: add it to stats.slice_by",
        ),
        (
            "{ baseline = {}, candidate = { suite = 'canary' } }",
            "",
            "$.alerts[0].compare.baseline",
            "length >= 1",
        ),
        (
            "{ baseline = { suite = 'prod' }, candidates = { suite = 'canary' } }",
            "",
            "$.alerts[0].compare",
            "unknown field `candidates`",
        ),
        (
            "{ baseline = { suite = 'prod' }, candidate = { suite = 'canary' } }",
            "below = 0.5\n",
            "$.alerts[0]",
            "unknown field `below`",
        ),
        (
            "{ baseline = { suite = 'prod' }, candidate = { suite = 'canary' } }",
            "margin = 1.5\n",
            "$.alerts[0].margin",
            "< 1",
        ),
    ],
)
def test_bad_canary_rules_name_the_file_and_field(
    tmp_path: Path, compare_table: str, extra: str, field: str, words: str
) -> None:
    path = write(tmp_path, f"[[alerts]]\nname = 'c'\nk = 1\n{extra}compare = {compare_table}\n")
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == field
    assert str(path) in str(info.value)
    assert words in str(info.value)


def test_a_side_filters_only_by_labels_its_suites_are_sliced_by(tmp_path: Path) -> None:
    head = (
        "[stats]\nslice_by = ['agent_version']\n"
        "[[suites]]\nmatch = 'deploy-*'\nslice_by = ['model']\n"
        "[[alerts]]\nname = 'c'\nk = 1\n"
    )
    fine = [
        "suite = 'deploy-*'\ncompare = { baseline = { model = 'a' }, candidate = { model = 'b' } }",
        "compare = { baseline = { agent_version = '1' }, candidate = { agent_version = '2' } }",
        "compare = { baseline = { suite = 'deploy-a', model = 'a' },"
        " candidate = { suite = 'prod', agent_version = '2' } }",
    ]
    for rule in fine:
        load(write(tmp_path, head + rule + "\n"), environ={})
    # deploy-a is sliced by model alone (its [[suites]] entry), prod by agent_version.
    for rule, side in (
        (
            "compare = { baseline = { suite = 'deploy-a', agent_version = '1' },"
            " candidate = { suite = 'prod' } }",
            "baseline",
        ),
        (
            "compare = { baseline = { suite = 'deploy-a' },"
            " candidate = { suite = 'prod', model = 'b' } }",
            "candidate",
        ),
        (
            "suite = 'prod-*'\n"
            "compare = { baseline = { model = 'a' }, candidate = { model = 'b' } }",
            "baseline",
        ),
    ):
        with pytest.raises(ConfigError) as info:
            load(write(tmp_path, head + rule + "\n"), environ={})
        assert info.value.field == f"$.alerts[0].compare.{side}"


def test_rule_names_are_unique_across_both_kinds(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[stats]\nwindow = 20\n[[alerts]]\nname = 'c'\nk = 1\nbelow = 0.5\n"
        "[[alerts]]\nname = 'c'\nk = 1\n"
        "compare = { baseline = { suite = 'prod' }, candidate = { suite = 'canary' } }\n",
    )
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == "$.alerts[1].name"


def test_the_documented_canary_rules_load(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "alerts.md").read_text()
    section = doc[doc.index("## Canary rules") :]
    toml = section[section.index("```toml\n") + 8 : section.index("```\n", 8)]
    cfg = load(write(tmp_path, toml), environ={})
    suites, versions = cfg.canaries()
    assert (suites.name, suites.resolve_at, suites.for_seconds) == ("canary-regression", 0.025, 60)
    assert canary.side_parts(versions.compare.candidate) == (None, (("agent_version", "1.5"),))
