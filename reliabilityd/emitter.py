"""``Emitter``: trial events from agents and eval harnesses to the broker, over MQTT (gmqtt).

What it guarantees: ``emit`` *accepts* an event into this process's memory
and returns its trial id. An accepted event stays in memory until the broker
acknowledges (PUBACK, QoS 1) the message that carries it; across a lost
connection or a broker restart it is sent again (on the resumed session, or
on a new one when the broker lost the session), so it may arrive twice, and
the daemon counts a trial once by its id. What is not guaranteed: a crash or
kill of the emitting process loses every accepted event not yet
acknowledged; a broker acknowledges only what it will deliver to the
subscriptions that exist (run the daemon first, with its persistent session).

Bounded memory: at most ``max_pending`` events are accepted and not yet
acknowledged. ``emit`` blocks while that many are pending, for up to
``block_timeout`` seconds, then raises ``EmitterFull`` (``await aemit``
waits without blocking the event loop). Events go out as JSON arrays of up
to ``batch_size`` per message; ``flush`` waits until everything accepted is
acknowledged, and ``close`` (or leaving the ``with`` block) flushes first.

A background thread runs the client on its own event loop, so the same
object serves plain code (``with Emitter(url) as e``) and asyncio code
(``async with Emitter(url) as e`` and ``await e.aemit(...)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any

import msgspec
from gmqtt import Client
from gmqtt.mqtt.constants import MQTTv50
from gmqtt.storage import PersistentStorage

from reliabilityd.config import parse_mqtt_url
from reliabilityd.errors import ReliabilitydError
from reliabilityd.events import Outcome, TrialEvent, validate

DEFAULT_TOPIC = "reliability/trials/emit"
_OUTCOMES = ("pass", "fail", "error", "skip")


class EmitterError(ReliabilitydError):
    """The emitter could not do what was asked; the message says what is pending."""


class EmitterFull(EmitterError):
    """``max_pending`` events are unacknowledged and none left within ``block_timeout``."""


class _InFlight(PersistentStorage):  # type: ignore[misc]
    """gmqtt's store of unacknowledged publishes, reporting acks and lost sessions."""

    def __init__(self, on_ack: Callable[[int], None], on_lost: Callable[[list[int]], None]):
        super().__init__()
        self._on_ack = on_ack
        self._on_lost = on_lost
        self.last_mid: int | None = None

    def push_message(self, mid: int, raw_package: bytes) -> None:
        # Client.publish stores each QoS 1 packet here right after sending it:
        # the only place its packet id is visible.
        super().push_message(mid, raw_package)
        self.last_mid = mid

    def remove_message_by_mid(self, mid: int) -> None:
        super().remove_message_by_mid(mid)
        self._on_ack(mid)

    def clear(self) -> None:
        # The broker kept no session: gmqtt drops its resend queue. Hand the
        # batches back so they go out again on the new session.
        mids = [mid for mid, _ in self.get_all()]
        super().clear()
        self._on_lost(mids)


class Emitter:
    """Publish trial events at QoS 1 with batching, a bounded queue and resend."""

    def __init__(
        self,
        mqtt_url: str = "mqtt://127.0.0.1:1883",
        *,
        topic: str = DEFAULT_TOPIC,
        client_id: str | None = None,
        max_pending: int = 10_000,
        batch_size: int = 100,
        linger: float = 0.01,
        max_inflight: int = 10,
        block_timeout: float = 30.0,
        connect_timeout: float = 30.0,
        reconnect_delay: float = 1.0,
        session_expiry: int = 3600,
    ) -> None:
        if max_pending < 1 or batch_size < 1 or max_inflight < 1:
            raise ValueError("max_pending, batch_size and max_inflight must be at least 1")
        self.endpoint = parse_mqtt_url(mqtt_url)
        self.topic = topic
        self.client_id = client_id or f"reliabilityd-emitter-{uuid.uuid4().hex[:12]}"
        self.max_pending = max_pending
        self.batch_size = batch_size
        self.linger = linger
        self.max_inflight = max_inflight
        self.block_timeout = block_timeout
        self.connect_timeout = connect_timeout
        self.reconnect_delay = reconnect_delay
        self.session_expiry = session_expiry
        self._cond = threading.Condition()
        self._queue: deque[bytes] = deque()  # accepted, not yet published (encoded events)
        self._resend: deque[list[bytes]] = deque()  # batches of a session the broker lost
        self._inflight: dict[int, list[bytes]] = {}  # mid -> its batch
        self._pending = 0  # accepted and not acknowledged
        self._acked = 0
        self._closing = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._ready = threading.Event()
        self._store: _InFlight | None = None

    # --- lifecycle ----------------------------------------------------------

    def start(self) -> Emitter:
        """Connect (in the background thread); raises EmitterError if that fails."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._thread_main, name="emitter", daemon=True)
        self._thread.start()
        if not self._ready.wait(self.connect_timeout + 5):
            raise EmitterError(f"no connection to {self._where()} in {self.connect_timeout} s")
        if self._error is not None:
            self._thread.join(5)
            raise EmitterError(f"cannot connect to {self._where()}: {self._error}")
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Flush (up to ``timeout`` s), then disconnect; raises EmitterError if events remain."""
        if self._thread is None:
            return
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._closing = True
            self._poke()
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> Emitter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Emitter:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)

    # --- emitting -----------------------------------------------------------

    def emit(
        self,
        suite: str,
        task: str,
        outcome: Outcome,
        *,
        trial: str | None = None,
        ts: float | None = None,
        labels: dict[str, Any] | None = None,
    ) -> str:
        """Accept one trial outcome; returns its trial id (a new UUID when none is given).

        Raises ValueError for an event the daemon would reject, EmitterFull
        when the queue stays full for ``block_timeout`` seconds.
        """
        encoded, trial_id = self._encode(suite, task, outcome, trial=trial, ts=ts, labels=labels)
        self._accept(encoded, self.block_timeout)
        return trial_id

    async def aemit(
        self,
        suite: str,
        task: str,
        outcome: Outcome,
        *,
        trial: str | None = None,
        ts: float | None = None,
        labels: dict[str, Any] | None = None,
    ) -> str:
        """``emit`` for asyncio code: a full queue is awaited, not blocked on."""
        encoded, trial_id = self._encode(suite, task, outcome, trial=trial, ts=ts, labels=labels)
        if not self._accept(encoded, 0.0, raise_full=False):
            await asyncio.to_thread(self._accept, encoded, self.block_timeout)
        return trial_id

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every accepted event is acknowledged; EmitterError after ``timeout`` s."""
        with self._cond:
            done = self._cond.wait_for(
                lambda: self._pending == 0 or self._error is not None, timeout
            )
            if self._error is not None:
                raise EmitterError(f"the emitter stopped: {self._error}")
            if not done:
                raise EmitterError(
                    f"{self._pending} events not acknowledged by {self._where()} after "
                    f"{timeout} s; they stay queued while this process lives"
                )

    async def aflush(self, within: float | None = None) -> None:
        """``flush`` for asyncio code."""
        await asyncio.to_thread(self.flush, within)

    @property
    def pending(self) -> int:
        """Events accepted and not yet acknowledged by the broker."""
        return self._pending

    @property
    def acknowledged(self) -> int:
        """Events the broker has acknowledged since this emitter started."""
        return self._acked

    def _encode(
        self,
        suite: str,
        task: str,
        outcome: str,
        *,
        trial: str | None,
        ts: float | None,
        labels: dict[str, Any] | None,
    ) -> tuple[bytes, str]:
        if outcome not in _OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(_OUTCOMES)}, got {outcome!r}")
        trial_id = trial if trial is not None else uuid.uuid4().hex
        event = TrialEvent(
            suite=suite,
            task=task,
            trial=trial_id,
            outcome=outcome,  # type: ignore[arg-type]  # checked above
            ts=time.time() if ts is None else ts,
            labels=labels,
        )
        problem = validate(event)
        if problem:
            raise ValueError(problem)
        return msgspec.json.encode(event), trial_id

    def _accept(self, encoded: bytes, timeout: float, *, raise_full: bool = True) -> bool:
        if self._thread is None:
            raise EmitterError("the emitter is not started: use `with Emitter(...)` or .start()")
        with self._cond:
            if self._closing:
                raise EmitterError("the emitter is closed")
            if self._error is not None:
                raise EmitterError(f"the emitter stopped: {self._error}")
            if not self._cond.wait_for(lambda: self._pending < self.max_pending, timeout):
                if not raise_full:
                    return False
                raise EmitterFull(
                    f"{self._pending} events await acknowledgement by {self._where()} "
                    f"(max_pending {self.max_pending}) and none was acknowledged in {timeout} s"
                )
            idle = not self._queue
            self._queue.append(encoded)
            self._pending += 1
        # The sender drains the whole queue once woken: only the first event
        # after a drain (or a full batch) needs to wake it.
        if idle or len(self._queue) % self.batch_size == 0:
            self._poke()
        return True

    def _where(self) -> str:
        return f"mqtt{'s' if self.endpoint.tls else ''}://{self.endpoint.host}:{self.endpoint.port}"

    # --- the background thread ---------------------------------------------

    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(wake.set)

    def _on_ack(self, mid: int) -> None:
        batch = self._inflight.pop(mid, None)
        if batch is None:
            return
        with self._cond:
            self._pending -= len(batch)
            self._acked += len(batch)
            self._cond.notify_all()
        if self._wake is not None:
            self._wake.set()

    def _on_lost(self, mids: list[int]) -> None:
        lost = [self._inflight.pop(mid) for mid in mids if mid in self._inflight]
        self._resend.extendleft(reversed(lost))
        if self._wake is not None:
            self._wake.set()

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to callers through flush/emit
            with self._cond:
                self._error = exc
                self._cond.notify_all()
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._store = _InFlight(self._on_ack, self._on_lost)
        client = Client(
            self.client_id,
            clean_session=False,
            persistent_storage=self._store,
            session_expiry_interval=self.session_expiry,
        )
        client.set_config({"reconnect_retries": -1, "reconnect_delay": self.reconnect_delay})
        if self.endpoint.username:
            client.set_auth_credentials(self.endpoint.username, self.endpoint.password)
        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                await asyncio.wait_for(
                    client.connect(
                        self.endpoint.host,
                        self.endpoint.port,
                        ssl=self.endpoint.tls,
                        keepalive=30,
                        version=MQTTv50,
                    ),
                    max(0.1, deadline - time.monotonic()),
                )
                break
            except (OSError, TimeoutError):
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(min(0.5, self.reconnect_delay))
        self._ready.set()
        try:
            await self._send_loop(client)
        finally:
            # Nothing is left in flight: the broker may drop our session now.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.disconnect(session_expiry_interval=0), 5)

    async def _send_loop(self, client: Client) -> None:
        assert self._wake is not None
        while not self._closing:
            # Woken by emit and by acks; the timeout notices a reconnect.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.2)
            self._wake.clear()
            if self.linger > 0 and len(self._queue) < self.batch_size and not self._closing:
                await asyncio.sleep(self.linger)
            # Publish only on a connection whose CONNACK arrived: while gmqtt
            # reconnects, a PUBLISH could otherwise precede the CONNECT.
            while client.is_connected and len(self._inflight) < self.max_inflight:
                batch = self._next_batch()
                if not batch:
                    break
                if not self._publish(client, batch):
                    self._resend.appendleft(batch)
                    break

    def _next_batch(self) -> list[bytes]:
        if self._resend:
            return self._resend.popleft()
        with self._cond:
            count = min(self.batch_size, len(self._queue))
            return [self._queue.popleft() for _ in range(count)]

    def _publish(self, client: Client, batch: list[bytes]) -> bool:
        assert self._store is not None
        self._store.last_mid = None
        try:
            client.publish(self.topic, b"[" + b",".join(batch) + b"]", qos=1)
        except Exception:  # e.g. the packet id space is exhausted: retry later
            return False
        mid = self._store.last_mid
        if mid is None:
            return False
        # The PUBACK is handled on this loop, so it cannot arrive before this line.
        self._inflight[mid] = batch
        return True
