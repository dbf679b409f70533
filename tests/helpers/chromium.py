"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
JSON messages ending in a NUL byte, commands on fd 3, answers on fd 4), stdlib only.

For the HTML report's tests and benchmark: open a local page with every host name mapped
to nowhere, log each request the page makes, its console errors and uncaught exceptions,
read values from it, and take PNG screenshots, decoded here with zlib and struct.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

# Debian's /usr/bin/chromium is a launcher script that adds flags of its own (extensions
# among them); the browser itself is started directly where it is found.
CHROMIUM = next((path for path in ("/usr/lib/chromium/chromium",) if os.access(path, os.X_OK)),
                shutil.which("chromium") or shutil.which("chromium-browser"))
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--no-default-browser-check", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--disable-default-apps", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--hide-scrollbars", "--mute-audio", "--disable-dev-shm-usage")
READ_LIMIT_S = 120.0


class ChromiumError(Exception):
    """The browser died, or did not answer in time."""


@dataclass
class PageLog:
    """What a page did: the URLs it requested, and its console errors and exceptions."""

    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Chromium:
    """One headless browser with one tab, closed by `close()` (or `with`)."""

    def __init__(self, width: int = 1280, height: int = 900,
                 net_log: str | None = None, stderr: int | None = subprocess.DEVNULL) -> None:
        if CHROMIUM is None:
            raise ChromiumError("chromium is not installed")
        self.profile = tempfile.mkdtemp(prefix="gputop-chromium-")
        to_browser_r, self._to_browser = _above_4(os.pipe())
        self._from_browser, from_browser_w = _above_4(os.pipe())
        args = [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"]
        if net_log:
            args += [f"--log-net-log={net_log}", "--net-log-capture-mode=Everything"]

        # The browser reads fd 3 and writes fd 4: bash puts the pipes' ends there for it.
        move = (f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w} '
                f'{to_browser_r}<&- {from_browser_w}>&-')
        self.proc = subprocess.Popen(["bash", "-c", move, "chromium", *args],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=stderr,
                                     pass_fds=(to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self.log = PageLog()
        self.session = self._attach()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _attach(self) -> str:
        """A session on the browser's first tab, with the domains the log needs enabled."""
        targets = self.call("Target.getTargets", session=None)["targetInfos"]
        page = next(t["targetId"] for t in targets if t["type"] == "page")
        session: str = self.call("Target.attachToTarget", {"targetId": page, "flatten": True},
                                 session=None)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable", session=session)
        return session

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | bool | None = True) -> dict[str, Any]:
        """Send one command and wait for its answer (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method,
                                   "params": params or {}}
        if session is True:
            message["sessionId"] = self.session
        elif session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self._event(reply)

    def _read(self, limit_s: float = READ_LIMIT_S) -> dict[str, Any]:
        deadline = time.monotonic() + limit_s
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise ChromiumError(f"no answer from chromium in {limit_s:.0f} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise ChromiumError(f"chromium exited (code {self.proc.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(message))

    def _event(self, event: dict[str, Any]) -> None:
        """Log requests and errors; keep the rest for `wait_event`."""
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            self.log.requests.append(params["request"]["url"])
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.log.errors.append(details.get("exception", {}).get("description")
                                   or details.get("text", "exception"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.log.errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                            for a in params.get("args", ())))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.log.errors.append(f"{entry.get('source')}: {entry.get('text')} "
                                   f"{entry.get('url', '')}".strip())
        self._events.append(event)

    def wait_event(self, method: str, limit_s: float = READ_LIMIT_S) -> dict[str, Any]:
        """The first event named `method` not yet waited for."""
        deadline = time.monotonic() + limit_s
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method:
                    del self._events[: i + 1]
                    return event
            self._events.clear()
            self._event(self._read(max(0.1, deadline - time.monotonic())))

    def open(self, url: str, limit_s: float = READ_LIMIT_S) -> None:
        """Navigate to `url` and wait for its load event; the log starts afresh."""
        self.log = PageLog()
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", limit_s)

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        """The value of a JavaScript expression in the page (JSON-able values only)."""
        result = self.call("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True,
                                                "awaitPromise": await_promise})
        if "exceptionDetails" in result:
            raise ChromiumError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, clip: dict[str, float] | None = None) -> bytes:
        """A PNG of the viewport, or of `clip` ({x, y, width, height} in CSS pixels)."""
        params: dict[str, Any] = {"format": "png"}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
            params["captureBeyondViewport"] = True
        return base64.b64decode(self.call("Page.captureScreenshot", params)["data"])

    def close(self) -> None:
        """Quit the browser and remove its profile."""
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(ChromiumError, OSError):
                    self.call("Browser.close", session=None)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        finally:
            for fd in (self._to_browser, self._from_browser):
                with contextlib.suppress(OSError):
                    os.close(fd)
            shutil.rmtree(self.profile, ignore_errors=True)


def _above_4(fds: tuple[int, int]) -> tuple[int, int]:
    """The pipe's ends moved to fd 10 or above, clear of the 3 and 4 the browser wants."""
    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return moved[0], moved[1]


@dataclass(frozen=True)
class Image:
    """A decoded PNG: width, height and RGBA bytes, row after row."""

    width: int
    height: int
    rgba: bytes

    def pixel(self, x: int, y: int) -> tuple[int, int, int, int]:
        at = (y * self.width + x) * 4
        r, g, b, a = self.rgba[at:at + 4]
        return r, g, b, a

    def count(self, differs_from: tuple[int, int, int]) -> int:
        """How many pixels differ from the colour `differs_from` (alpha ignored)."""
        r, g, b = differs_from
        data = self.rgba
        return sum(1 for i in range(0, len(data), 4)
                   if data[i] != r or data[i + 1] != g or data[i + 2] != b)


def decode_png(png: bytes) -> Image:
    """An 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) as RGBA bytes."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    at, idat, header = 8, [], b""
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        body = png[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}")
    channels = 4 if colour == 6 else 3
    stride = width * channels
    raw = zlib.decompress(b"".join(idat))
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        _unfilter(kind, line, previous, channels)
        rows.append(bytes(line))
        previous = line
    data = b"".join(rows)
    if channels == 3:
        out = bytearray(width * height * 4)
        out[0::4], out[1::4], out[2::4] = data[0::3], data[1::3], data[2::3]
        out[3::4] = b"\xff" * (width * height)
        data = bytes(out)
    return Image(width, height, data)


def _unfilter(kind: int, line: bytearray, above: bytearray, bpp: int) -> None:
    """Undo one row's PNG filter in place (filters 0-4)."""
    n = len(line)
    if kind == 1:
        for i in range(bpp, n):
            line[i] = (line[i] + line[i - bpp]) & 0xFF
    elif kind == 2:
        for i in range(n):
            line[i] = (line[i] + above[i]) & 0xFF
    elif kind == 3:
        for i in range(n):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + ((left + above[i]) >> 1)) & 0xFF
    elif kind == 4:
        for i in range(n):
            a = line[i - bpp] if i >= bpp else 0
            b = above[i]
            c = above[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
            line[i] = (line[i] + pred) & 0xFF


def net_log_requests(path: str) -> list[tuple[str, str]]:
    """(url, initiator) of each request the browser's network stack started, from a
    `--log-net-log` file. The browser's own background requests (update checks and the
    like) have the initiator "not an origin"; a page's have its origin ("null" for file:)."""
    with open(path, encoding="utf-8") as f:
        text = f.read().rstrip().rstrip(",")
    if not text.endswith("}"):
        text += "]}"  # a log cut short: close its list of events
    log = json.loads(text)
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [(e["params"]["url"], e["params"].get("initiator", ""))
            for e in log.get("events", ())
            if e["type"] == start_job and "url" in e.get("params", {})]
