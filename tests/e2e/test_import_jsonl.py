"""Backfill in the wire format: JSON lines or a JSON array into a real Redis, once for good."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd.cli._main import main
from reliabilityd.events import TrialEvent
from reliabilityd.importers._import import ImportFileError, import_file
from reliabilityd.importers.wire import Pieces
from reliabilityd.store import Store
from tests.support.servers import RedisServer


def event(task: str, trial: str, outcome: str = "pass", suite: str = "s") -> dict[str, Any]:
    return {"suite": suite, "task": task, "trial": trial, "outcome": outcome}


GOOD = [
    event("a", "1"),
    event("a", "2", "fail"),
    event("b", "1", "error"),
    event("b", "2"),
    event("c", "1", suite="other"),
]
BAD = [
    (3, '{"suite": "s", "task": "a", "trial": "9", "outcome": "maybe"}', "maybe"),
    (5, '{"suite": "a/b", "task": "a", "trial": "9", "outcome": "pass"}', "suite contains"),
    (7, '{"suite": "s", "task": "a", "trial": ', "not valid JSON"),
]


def jsonl(tmp_path: Path) -> Path:
    """GOOD as lines, with BAD lines at their line numbers and a blank line."""
    lines = [json.dumps(e) for e in GOOD]
    for number, text, _ in BAD:
        lines.insert(number - 1, text)
    lines.insert(8, "")
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_jsonl_counts_good_lines_and_names_the_bad_ones(store: Store, tmp_path: Path) -> None:
    report = await import_file(store, jsonl(tmp_path))
    assert report.format == "events"
    assert (report.events, report.counted, report.errors, report.rejected) == (5, 4, 1, 3)
    assert report.suites == ["other", "s"]
    assert [r.split(":")[0] for r in report.rejections] == ["line 3", "line 5", "line 7"]
    for reason, (_, _, expected) in zip(report.rejections, BAD, strict=True):
        assert expected in reason
    assert await store.reads.task_counts("s") == {"a": (2, 1), "b": (1, 1)}
    assert await store.reads.task_counts("other") == {"c": (1, 1)}


async def test_a_json_array_is_the_same_events(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text(json.dumps([*GOOD, 7, event("", "x")], indent=2))
    report = await import_file(store, path)
    assert (report.format, report.counted, report.errors, report.rejected) == ("events", 4, 1, 2)
    assert await store.reads.task_counts("s") == {"a": (2, 1), "b": (1, 1)}
    # Element 6 is on line 32 of the indented dump ("[", then 6 lines per event).
    assert report.rejections[0].startswith("line 32:")
    assert "task is empty" in report.rejections[1]


async def test_a_second_import_counts_nothing_even_after_dedup_expired(
    store: Store, tmp_path: Path
) -> None:
    path = jsonl(tmp_path)
    first = await import_file(store, path)
    buckets = [k async for k in store.client.scan_iter(match=store.key("s", "dedup:*"))]
    await store.client.delete(*buckets)  # every live dedup record expired
    second = await import_file(store, path)
    assert (second.counted, second.errors, second.already) == (0, 0, 5)
    assert second.earlier is not None
    # The note of the first suite by name, "other": its one trial.
    assert (second.earlier["counted"], first.counted) == (1, 4)
    assert await store.reads.task_counts("s") == {"a": (2, 1), "b": (1, 1)}


async def test_trials_counted_live_are_duplicates(store: Store, tmp_path: Path) -> None:
    live = [TrialEvent("s", "a", "1", "pass"), TrialEvent("s", "a", "2", "fail")]
    await store.ingest.apply({"s": live}, windows={}, dedup_ttl=600)
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in GOOD[:4]))
    report = await import_file(store, path, dedup_ttl=600)
    assert (report.counted, report.duplicates) == (1, 2)
    assert await store.reads.task_counts("s") == {"a": (2, 1), "b": (1, 1)}


async def test_suite_option_renames_every_event(store: Store, tmp_path: Path) -> None:
    report = await import_file(store, jsonl(tmp_path), suite="nightly/gpt")
    assert report.suite == "nightly_gpt"
    assert await store.reads.task_counts("nightly_gpt") == {"a": (2, 1), "b": (1, 1), "c": (1, 1)}


async def test_an_array_never_closed_is_refused_after_counting_what_came(
    store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(GOOD)[:-30])
    with pytest.raises(ImportFileError, match="not closed"):
        await import_file(store, path, fmt="events")


def test_the_command_prints_rejections_and_exits_1(
    redis_server: RedisServer, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[redis]\nurl = "{redis_server.url}"\nprefix = "{prefix}"\n')
    path = jsonl(tmp_path)
    assert main(["import", str(path), "-c", str(config)]) == 1
    text = capsys.readouterr().out
    assert "into 2 suites" in text
    assert "3 rejected (not counted):" in text
    assert "  line 7: not valid JSON" in text
    assert main(["import", str(path), "-c", str(config), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["counted"], out["already"], out["rejected"]) == (0, 5, 3)


# --- the scanner -------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\]}[{, \n\u00e9'),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)


@given(st.lists(_json, max_size=6), st.sampled_from([None, 0, 2]), st.integers(1, 9))
def test_array_elements_are_cut_exactly_where_json_says(
    items: list[Any], indent: int | None, block: int
) -> None:
    """Every top-level element, whatever the block boundaries, with the line it starts on."""
    text = json.dumps(items, indent=indent)
    got = list(Pieces(io.BytesIO(text.encode()), "f", block=block))
    assert [json.loads(p) for _, p in got] == items
    lines = text.split("\n")
    for number, piece in got:
        first = piece.decode().split("\n")[0]
        assert first in lines[number - 1]


# --- bounded memory ------------------------------------------------------------


# The import command, then the process's own peak resident set (VmHWM, KiB).
# Not ru_maxrss: Linux carries it over from the forked image of the test
# process across exec, so a large pytest would hide the import's own peak.
_MEASURED = """
import sys
from reliabilityd.cli._main import main
code = main(sys.argv[1:])
status = open("/proc/self/status").read()
peak = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
print(f"VmHWM {peak}")
sys.exit(code)
"""


def _peak_rss_kib(args: list[str]) -> int:
    """Run ``reliabilityd <args>`` in a fresh interpreter; its own peak RSS in KiB."""
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURED, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=500,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return int(proc.stdout.rsplit("VmHWM ", 1)[1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
@pytest.mark.timeout(600)
def test_a_million_lines_import_in_bounded_memory(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    """Peak RSS importing 1,000,000 lines exceeds that of 10,000 lines by less than 8 MiB.

    10,000 lines fill one batch, the most an import holds; the million-line
    file is 69 MiB, and read whole, or held as events (about 200 bytes
    each), it would take many times the bound.
    """
    config = tmp_path / "c.toml"
    config.write_text(f'[redis]\nurl = "{redis_server.url}"\nprefix = "{prefix}"\n')
    sizes = {}
    for lines in (10_000, 1_000_000):
        path = tmp_path / f"{lines}.jsonl"
        with path.open("w") as f:
            for i in range(lines):
                task, trial = divmod(i, 10)
                outcome = "pass" if (task + trial) % 3 else "fail"
                f.write(
                    f'{{"suite":"big{lines}","task":"task-{task}","trial":"r{trial}",'
                    f'"outcome":"{outcome}"}}\n'
                )
        sizes[lines] = path.stat().st_size
        command = ["import", str(path), "-c", str(config)]
        sizes[-lines] = _peak_rss_kib(command)
    growth = sizes[-1_000_000] - sizes[-10_000]
    print(f"peak RSS: 10k lines {sizes[-10_000]} KiB, 1M lines {sizes[-1_000_000]} KiB")
    assert sizes[1_000_000] > 64 * 1024 * 1024
    assert growth < 8 * 1024, f"peak RSS grew {growth} KiB from 10k to 1M lines"
    again = subprocess.run(
        [sys.executable, "-m", "reliabilityd", *command, "--json"],
        capture_output=True,
        check=True,
        text=True,
    )  # the last command: the million lines
    second = json.loads(again.stdout)
    assert (second["counted"], second["already"]) == (0, 1_000_000)


def test_detection_reads_the_first_line_or_element_only() -> None:
    from reliabilityd.importers.wire import looks_like_wire

    line = json.dumps(GOOD[0]).encode()
    assert looks_like_wire(line + b"\n" + b"{not json")
    assert looks_like_wire(b"[" + line + b"," + line + b"]\n" + line)  # a batch per line
    assert looks_like_wire(json.dumps(GOOD, indent=2).encode())
    assert not looks_like_wire(json.dumps([{"task_id": 1, "trial": 0, "reward": 1.0}]).encode())
    nested = {"suite": "x", "cases": [{"task": "t", "trial": "1", "outcome": "pass"}]}
    assert not looks_like_wire(json.dumps(nested, indent=1).encode())
    assert not looks_like_wire(b"[" + b" " * 10 + line[:-5])  # the element does not end
