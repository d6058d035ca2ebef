"""Every verb ends quietly when its reader goes away (``reliabilityd status | head``).

No ``BrokenPipeError`` traceback and no "Exception ignored" line: the entry
point ends with 141, the code a shell gives a program that SIGPIPE ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reliabilityd.cli._common import EXIT_PIPE
from reliabilityd.events import TrialEvent
from tests.support.query import apply, config_for
from tests.support.servers import Mosquitto, RedisServer

RULES = '[[alerts]]\nname = "r"\nsuite = "*"\nk = 1\nbelow = 0.5\ntrigger = "ci-low"\n'


def closed_reader(*argv: str) -> tuple[int, str]:
    """(exit code, stderr) of the verb, its standard output closed before it writes."""
    with subprocess.Popen(
        [sys.executable, "-m", "reliabilityd", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()  # the reader is gone: the verb's first write finds no one
        err = proc.stderr.read()
        return proc.wait(timeout=60), err


@pytest.mark.timeout(300)
def test_every_verb_ends_quietly_on_a_closed_pipe(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    cfg = config_for(redis_server, prefix)
    # Enough tasks that `tasks` writes while it runs, not only at its final flush.
    apply(
        cfg, [TrialEvent("s", f"task {i}", str(j), "pass") for i in range(2000) for j in range(2)]
    )
    apply(cfg, [TrialEvent("gone", "t", "1", "pass")])
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    named = tmp_path / "named.toml"
    named.write_text('external_url = "https://rel.example.com"\n')
    events = tmp_path / "events.jsonl"
    events.write_text('{"suite": "s", "task": "t", "trial": "1", "outcome": "pass"}\n')
    r = ["--redis", redis_server.url, "--prefix", prefix]
    # argparse itself ignores a closed output for --help: quiet, and 0.
    assert closed_reader("--help") == (0, "")
    verbs = [
        ["status", *r],
        ["status", "s", *r],
        ["tasks", "s", *r],
        ["cases", "s", "--k", "2", *r],
        ["history", "s", *r],
        ["compare", "s", "s", "--k", "1", "--min-shared", "1", *r],
        ["gate", "s", "--k", "1", "--at-least", "0.1", *r],
        ["rejected", *r],
        ["forecast", "s", "-c", str(rules), "--hours", "0.1", *r],
        ["check", *r],
        ["import", str(events), *r],
        ["emit", "s", "t", "pass", "--mqtt", mosquitto.url],
        ["ui", "-c", str(named)],
        ["endpoints", *r],
        ["forget", "s", "task 0", "--yes", *r],
        ["reset", "gone", "--yes", *r],
    ]
    for argv in verbs:
        code, err = closed_reader(*argv)
        assert code == EXIT_PIPE, (argv, code, err)
        assert err == "", (argv, err)


def test_a_listing_piped_to_head_prints_its_first_line_and_nothing_else(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = config_for(redis_server, prefix)
    # About 200 KB of lines: more than a pipe holds, so `tasks` writes after head is gone.
    apply(cfg, [TrialEvent("s", f"task {i}", "1", "pass") for i in range(12_000)])
    done = subprocess.run(
        [
            "bash",
            "-c",
            'set -o pipefail; "$0" -m reliabilityd tasks s --redis "$1" --prefix "$2" | head -1',
            sys.executable,
            redis_server.url,
            prefix,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
        check=False,
    )
    assert (done.returncode, done.stdout.split(), done.stderr) == (
        EXIT_PIPE,
        ["TASK", "N", "C"],
        "",
    )
