"""A gate re-run as trials arrive: ``--looks`` keeps the false passes of all looks within one's.

The looks study's cell for the default interval at 20 tasks and pass^5,
with its seed (``studies/looks.py``): ten looks five trials apart on the
same tasks, the threshold just above the true pass^5, so every pass is false.
"""

from __future__ import annotations

from studies.looks import CONFIDENCE, run_cell

ONE_LOOK_RISK = (1.0 - CONFIDENCE) / 2.0


def test_planned_looks_keep_the_false_pass_risk_of_one() -> None:
    result = run_cell(20, 5, "gaffke", reps=400, seed=20261202 + 1000)
    print(result)
    # Re-run at the nominal confidence, the gate passes falsely more often than one look may.
    assert result.any_look_nominal > ONE_LOOK_RISK
    # Each look at look_confidence(0.95, 10): all ten together within the one-look risk.
    assert result.any_look_adjusted <= ONE_LOOK_RISK
