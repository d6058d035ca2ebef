"""Shared fixtures: the Hypothesis profiles and a seeded RNG that shows its seed.

Every run of `make test` or `make check`, in CI or not, uses the `default`
Hypothesis profile: derandomised (the examples follow from each test
function) and bounded, and the `rng` fixture seeds from the test's node id,
so a run explores the same cases on every machine and a red build replays.
Exploring is `make fuzz`'s job: with ``RELIABILITYD_FUZZ=1`` the `fuzz`
profile draws random seeds and many examples, and `rng` draws a fresh seed.
"""

from __future__ import annotations

import logging
import os
import secrets
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# Set by `make fuzz`: random seeds everywhere, many examples.
FUZZ = os.environ.get("RELIABILITYD_FUZZ", "") not in ("", "0")

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=100,
    derandomize=True,
    # No example database: what a run explores never depends on earlier runs.
    database=None,
    print_blob=True,
)
settings.register_profile(
    "fuzz",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=int(os.environ.get("RELIABILITYD_FUZZ_EXAMPLES", "1000")),
    derandomize=False,
    print_blob=True,
)
settings.load_profile("fuzz" if FUZZ else "default")

pytest_plugins = ["tests.support.servers"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "seeded: the test draws from the `rng` fixture")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `make fuzz` selects the tests with something random to explore.
    for item in items:
        if "rng" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.seeded)


def seed_of(nodeid: str) -> int:
    """The seed `rng` uses for a test outside `make fuzz`: stable across runs and machines."""
    return zlib.crc32(nodeid.encode())


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A numpy Generator whose seed shows in the captured output of a failing test.

    The seed follows from the test's node id (a fresh one under `make fuzz`);
    set RELIABILITYD_TEST_SEED to replay a failure or to try another seed.
    """
    given = os.environ.get("RELIABILITYD_TEST_SEED", "")
    if given:
        seed = int(given)
    elif FUZZ:
        seed = secrets.randbits(32)
    else:
        seed = seed_of(request.node.nodeid)
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
