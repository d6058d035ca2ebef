"""The daemon: wiring of sources, store, statistics and sinks, and its HTTP port."""

from __future__ import annotations

from reliabilityd.daemon._check import check
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon._reload import main

__all__ = ["Daemon", "check", "main"]
