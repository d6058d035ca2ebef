"""Harness integrations: trials live from the harnesses teams already run.

``inspect``: an Inspect AI hook (the ``reliabilityd[inspect]`` extra) that
emits each sample's epochs while the eval runs; ``otlp``: OpenTelemetry
``gen_ai.evaluation.result`` log records mapped to trials for the daemon's
``POST /v1/logs``.
"""

from __future__ import annotations
