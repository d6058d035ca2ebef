"""The canary on ``student``: power near the fixed-time optimum, coverage at its level in
the canary study's cells, and no false page from identical agents judged every 5 s for two
simulated weeks once ``for`` is ten minutes. The study's cells, with its seeds
(``studies/canary.py``)."""

from __future__ import annotations

from studies.canary import page_cell, power_cell

SEED = 20261203


def test_student_has_most_of_the_optimums_power_where_gaffke_has_almost_none() -> None:
    # pass^1, correlated versions, 50 shared tasks: the study's third power cell.
    cell = power_cell(1, True, 50, reps=1000, seed=SEED + 1000, methods=("gaffke", "student"))
    print(cell)
    assert cell.ratio("student") >= 0.8
    assert cell.ratio("gaffke") < 0.2
    # Coverage at its level, within three standard errors (0.007 at 1,000 comparisons);
    # the side that pages (the upper bound under the truth) within its 2.5%.
    assert cell.coverage["student"] >= 0.95 - 3 * 0.007
    assert cell.under["student"] <= 0.025 + 3 * 0.005


def test_the_skewness_correction_gives_power_where_the_differences_lean() -> None:
    """pass^5 of correlated versions at 20 shared tasks (the study's seventh power cell):
    a drop that hits the hard tasks most leaves differences skewed toward it, which
    Johnson's correction follows; a symmetric t interval fires under 0.8x as often as
    the optimum here."""
    cell = power_cell(5, True, 20, reps=2000, seed=SEED + 6000, methods=("student",))
    print(cell)
    assert cell.ratio("student") >= 0.8
    # Standard errors at 2,000 comparisons: 0.005 for the coverage, 0.0035 for the side
    # that pages.
    assert cell.coverage["student"] >= 0.95 - 3 * 0.005
    assert cell.under["student"] <= 0.025 + 3 * 0.0035


def test_identical_agents_never_page_a_student_canary_held_for_ten_minutes() -> None:
    # pass^5 at 20 shared tasks: the one cell where single judgements breach.
    cell = page_cell(5, 20, days=14, seed=SEED + 7 + 1000 * 3)
    print(cell)
    assert cell.breaching > 0
    assert cell.pages[0.0] > 0
    assert cell.pages[600.0] == 0
