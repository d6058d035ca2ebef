"""Python access to reliabilityd: ``Client`` / ``AsyncClient`` to read, ``Emitter`` to send."""

from __future__ import annotations

from reliabilityd.client._client import AsyncClient, Client, SuiteSummary
from reliabilityd.client._errors import EmitterError, EmitterFull, UndecodableError
from reliabilityd.client.emitter import Emitter
from reliabilityd.store import Undecodable

__all__ = [
    "AsyncClient",
    "Client",
    "Emitter",
    "EmitterError",
    "EmitterFull",
    "SuiteSummary",
    "Undecodable",
    "UndecodableError",
]
