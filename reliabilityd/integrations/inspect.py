"""An Inspect AI hook: every epoch of every sample, as a trial, while the eval runs.

Installed with ``pip install 'reliabilityd[inspect]'`` and registered under
Inspect's ``inspect_ai`` entry-point group, so ``inspect eval`` loads it by
itself; it stays off unless ``RELIABILITYD_INSPECT_URL`` names the broker
(``mqtt://host:1883``, ``mqtts://...``), as Inspect's own hooks are enabled.

Each ``on_sample_end`` becomes one trial event through the ``Emitter``:

* suite ``<task>@<model>`` mapped by ``suite_name`` and task the sample id
  mapped by ``task_name``, trial ``<eval_id>/<epoch>`` and the outcome as
  ``reliabilityd import`` reads the finished log (``inspect_outcome``): the
  same names and ids, so importing that log later counts nothing twice;
* ``run`` the eval's id, so each eval is a run of the suite (``reliabilityd
  runs``), and ``url`` the path Inspect's log viewer opens at the sample's
  epoch in the log being written (``inspect_link``; relative: the suite's
  ``url_base``, the viewer's address, resolves it), or the link
  ``RELIABILITYD_INSPECT_LINK`` makes (``none``: no link);
* ``ledger`` set: the daemon records each trial in the suite's import ledger
  as it counts it, which outlives the dedup records, so the import counts
  nothing twice however long after;
* an epoch that raised (``--no-fail-on-error``) is an ``error``, an unscored
  one a ``skip``.

Delivery is the Emitter's: nothing accepted is lost while the broker is
away (it is resent on reconnection), and ``on_run_end`` waits up to
``RELIABILITYD_INSPECT_FLUSH_TIMEOUT`` seconds (default 60) for the broker
to acknowledge everything. A crash or kill of the eval process loses the
events not yet acknowledged (normally those of the last few milliseconds,
all of them while the broker is unreachable); the samples Inspect had
written to its log are then counted, each exactly once, by importing the
log.

Other settings: ``RELIABILITYD_INSPECT_TOPIC`` (default
``reliability/trials/emit``, under the daemon's default subscription) and
``RELIABILITYD_INSPECT_SCORER`` (default: each sample's first scorer, the
one the import takes).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from inspect_ai.hooks import Hooks, RunEnd, SampleEnd, TaskStart, hooks

from reliabilityd.client._errors import EmitterError
from reliabilityd.client.emitter import DEFAULT_TOPIC, Emitter
from reliabilityd.importers import ImportFileError
from reliabilityd.importers.inspect_log import (
    inspect_link,
    inspect_outcome,
    inspect_run,
    inspect_suite,
    link_template,
)
from reliabilityd.importers.trials import suite_name, task_name
from reliabilityd.logs import redact

URL_ENV = "RELIABILITYD_INSPECT_URL"
TOPIC_ENV = "RELIABILITYD_INSPECT_TOPIC"
SCORER_ENV = "RELIABILITYD_INSPECT_SCORER"
FLUSH_ENV = "RELIABILITYD_INSPECT_FLUSH_TIMEOUT"

log = logging.getLogger("reliabilityd.inspect")


def names(spec: Any) -> tuple[str, str]:
    """(suite, run id) for an Inspect ``EvalSpec``, as ``reliabilityd import`` names its log."""
    fields = {"task": spec.task, "model": spec.model}
    run = inspect_run({"eval_id": spec.eval_id, "run_id": spec.run_id})
    return suite_name(inspect_suite(fields) or "imported"), run or spec.eval_id


def log_name(spec: Any) -> str | None:
    """The file name Inspect gives the eval's log (``<created>_<task>_<id>.eval``, or
    ``.json`` with ``INSPECT_LOG_FORMAT=json``); None for an Inspect that cannot say."""
    try:
        from inspect_ai._util.log_layout import eval_log_name
    except ImportError:
        return None
    try:
        name = eval_log_name(
            task=spec.task, task_id=spec.task_id, created=spec.created, model=spec.model
        )
    except (AttributeError, TypeError):
        return None
    fmt = os.environ.get("INSPECT_LOG_FORMAT", "").strip() or "eval"
    return f"{name}.{fmt}"


class ReliabilitydHooks(Hooks):
    """Emits each sample epoch's outcome as a trial; one Emitter per ``eval()`` run."""

    def __init__(self) -> None:
        self._emitter: Emitter | None = None
        self._tasks: dict[str, tuple[str, str]] = {}  # eval_id -> (suite, run)
        self._logs: dict[str, str | None] = {}  # eval_id -> its log's file name
        self._link = ""  # the link template (inspect_log.link_template)
        self._refused: set[str] = set()  # scorers whose values are not one per sample

    def enabled(self) -> bool:
        return bool(os.environ.get(URL_ENV, "").strip())

    async def on_task_start(self, data: TaskStart) -> None:
        self._tasks[data.eval_id] = names(data.spec)
        self._logs[data.eval_id] = log_name(data.spec)
        if self._emitter is not None:
            return
        try:
            self._link = link_template()
        except ValueError as exc:
            self._link = ""
            log.warning("reliabilityd: trials sent without links: %s", exc)
        url = os.environ[URL_ENV].strip()
        topic = os.environ.get(TOPIC_ENV, "").strip() or DEFAULT_TOPIC
        try:
            # start() waits for the first connection: off the eval's event loop.
            self._emitter = await asyncio.to_thread(Emitter(url, topic=topic).start)
        except (ValueError, EmitterError) as exc:
            log.warning(
                "reliabilityd: no trials from this task (%s=%r: %s); import its log afterwards",
                URL_ENV,
                redact(url),
                exc,
            )
            return
        log.info("reliabilityd: emitting trials to %s (topic %s)", redact(url), topic)

    async def on_sample_end(self, data: SampleEnd) -> None:
        where = self._tasks.get(data.eval_id)
        if where is None or self._emitter is None:
            return
        suite, run = where
        sample = data.sample
        scores = sample.scores or {}
        scorer = os.environ.get(SCORER_ENV, "").strip() or next(iter(scores), "")
        score = scores.get(scorer)
        try:
            outcome = inspect_outcome(
                sample.error is not None,
                None if score is None else {"value": score.value},
                scorer,
            )
        except ImportFileError as exc:
            if scorer not in self._refused:
                self._refused.add(scorer)
                log.warning("reliabilityd: not emitted: %s", exc)
            return
        name = self._logs.get(data.eval_id)
        url = None
        if name is not None:
            url = inspect_link(
                self._link, log=name, sample_id=sample.id, epoch=sample.epoch, eval_id=run
            )
        try:
            await self._emitter.aemit(
                suite,
                task_name(str(sample.id)),
                outcome,
                trial=f"{run}/{sample.epoch}",
                ledger=True,
                run=run,
                url=url,
            )
        except EmitterError as exc:
            log.warning("reliabilityd: trial not accepted: %s", exc)

    async def on_run_end(self, data: RunEnd) -> None:
        emitter, self._emitter = self._emitter, None
        self._tasks.clear()
        self._logs.clear()
        if emitter is None:
            return
        timeout = float(os.environ.get(FLUSH_ENV, "") or 60.0)
        try:
            await asyncio.to_thread(emitter.close, timeout)
        except EmitterError as exc:
            log.warning(
                "reliabilityd: %s; import the eval log to count them (nothing counts twice)", exc
            )


# Inspect instantiates the class once, when its entry point loads this module.
hooks(
    name="reliabilityd",
    description="Each sample epoch as a reliabilityd trial while the eval runs",
)(ReliabilitydHooks)
