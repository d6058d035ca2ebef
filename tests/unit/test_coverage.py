"""The coverage study: its truths, its intervals against the library's, a small grid."""

from __future__ import annotations

import numpy as np
import pytest

from reliabilityd import estimate
from reliabilityd.stats.estimators import metric_cells
from reliabilityd.stats.intervals import intervals
from studies.coverage import (
    POPULATIONS,
    Component,
    Population,
    from_json_lines,
    intervals_for_block,
    study_cell,
    summary_table,
    to_json_lines,
)


def population(name: str) -> Population:
    return next(p for p in POPULATIONS if p.name == name)


@pytest.mark.parametrize("pop", POPULATIONS, ids=lambda p: p.name)
@pytest.mark.parametrize("k", [1, 3, 5])
def test_truth_is_the_population_moment(pop: Population, k: int) -> None:
    p = pop.sample(np.random.default_rng(k), (400_000,))
    hat = float(np.mean(p**k))
    at = float(np.mean(1.0 - (1.0 - p) ** k))
    # 400,000 draws of a [0, 1] variable: standard error below 0.0008.
    assert pop.truth("pass^k", k) == pytest.approx(hat, abs=0.004)
    assert pop.truth("pass@k", k) == pytest.approx(at, abs=0.004)


def test_beta_moment_is_exact() -> None:
    # E[p^2] of Beta(2, 3) = (2 * 3) / (5 * 6); E[(1 - p)^2] = (3 * 4) / (5 * 6).
    comp = Component(1.0, beta=(2.0, 3.0))
    assert comp.moment(2, failure=False) == pytest.approx(0.2)
    assert comp.moment(2, failure=True) == pytest.approx(0.4)


@pytest.mark.parametrize("name", ["percentile", "gaffke"])
def test_study_intervals_are_the_library_intervals(name: str, rng: np.random.Generator) -> None:
    """Same statistic, vectorised: bounds agree within the resampling noise of B = 20,000."""
    passes = [rng.binomial(10, rng.beta(3, 1, 30)) for _ in range(4)]
    values = np.stack([metric_cells("pass^k", np.full(30, 10), c, 3) for c in passes])
    lo, hi = intervals_for_block(values, 20_000, 0.95, rng, (name,))[name]
    for i, c in enumerate(passes):
        est = estimate([(10, int(x)) for x in c], 3, "pass^k", n_boot=20_000, seed=i, interval=name)
        assert est.ci is not None
        sd = float(values[i].std()) / np.sqrt(30)
        # MC sd of a 2.5% bound with B = 20,000 is ~0.02 sds for each of the two.
        assert abs(est.ci[0] - lo[i]) < 0.15 * sd + 1e-9
        assert abs(est.ci[1] - hi[i]) < 0.15 * sd + 1e-9


def test_the_studys_gaffke_draw_takes_the_librarys_order_statistic(
    rng: np.random.Generator,
) -> None:
    """At B = 2000, over 60 suites: no offset between the two on average (the plain quantile
    would sit 0.13 sds inside), each within the two draws' noise."""
    passes = [rng.binomial(10, rng.beta(3, 1, 40)) for _ in range(60)]
    values = np.stack([metric_cells("pass^k", np.full(40, 10), c, 3) for c in passes])
    lo, hi = intervals_for_block(values, 2000, 0.95, rng, ("gaffke",))["gaffke"]
    offsets = []
    for i, c in enumerate(passes):
        est = estimate([(10, int(x)) for x in c], 3, "pass^k", seed=i)
        assert est.ci is not None
        assert est.method == "exact-draw"
        sd = float(values[i].std()) / np.sqrt(40)
        offsets += [(lo[i] - est.ci[0]) / sd, (est.ci[1] - hi[i]) / sd]
    # Each bound's draw wanders by 0.06 sds: the difference of two by 0.085.
    assert np.abs(offsets).max() < 0.4
    assert abs(float(np.mean(offsets))) < 0.04


def test_the_studys_binary_gaffke_is_the_librarys_exact_bound(rng: np.random.Generator) -> None:
    """Every task at 0 or 1 (n = k = 5), or every task at one value: the very floats."""
    c = rng.binomial(5, rng.beta(3, 1, (30, 25)))
    values = np.concatenate(
        [
            metric_cells("pass^k", np.full_like(c, 5), c, 5),
            metric_cells("pass@k", np.full_like(c, 5), c, 5),
            np.full((3, 25), 0.6),
            np.zeros((1, 25)),
            np.ones((1, 25)),
        ]
    )
    lo, hi = intervals_for_block(values, 2000, 0.95, rng, ("gaffke",))["gaffke"]
    for i, row in enumerate(values):
        count = np.ones(row.size, dtype=np.int64)
        (ci,) = intervals(
            [(row, count)], "gaffke", confidence=0.95, n_boot=2000, rngs=[np.random.default_rng(0)]
        )
        assert ci.method == "exact"
        assert (lo[i], hi[i]) == (ci.low, ci.high)


def test_a_small_grid_shows_the_failure_and_the_fix() -> None:
    """Beta(5, 1), 20 tasks x 20 trials, pass@5: percentile misses 95%, gaffke covers."""
    rows = study_cell(
        population("Beta(5, 1)"),
        20,
        20,
        (5,),
        reps=600,
        rng=np.random.default_rng(7),
        names=("percentile", "gaffke", "bca"),
    )
    by = {(r.metric, r.interval): r for r in rows}
    # BCa corrects skew in the resamples, but no resample holds the missing failures.
    assert by[("pass@k", "bca")].coverage < 0.85
    # 600 suites: a standard error of ~0.02 at 0.5 coverage, ~0.009 at 0.95.
    assert by[("pass@k", "percentile")].coverage < 0.7
    assert by[("pass@k", "percentile")].above > 0.3  # wholly above the truth
    assert by[("pass@k", "gaffke")].coverage > 0.93
    assert by[("pass^k", "gaffke")].coverage > 0.93
    # Honest, not uselessly wide: a fifth of the unit interval at most here.
    assert by[("pass@k", "gaffke")].median_width < 0.2


def test_mostly_reliable_mix_is_covered_at_t_20() -> None:
    rows = study_cell(
        population("mostly reliable 80% 0.98, 20% Beta(2, 2)"),
        20,
        5,
        (1, 3, 5),
        reps=600,
        rng=np.random.default_rng(8),
    )
    for r in rows:
        if r.interval == "gaffke":
            assert r.coverage > 0.93, r
    assert min(r.coverage for r in rows if r.interval == "percentile") < 0.9


def test_results_round_trip_and_tabulate() -> None:
    rows = study_cell(population("all p = 0.9"), 20, 5, (1,), reps=50, rng=np.random.default_rng(9))
    assert from_json_lines(to_json_lines(rows)) == rows
    table = summary_table(rows)
    assert "| all p = 0.9 | 20 |" in table
    assert table.count("\n") == 2


def test_the_command_prints_the_tables(capsys: pytest.CaptureFixture[str]) -> None:
    from studies.coverage import main

    assert main(reps=30, quick=True, only="all p = 0.9") == 0
    out = capsys.readouterr().out
    assert "30 suites per cell" in out
    assert "| all p = 0.9 | 20 |" in out
    assert "| all p = 0.98 |" not in out  # an exact name picks one population
