"""The ``reliabilityd`` command line."""

from __future__ import annotations

from reliabilityd.cli._main import main

__all__ = ["main"]
