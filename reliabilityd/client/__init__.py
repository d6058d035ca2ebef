"""Python access to reliabilityd: ``Client`` / ``AsyncClient`` to read, ``Emitter`` to send.

A read that Redis fails raises the store's ``StoreError``; one that cannot
reach Redis its ``StoreUnavailable``, naming the Redis asked and how it was found.
"""

from __future__ import annotations

from reliabilityd.alerting.registry import RuleStatus
from reliabilityd.client._client import AsyncClient, Client, SuiteSummary
from reliabilityd.client._errors import EmitterError, EmitterFull, UndecodableError
from reliabilityd.client.emitter import Emitter
from reliabilityd.store import Row, RowPage, StoreError, StoreUnavailable, Undecodable

__all__ = [
    "AsyncClient",
    "Client",
    "Emitter",
    "EmitterError",
    "EmitterFull",
    "Row",
    "RowPage",
    "RuleStatus",
    "StoreError",
    "StoreUnavailable",
    "SuiteSummary",
    "Undecodable",
    "UndecodableError",
]
