"""The demo's live view lists every rule kind as ``status`` does: a threshold rule, a
slice rule as ``<rule>[<slice>]`` and a canary on both of its sides, read from Redis
through the registry (real redis-server, a daemon with its HTTP port)."""

from __future__ import annotations

from functools import partial

import msgspec
from rich.console import Console

from reliabilityd.embedded import liveview
from reliabilityd.rules import Rule
from tests.integration.test_rule_surfaces import (
    BASELINE,
    CANARY,
    CANDIDATE,
    GOOD,
    SLICE_NAME,
    SLICE_RULE,
    SLICED,
    TASKS,
    _config,
    _firing,
    _trials,
)
from tests.support.daemon import store_for
from tests.support.helpers import commit_all, current_snapshot, wait_until
from tests.support.http import serving
from tests.support.servers import RedisServer

# A threshold rule on the baseline's suite, which passes every trial: it stays inactive.
PLAIN = Rule(name="prod-low", suite=BASELINE, k=1, below=0.5, trigger="ci-low")


async def test_the_live_view_lists_threshold_slice_and_canary_rules(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix)
    cfg = msgspec.structs.replace(cfg, alerts=[*cfg.alerts, PLAIN])
    async with serving(cfg), store_for(cfg) as store:
        await commit_all(
            cfg,
            [
                *_trials(BASELINE, [10] * TASKS),
                *_trials(CANDIDATE, [10] * (TASKS - 16) + [2] * 16),
                *_trials(SLICED, [0] * 4, model="bad"),
                *_trials(SLICED, [10] * 36, model="good"),
            ],
        )
        await wait_until(partial(_firing, store), 60)
        await current_snapshot(store, SLICED)
        views = {v.suite: v for v in await liveview.read(store, cfg.alerts)}

        async def canary_noted() -> bool:
            notes = await liveview.new_notes(store, cfg.alerts_key, 0)
            return any(not isinstance(n, str) and n.trigger == "canary" for n in notes)

        # The demo prints the history's notifications: a canary's in its own terms, and an
        # entry that is no rule's notification as a line that says so.
        await wait_until(canary_noted, 60)
        await store.alerts.append_alert_history(cfg.alerts_key, b'{"alert": "other"}', 100)
        lines = [liveview.note_line(n) for n in await liveview.new_notes(store, cfg.alerts_key, 0)]

    def states(suite: str) -> dict[str, str]:
        return {name: liveview.state_name(s) for name, s in views[suite].alerts}

    good = f"{SLICE_RULE.name}[{GOOD}]"
    assert states(BASELINE) == {CANARY.name: "firing", PLAIN.name: "inactive"}
    assert states(CANDIDATE) == {CANARY.name: "firing"}
    # A slices = true rule watches the whole suite and each slice.
    assert states(SLICED) == {SLICE_RULE.name: "inactive", SLICE_NAME: "firing", good: "inactive"}
    line = liveview.plain(views[SLICED], [1], 0.0)
    assert f"alert[{SLICE_NAME}]=firing" in line
    assert f"alert[{good}]=inactive" in line
    assert f"alert[{CANARY.name}]=firing" in liveview.plain(views[CANDIDATE], [1], 0.0)
    canary = next(line for line in lines if f" {CANARY.name} on " in line)
    assert "candidate - baseline" in canary
    assert "worse by more than" in canary
    assert lines[-1].startswith("ALERT (an entry of the history that is not a rule's")
    console = Console(record=True, width=200)
    console.print(
        liveview.render(list(views.values()), [1], header="", phase="", log=[], footer=[])
    )
    text = console.export_text()
    assert f"FIRING {SLICE_NAME}" in text
    assert f"FIRING {CANARY.name}" in text  # the baseline's suite: two rules, each named
    assert f"ok {PLAIN.name}" in text
