"""HTTP sinks: a receiver that answers too slowly is cut off at the timeout, not left running."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from reliabilityd.alerting.sinks import Http, SinkError
from tests.support.helpers import wait_until


class Drip:
    """Answers every POST one header byte per 50 ms for 30 s: no socket read ever times out."""

    def __init__(self) -> None:
        self.cut_off = 0
        self.finished = 0
        drip = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                    for _ in range(600):
                        self.wfile.write(b"X")
                        self.wfile.flush()
                        time.sleep(0.05)
                    self.wfile.write(b": y\r\nContent-Length: 0\r\n\r\n")
                    drip.finished += 1
                except OSError:
                    drip.cut_off += 1  # the client closed the connection

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def drip() -> Iterator[Drip]:
    d = Drip()
    d.thread.start()
    yield d
    d.server.shutdown()
    d.server.server_close()


async def test_a_slow_receiver_is_cut_off_at_the_timeout(drip: Drip) -> None:
    http = Http()
    try:
        with pytest.raises(SinkError, match=r"did not answer within 0\.3 s"):
            await http.post_json(drip.url, b"{}", 0.3)
    finally:
        await http.close()

    async def cut_off() -> bool:
        return drip.cut_off == 1

    # The request itself ended: the receiver's next writes fail. (A request left
    # running in a worker thread would still be reading, and could land after a retry.)
    await wait_until(cut_off, 10)
    assert drip.finished == 0
