"""Keep-alive as a decision on a clock the caller reads: when to ping, when a connection is dead.

Sans-I/O, like the codec: ``KeepAlive.check`` takes the time and the time
of the last byte received, and answers ``"ping"``, ``"dead"`` or None. The
client's ping loop calls it every ``tick`` seconds of its event loop; the
tests call it on virtual time, so the bounds below are checked without
waiting for a wall clock.

* A PINGREQ goes out every half keep-alive (at the first check at least
  ``every / 2 - tick / 2`` after the last one), so a broker that answers
  is never silent for a whole keep-alive.
* A silence longer than ``every`` is a dead connection. Checked every
  quarter keep-alive, it is noticed within ``every + tick`` (1.25
  keep-alives) of the last byte received, plus however late the checks
  run.
"""

from __future__ import annotations

from typing import Literal

Action = Literal["ping", "dead"]


class KeepAlive:
    """When to send PINGREQ and when the broker has been silent too long."""

    __slots__ = ("_last_ping", "every", "tick")

    def __init__(self, every: float, now: float) -> None:
        # Seconds of silence that mean a dead connection: the keep-alive.
        self.every = every
        # Seconds between checks.
        self.tick = every / 4
        self._last_ping = now

    def check(self, now: float, last_in: float) -> Action | None:
        """What to do at ``now``, the last byte having been received at ``last_in``."""
        if now - last_in > self.every:
            return "dead"
        if now - self._last_ping >= self.every / 2 - self.tick / 2:
            self._last_ping = now
            return "ping"
        return None
