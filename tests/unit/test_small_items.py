"""What a new user meets in the first hour: each message says the right thing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reliabilityd import MissingEstimate
from reliabilityd.client.emitter import Emitter
from reliabilityd.config import load
from reliabilityd.errors import ConfigError
from reliabilityd.importers._import import ImportReport, describe
from reliabilityd.stats.estimate import estimate_metrics
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.snapshot import StatsSettings, build


def config_error(tmp_path: Path, text: str) -> ConfigError:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    return info.value


RULE = """
[[alerts]]
name = "deep"
suite = "other-*"
k = 50
below = 0.5
"""


def test_a_window_shorter_than_a_rules_k_names_the_rule(tmp_path: Path) -> None:
    err = config_error(tmp_path, f'[[suites]]\nmatch = "deploy-*"\nwindow = 10\n{RULE}')
    assert err.field == "$.suites[0].window"
    assert "window 10 is shorter than k=50 ($.alerts[0].k, rule 'deep')" in str(err)
    err = config_error(tmp_path, f"[stats]\nwindow = 10\n{RULE}")
    assert "window 10 is shorter than k=50 ($.alerts[0].k, rule 'deep')" in str(err)
    err = config_error(tmp_path, "[stats]\nk = [1, 20]\nwindow = 10\n")
    assert "window 10 is shorter than k=20 (in $.stats.k)" in str(err)


@pytest.mark.parametrize(
    ("extras", "message"),
    [
        ({"trial": 7}, "trial must be a str, got int 7 (pass str(7))"),
        ({"ts": "now"}, "ts must be Unix seconds (a float), got str 'now'"),
        ({"labels": ["a"]}, "labels must be a dict, got list"),
    ],
)
def test_the_emitter_names_the_field_of_the_wrong_type(
    extras: dict[str, object], message: str
) -> None:
    emitter = Emitter()  # not started: the event is checked before anything is sent
    with pytest.raises(TypeError) as info:
        emitter.emit("s", "t", "pass", **extras)  # type: ignore[arg-type]
    assert str(info.value) == message
    with pytest.raises(TypeError, match="task must be a str, got int 3"):
        emitter.emit("s", 3, "pass")  # type: ignore[arg-type]


def test_the_emitter_rejects_a_millisecond_ts() -> None:
    with pytest.raises(ValueError, match=r"milliseconds\?"):
        Emitter().emit("s", "t", "pass", ts=1764460800500)


def report(errors: int) -> ImportReport:
    return ImportReport(
        suite="s",
        run="r",
        format="tau-bench",
        file="f.json",
        events=1,
        counted=1,
        errors=errors,
        skips=1,
        duplicates=0,
        already=0,
    )


def test_counts_are_pluralised() -> None:
    line = describe(report(1))
    assert "1 event, 1 counted trial, 1 error, 1 skip, 0 duplicates" in line
    assert "2 errors" in describe(report(2))


def test_a_k_the_snapshot_lacks_is_not_a_missing_suite() -> None:
    hist = Histogram([5, 5], [3, 5], [1, 1])
    settings = StatsSettings(ks=(1, 5), n_boot=50)
    ests = [e for k in settings.ks for e in estimate_metrics(hist, k, n_boot=50).values()]
    snap = build(
        suite="deploy-bot",
        hist=hist,
        trials=10,
        errors=0,
        skips=0,
        duplicates=0,
        version=1,
        settings=settings,
        estimates=ests,
        lottery_k=5,
        lottery_rows=[],
        now=0.0,
    )
    assert snap.estimate("pass^k", 5).k == 5
    assert snap.get("pass^k", 3) is None
    with pytest.raises(MissingEstimate) as info:
        snap.estimate("pass^k", 3)
    assert isinstance(info.value, KeyError)
    assert str(info.value) == (
        "the snapshot of 'deploy-bot' has pass^k at k = 1, 5, not k=3: "
        "Client.estimate('deploy-bot', 3) computes it from the histogram"
    )
    with pytest.raises(ValueError, match="metric must be"):
        snap.get("pass_k", 5)


def test_a_forked_child_draws_its_own_backoff_jitter() -> None:
    """Jitter exists so that reconnecting processes spread out: a child forked from a
    process that imported reliabilityd must not repeat its parent's draws."""
    script = (
        "import os\n"
        "from reliabilityd.backoff import Backoff\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "delay = Backoff(start=1.0, cap=1.0, jitter=0.5).next_delay()\n"
        "if pid == 0:\n"
        "    os.write(w, repr(delay).encode())\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print(delay, float(os.read(r, 64)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    parent, child = map(float, out.stdout.split())
    assert parent != child
