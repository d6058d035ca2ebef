"""Debian's chromium, headless, driven over its DevTools protocol (aiohttp's websocket client).

``browser()`` starts a private chromium with its own profile directory and
yields a ``Browser``; ``Browser.page()`` opens a tab (a flattened target
session) with the few commands the UI tests need: navigate, evaluate,
viewport, colour scheme, screenshot, following a link, and the requests the page
sent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[2]
# Screenshots and other things a person looks at after a run (git-ignored; CI keeps them).
ARTIFACTS = REPO / "test-artifacts"


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    return None


class CdpError(RuntimeError):
    """A DevTools command answered with an error."""


class Browser:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.waiters: list[tuple[str, str, asyncio.Future[dict[str, Any]]]] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = msg.json()
            if "id" in data:
                future = self.pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            session = data.get("sessionId", "")
            self.events.setdefault(session, []).append(data)
            for waiter in list(self.waiters):
                want_session, method, future = waiter
                if want_session == session and method == data["method"] and not future.done():
                    future.set_result(data.get("params", {}))
                    self.waiters.remove(waiter)

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        msg_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[msg_id] = future
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        await self.ws.send_json(msg)
        reply = await asyncio.wait_for(future, 30)
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def wait_event(self, session: str, method: str) -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters.append((session, method, future))
        return future

    async def page(self) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        page = Page(self, attached["sessionId"])
        for domain in ("Page", "Runtime", "Network"):
            await page.send(f"{domain}.enable")
        return page


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.browser.send(method, params, self.session)

    async def goto(self, url: str) -> None:
        loaded = self.browser.wait_event(self.session, "Page.loadEventFired")
        reply = await self.send("Page.navigate", {"url": url})
        if reply.get("errorText"):
            raise CdpError(f"navigate {url}: {reply['errorText']}")
        await asyncio.wait_for(loaded, 30)

    async def follow(self, expression: str) -> None:
        """Click the element ``expression`` evaluates to (a link) and wait for the page it
        opens to load."""
        loaded = self.browser.wait_event(self.session, "Page.loadEventFired")
        await self.eval(f"({expression}).click()")
        await asyncio.wait_for(loaded, 30)

    async def eval(self, expression: str) -> Any:
        reply = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in reply:
            raise CdpError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    async def viewport(self, width: int, height: int, *, mobile: bool = False) -> None:
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )

    async def color_scheme(self, scheme: str) -> None:
        await self.send(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
        )

    async def screenshot(self, name: str) -> Path:
        """A PNG of the whole page under test-artifacts/; returns its path."""
        shot = await self.send(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
        )
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / name
        path.write_bytes(base64.b64decode(shot["data"]))
        print(f"screenshot: {path}")
        return path

    def request_times(self, contains: str) -> list[float]:
        """When (monotonic seconds) this page sent each request whose URL contains ``contains``."""
        return [
            float(e["params"]["timestamp"])
            for e in self.browser.events.get(self.session, [])
            if e["method"] == "Network.requestWillBeSent"
            and contains in e["params"]["request"]["url"]
        ]

    def requests(self, contains: str) -> list[str]:
        """URLs of the requests this page sent that contain ``contains``, in order."""
        return [
            e["params"]["request"]["url"]
            for e in self.browser.events.get(self.session, [])
            if e["method"] == "Network.requestWillBeSent"
            and contains in e["params"]["request"]["url"]
        ]


@contextlib.asynccontextmanager
async def browser() -> AsyncIterator[Browser]:
    """A private headless chromium, stopped (and its profile removed) on exit."""
    binary = chromium_binary()
    assert binary, "chromium is missing: ./scripts/ensure-servers installs it"
    profile = Path(tempfile.mkdtemp(prefix="reliabilityd-chromium-"))
    log = (profile / "stderr.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        binary,
        "--headless=new",
        "--no-sandbox",  # the tests may run as root, where the sandbox refuses to start
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--hide-scrollbars",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "about:blank",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        url = await _devtools_url(proc, profile)
        async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as ws:
            b = Browser(ws)
            try:
                yield b
            finally:
                b.reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await b.reader
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()
        shutil.rmtree(profile, ignore_errors=True)


async def _devtools_url(proc: asyncio.subprocess.Process, profile: Path) -> str:
    """The browser's websocket URL, from the DevToolsActivePort file chromium writes."""
    port_file = profile / "DevToolsActivePort"
    for _ in range(300):
        if proc.returncode is not None:
            err = (profile / "stderr.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"chromium exited with {proc.returncode}:\n{err}")
        with contextlib.suppress(OSError, ValueError):
            port, path = port_file.read_text().split()[:2]
            return f"ws://127.0.0.1:{int(port)}{path}"
        await asyncio.sleep(0.1)
    raise RuntimeError("chromium did not open its DevTools port within 30 s")
