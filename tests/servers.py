"""Fixtures that start private redis-server and mosquitto processes on free ports."""

from __future__ import annotations
