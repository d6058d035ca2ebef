"""What the Emitter and the Client raise on purpose."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reliabilityd.errors import ReliabilitydError

if TYPE_CHECKING:  # the Emitter imports this module, and nothing of Redis
    from reliabilityd.store import Undecodable


class EmitterError(ReliabilitydError):
    """The emitter could not do what was asked; the message says what is pending."""


class EmitterFull(EmitterError):
    """``max_pending`` events are unacknowledged and none left within ``block_timeout``."""


class UndecodableError(ReliabilitydError):
    """A stored document the Client cannot decode: written by another version, or damaged.

    ``undecodable`` is the store's record of it (the Redis key and the decode
    error).
    """

    def __init__(self, what: str, undecodable: Undecodable) -> None:
        self.undecodable = undecodable
        super().__init__(
            f"the stored {what} does not decode ({undecodable.error}): it was written by "
            "another version of reliabilityd, or damaged; the daemon's next snapshot of "
            "the series replaces it, and Client.estimate computes from the histogram meanwhile"
        )
