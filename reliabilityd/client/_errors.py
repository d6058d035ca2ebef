"""What the Emitter raises."""

from __future__ import annotations

from reliabilityd.errors import ReliabilitydError


class EmitterError(ReliabilitydError):
    """The emitter could not do what was asked; the message says what is pending."""


class EmitterFull(EmitterError):
    """``max_pending`` events are unacknowledged and none left within ``block_timeout``."""
