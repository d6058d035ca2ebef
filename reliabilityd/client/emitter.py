"""``Emitter``: trial events from agents and eval harnesses to the broker, over MQTT.

What it guarantees: ``emit`` *accepts* an event into this process's memory
and returns its trial id. An accepted event stays in memory until the broker
acknowledges (PUBACK, QoS 1) the message that carries it; when the
connection is lost or the broker restarts, the emitter connects again (a new
connection per attempt, with capped backoff) and sends every message not yet
acknowledged again, so it may arrive twice, and the daemon counts a trial
once by its id. What is not guaranteed: a crash or kill of the emitting
process loses every accepted event not yet acknowledged; a broker
acknowledges only what it will deliver to the subscriptions that exist (run
the daemon first, with its persistent session).

Bounded memory: at most ``max_pending`` events are accepted and not yet
acknowledged. ``emit`` blocks while that many are pending, for up to
``block_timeout`` seconds, then raises ``EmitterFull`` (``await aemit``
waits without blocking the event loop). Events go out as JSON arrays of up
to ``batch_size`` per message, up to ``max_inflight`` messages awaiting
their PUBACK at once (and never more than the broker's Receive Maximum);
``flush`` waits until everything accepted is acknowledged, and ``close`` (or
leaving the ``with`` block) flushes first.

Per-suite topics: a ``topic`` holding ``{suite}`` (such as
``reliability/trials/{suite}``) publishes each event on the topic with its
suite filled in, each message holding one suite's events: the shape a daemon
with ``mqtt.bind_suite`` requires, so broker ACLs can confine an emitter to
its suites. A fixed topic carries every suite.

A loop thread (``client._bridge``) runs the connection
(``reliabilityd._mqtt``), so the same object serves plain code (``with
Emitter(url) as e``) and asyncio code (``async with Emitter(url) as e`` and
``await e.aemit(...)``). The session is clean: everything worth resending is
in this process's memory, so the broker keeps nothing for an emitter that
went away. MQTT 5 first, 3.1.1 when the broker does not speak 5.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable
from types import TracebackType
from typing import Literal, TypeVar, Unpack

from reliabilityd import locate
from reliabilityd.backoff import Backoff
from reliabilityd.client._bridge import LoopThread
from reliabilityd.client._connect import connect_either
from reliabilityd.client._encode import EventExtras, encode_event
from reliabilityd.client._errors import EmitterError, EmitterFull
from reliabilityd.config import MqttConfig, TlsConfig, parse_mqtt_url, tls_context
from reliabilityd.events import Outcome
from reliabilityd.locate import Located
from reliabilityd.mqtt_connector import Connection, MqttError, Refused
from reliabilityd.topics import SUITE

T = TypeVar("T")

DEFAULT_TOPIC = "reliability/trials/emit"


class Emitter:
    """Publish trial events at QoS 1 with batching, a bounded queue and resend.

    ``reconnect_delay`` caps the wait between connection attempts (capped
    exponential backoff from a tenth of a second); ``protocol`` pins the MQTT
    version, else 5 is tried first and 3.1.1 when the broker refuses 5;
    ``keepalive`` is the MQTT keep-alive in seconds; ``tls`` is ``[mqtt.tls]``, for mqtts://.
    ``topic`` may hold ``{suite}``: each suite is then published on its own topic.
    ``mqtt_url`` None finds the broker as ``reliabilityd emit`` does
    (``reliabilityd.locate``): ``$RELIABILITYD_MQTT_URL``, else the embedded daemon
    running on the default data directory, else ``mqtt://127.0.0.1:1883``;
    ``where`` says which and how, and every error names it.
    """

    def __init__(
        self,
        mqtt_url: str | Located | None = None,
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
        protocol: Literal["5", "3.1.1"] | None = None,
        keepalive: int = 30,
        tls: TlsConfig | None = None,
    ) -> None:
        if max_pending < 1 or batch_size < 1 or max_inflight < 1:
            raise ValueError("max_pending, batch_size and max_inflight must be at least 1")
        if reconnect_delay <= 0 or keepalive < 1:
            raise ValueError("reconnect_delay must be positive and keepalive at least 1")
        if protocol not in (None, "5", "3.1.1"):
            raise ValueError(f"protocol must be '5' or '3.1.1', got {protocol!r}")
        self.where = locate.mqtt(mqtt_url, given_as="given to the Emitter")
        mqtt_url = self.where.url
        try:
            self.endpoint = parse_mqtt_url(mqtt_url)
        except ValueError as exc:
            raise ValueError(f"{self.where}: {exc}") from None
        self.tls = tls or TlsConfig()
        if tls is not None and not self.endpoint.tls:
            raise ValueError("tls is set, but the URL is mqtt://: use mqtts:// for TLS")
        if tls is not None:
            tls_context(MqttConfig(url=mqtt_url, tls=tls))  # TlsProblem is a ValueError
        self.url = mqtt_url
        if "+" in topic or "#" in topic:
            raise ValueError(f"cannot publish to {topic!r}: a topic has no + or # wildcard")
        self.topic = topic
        self._per_suite = SUITE in topic
        self.client_id = client_id or f"reliabilityd-emitter-{uuid.uuid4().hex[:12]}"
        self.max_pending = max_pending
        self.batch_size = batch_size
        self.linger = linger
        self.max_inflight = max_inflight
        self.block_timeout = block_timeout
        self.connect_timeout = connect_timeout
        self.reconnect_delay = reconnect_delay
        self.protocol = protocol
        self.keepalive = keepalive
        self._cond = threading.Condition()
        # Accepted, not yet published (encoded events), by topic in the order
        # each topic first got one; ``_queued`` counts them all.
        self._queue: dict[str, deque[bytes]] = {}
        self._queued = 0
        # Batches taken from the queue and not yet acknowledged, in the order
        # taken; each is published on every new connection until its PUBACK.
        self._inflight: dict[int, tuple[str, list[bytes]]] = {}
        self._keys = itertools.count()
        self._pending = 0  # accepted and not acknowledged
        self._acked = 0
        self._closing = False
        self._error: BaseException | None = None
        self._refused: Refused | None = None
        # The loop thread (shared with Client: client/_bridge.py) and the background task.
        self._bridge: LoopThread | None = None
        self._runner: concurrent.futures.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()

    # --- lifecycle ----------------------------------------------------------

    def start(self) -> Emitter:
        """Connect (in the background thread); raises EmitterError if that fails."""
        if self._bridge is not None:
            return self
        self._bridge = LoopThread("emitter")
        self._runner = self._bridge.submit(self._background())
        if not self._ready.wait(self.connect_timeout + 5):
            raise EmitterError(f"no connection to {self._where()} in {self.connect_timeout} s")
        if self._error is not None:
            self._stop_background(5)
            error, self._error = self._error, None
            self._ready.clear()  # a later start() tries again
            raise EmitterError(f"cannot connect to {self._where()}: {error}")
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Flush (up to ``timeout`` s), then disconnect; raises EmitterError if events remain."""
        if self._bridge is None:
            return
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._closing = True
            self._poke(stop=True)
            self._stop_background(10)

    def _stop_background(self, within: float) -> None:
        """Wait for the background task to end, then stop its loop thread."""
        runner, bridge = self._runner, self._bridge
        self._runner = self._bridge = None
        if runner is not None:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                runner.result(within)  # its own errors are in self._error
        if bridge is not None:
            bridge.close(within)

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

    def emit(self, suite: str, task: str, outcome: Outcome, **extras: Unpack[EventExtras]) -> str:
        """Accept one trial outcome; returns its trial id (a new UUID when none is given).

        ``extras`` are the event's optional fields: ``trial``, ``ts``, ``labels``,
        ``url`` (where to read the trial), ``run`` (its run), and ``ledger``,
        which also records the trial in the suite's import ledger
        (``TrialEvent.ledger``). Raises TypeError naming the field of a
        value of the wrong type (an integer trial id), ValueError for an event
        the daemon would reject (the daemon's own checks, a millisecond ``ts``
        included), EmitterFull
        when the queue stays full for ``block_timeout`` seconds.
        """
        encoded, trial_id = encode_event(suite, task, outcome, **extras)
        self._accept(self._topic(suite), encoded, self.block_timeout)
        return trial_id

    async def aemit(
        self, suite: str, task: str, outcome: Outcome, **extras: Unpack[EventExtras]
    ) -> str:
        """``emit`` for asyncio code: a full queue is awaited, not blocked on."""
        encoded, trial_id = encode_event(suite, task, outcome, **extras)
        topic = self._topic(suite)
        if not self._accept(topic, encoded, 0.0, raise_full=False):
            await asyncio.to_thread(self._accept, topic, encoded, self.block_timeout)
        return trial_id

    def _topic(self, suite: str) -> str:
        """The topic ``suite``'s events go to (``encode_event`` has validated the name)."""
        return self.topic.replace(SUITE, suite) if self._per_suite else self.topic

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

    def _accept(
        self, topic: str, encoded: bytes, timeout: float, *, raise_full: bool = True
    ) -> bool:
        if self._bridge is None:
            raise EmitterError("the emitter is not started: use `with Emitter(...)` or .start()")
        with self._cond:
            if self._closing:
                raise EmitterError("the emitter is closed")
            if self._error is not None:
                raise EmitterError(f"the emitter stopped: {self._error}")
            if self._pending >= self.max_pending:
                self._cond.wait_for(
                    lambda: self._pending < self.max_pending or self._error is not None, timeout
                )
                if self._error is not None:
                    raise EmitterError(f"the emitter stopped: {self._error}")
                if self._pending >= self.max_pending:
                    if not raise_full:
                        return False
                    raise EmitterFull(
                        f"{self._pending} events await acknowledgement by {self._where()} "
                        f"(max_pending {self.max_pending}) and none was acknowledged in {timeout} s"
                    )
            idle = not self._queued
            queue = self._queue.get(topic)
            if queue is None:
                queue = self._queue[topic] = deque()
            queue.append(encoded)
            self._queued += 1
            self._pending += 1
        # The sender drains the whole queue once woken: only the first event
        # after a drain (or a full batch) needs to wake it.
        if idle or self._queued % self.batch_size == 0:
            self._poke()
        return True

    def _where(self) -> str:
        return str(self.where)  # the URL without its credentials, and how it was found

    # --- the background thread ---------------------------------------------

    def _poke(self, *, stop: bool = False) -> None:
        loop, wake, stopper = self._loop, self._wake, self._stop
        if loop is not None and wake is not None and stopper is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(wake.set)
                if stop:
                    loop.call_soon_threadsafe(stopper.set)

    async def _background(self) -> None:
        try:
            await self._main()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # reported to callers through flush/emit
            with self._cond:
                self._error = exc
                self._cond.notify_all()
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        backoff = Backoff(start=min(0.1, self.reconnect_delay), cap=self.reconnect_delay)
        conn = await self._first_connection(backoff)
        self._ready.set()
        while True:
            try:
                await self._serve(conn)
                return
            except MqttError:
                # Lost or refused by the broker: a refusal is not retried, it
                # stops the emitter with the broker's reason.
                if self._refused is not None:
                    raise self._refused from None
            finally:
                await conn.close()
            while not self._closing:
                await backoff.wait(self._stop)
                if self._closing:
                    return
                try:
                    attempt = await self._unless_stopped(self._connect())
                except MqttError:
                    continue
                if attempt is None:
                    return
                conn = attempt
                backoff.reset()
                break
            else:
                return

    async def _first_connection(self, backoff: Backoff) -> Connection:
        """Connect within ``connect_timeout``, retrying an unreachable broker; not a refusal."""
        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                return await asyncio.wait_for(
                    self._connect(), max(0.1, deadline - time.monotonic())
                )
            except Refused:
                raise
            except TimeoutError:
                raise MqttError(f"no connection within {self.connect_timeout} s") from None
            except MqttError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                await asyncio.sleep(min(backoff.next_delay(), remaining))

    async def _connect(self) -> Connection:
        """A new connection: MQTT 5, or 3.1.1 once a broker refused 5 and took 3.1.1."""
        conn, self.protocol = await connect_either(
            self.url, self.protocol, self.keepalive, self.tls, self.client_id
        )
        return conn

    async def _unless_stopped(self, work: Awaitable[T]) -> T | None:
        """``work``'s result, or None when ``close`` stops the emitter first."""
        assert self._stop is not None
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, MqttError):
            await task
        return None

    async def _serve(self, conn: Connection) -> None:
        """Publish on ``conn`` until closed (returns) or the connection fails (MqttError)."""
        assert self._wake is not None
        wake = self._wake
        tasks: set[asyncio.Task[None]] = set()

        def send(key: int, batch: tuple[str, list[bytes]]) -> None:
            task = asyncio.create_task(self._deliver(conn, key, batch))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        watcher = asyncio.create_task(self._watch(conn))
        try:
            # Everything a lost connection left unacknowledged goes out first.
            for key, batch in self._inflight.items():
                send(key, batch)
            while not self._closing:
                if conn.error is not None or self._refused is not None:
                    raise self._refused or MqttError(str(conn.error))
                if (
                    self.linger > 0
                    and 0 < self._queued < self.batch_size
                    and len(self._inflight) < self.max_inflight
                ):
                    await asyncio.sleep(self.linger)
                while len(self._inflight) < self.max_inflight:
                    taken = self._next_batch()
                    if taken is None:
                        break
                    key = next(self._keys)
                    self._inflight[key] = taken
                    send(key, taken)
                # Woken by emit, by PUBACKs, by the connection's end and by close.
                await wake.wait()
                wake.clear()
        finally:
            watcher.cancel()
            # Publishes of a lost connection fail at once (those whose PUBACK
            # came in first still count); wait for them, so that none completes
            # after its batch was sent again on the next connection. Closing
            # with events left (flush gave up) abandons them.
            if self._closing or conn.error is None:
                for task in tasks:
                    task.cancel()
            await asyncio.gather(*tasks, watcher, return_exceptions=True)

    async def _watch(self, conn: Connection) -> None:
        assert self._wake is not None
        await conn.closed.wait()
        self._wake.set()

    async def _deliver(self, conn: Connection, key: int, message: tuple[str, list[bytes]]) -> None:
        assert self._wake is not None
        topic, batch = message
        try:
            await conn.publish(topic, b"[" + b",".join(batch) + b"]", retain=False)
        except Refused as exc:
            self._refused = exc
            self._wake.set()
            return
        except MqttError:
            return  # the connection is gone: ``_serve`` notices and sends it again
        del self._inflight[key]
        with self._cond:
            self._pending -= len(batch)
            self._acked += len(batch)
            self._cond.notify_all()
        self._wake.set()

    def _next_batch(self) -> tuple[str, list[bytes]] | None:
        """Up to ``batch_size`` events of the topic waiting longest, or None when none wait.

        A topic leaves the queue once drained and joins it again at the back,
        so busy suites take turns; one suite's events keep their order.
        """
        with self._cond:
            if not self._queued:
                return None
            topic = next(iter(self._queue))
            queue = self._queue[topic]
            count = min(self.batch_size, len(queue))
            batch = [queue.popleft() for _ in range(count)]
            if not queue:
                del self._queue[topic]
            self._queued -= count
            return topic, batch
