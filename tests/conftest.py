"""Shared fixtures: hypothesis profiles and a seeded RNG that shows its seed."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100
)
# In CI every run explores the same examples, so a red build is reproducible.
settings.register_profile(
    "ci", parent=settings.get_profile("default"), derandomize=True, max_examples=200
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

pytest_plugins = ["tests.support.servers"]


@pytest.fixture
def rng() -> np.random.Generator:
    """A numpy Generator whose seed shows in the captured output of a failing test.

    Set RELIABILITYD_TEST_SEED to replay a failure.
    """
    seed = int(os.environ.get("RELIABILITYD_TEST_SEED", secrets.randbits(32)))
    print(f"rng seed: RELIABILITYD_TEST_SEED={seed}")
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Each test leaves the root logger as it found it.

    ``reliabilityd run`` and the demo install a handler on the ``sys.stderr``
    of the moment, which under pytest is one test's capture: left in place,
    it writes "--- Logging error ---" into whichever test logs next.
    """
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
