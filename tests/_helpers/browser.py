"""A headless Chromium driven over the DevTools protocol, for the site's browser tests.

Chromium's ``--remote-debugging-pipe`` speaks the protocol over file descriptors 3 (commands in) and 4 (replies and
events out), each message JSON ended by a NUL byte: no WebSocket client, no driver download, no third-party package.
Hand-written because Selenium and Playwright each fetch their own browser or driver; this needs only the system's
``chromium``.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: the names Debian, other distributions and Google's package give the browser
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    for name in BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless browser with one page; ``navigate``, ``evaluate``, ``screenshot``."""

    def __init__(self, executable: str, timeout: float = 30.0, width: int = 1400, height: int = 1000) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="reconbench-chromium-")
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        # copies above 10, so that placing them at 3 and 4 in the child cannot overwrite one with the other
        child_in, child_out = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)

        def place_pipes() -> None:
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self.proc = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "--hide-scrollbars", "--no-first-run", "--no-default-browser-check", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=False,
            preexec_fn=place_pipes)
        for fd in (cmd_r, out_w, child_in, child_out):
            os.close(fd)
        self._write, self._read = cmd_w, out_r
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=True)

    # -- the protocol -----------------------------------------------------------------------------------------
    def _send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._write, data):]

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise BrowserError("the browser did not answer in time")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise BrowserError(f"the browser closed its pipe (exit status {self.proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)  # type: ignore[no-any-return]

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self._send(message)
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result") or {}
            self.events.append(reply)

    def wait_for(self, event: str) -> dict[str, Any]:
        """The next event of that name (one already received counts)."""
        deadline = time.monotonic() + self.timeout
        while True:
            for i, e in enumerate(self.events):
                if e.get("method") == event:
                    return self.events.pop(i)
            self.events.append(self._receive(deadline))

    # -- what the tests use -----------------------------------------------------------------------------------
    def navigate(self, url: str) -> None:
        self.events.clear()
        result = self.call("Page.navigate", {"url": url}, session=True)
        if result.get("errorText"):
            raise BrowserError(f"cannot open {url}: {result['errorText']}")
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]!r} threw: {result['exceptionDetails'].get('exception', {})}")
        return result["result"].get("value")

    def click_and_wait(self, expression: str) -> None:
        """Click the element ``expression`` selects (a link) and wait for the page it opens."""
        self.events.clear()
        self.evaluate(f"({expression}).click()")
        self.wait_for("Page.loadEventFired")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._write, self._read):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


def open_browser() -> Iterator[Browser]:
    """A module fixture's body: the headless browser, or a skip (a failure with RECONBENCH_BROWSER_REQUIRED=1, as CI
    sets it once it has installed Chromium) where none is on PATH."""
    import pytest

    exe = find_browser()
    if exe is None:
        if os.environ.get("RECONBENCH_BROWSER_REQUIRED") == "1":
            pytest.fail("RECONBENCH_BROWSER_REQUIRED=1 but no chromium is on PATH; install it (apt-get install chromium)")
        pytest.skip("no Chromium on PATH (chromium, chromium-browser or google-chrome): the browser tests need one; "
                    "on Debian: apt-get install chromium")
    b = Browser(exe)
    try:
        yield b
    finally:
        b.close()
