"""A headless Chromium driven over the Chrome DevTools protocol, standard library only.

The protocol is JSON over one websocket. The client here speaks just enough of RFC 6455 for it
(text frames out, masked as a client must; text, continuation and close frames in), so the
browser spec needs no package beyond the browser itself."""
from __future__ import annotations

import base64
import json
import os
import re
import socket
import struct
import subprocess
import urllib.request
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0")


class WebSocket:
    def __init__(self, url: str, timeout: float = 30):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(f"websocket handshake refused: {head[:80]!r}")

    def _exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the browser closed the connection")
            data += chunk
        return data

    def send(self, text: str) -> None:
        payload, mask = text.encode(), os.urandom(4)
        n = len(payload)
        head = struct.pack("!BB", 0x81, 0x80 | n) if n < 126 else \
            struct.pack("!BBH", 0x81, 0xFE, n) if n < 65536 else struct.pack("!BBQ", 0x81, 0xFF, n)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._exact(8))[0]
            payload = self._exact(n)
            if b0 & 0x0F == 0x8:
                raise ConnectionError("the browser closed the websocket")
            message += payload
            if b0 & 0x80:
                return message.decode()


class Browser:
    """One Chromium process and its first page. Console errors and uncaught exceptions are
    collected in `errors` as they arrive."""

    def __init__(self, executable: str, user_data_dir: Path, width: int = 1100, height: int = 760):
        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={user_data_dir}",
                                      "about:blank"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        port = None
        for line in self.proc.stderr:
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                port = m.group(1)
                break
        if port is None:
            raise RuntimeError("chromium exited before it opened the DevTools port")
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = WebSocket(page["webSocketDebuggerUrl"])
        self.next_id, self.events, self.errors = 0, [], []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _event(self, msg: dict) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(json.dumps(params.get("args"))[:200])
        elif method == "Runtime.exceptionThrown":
            self.errors.append(params["exceptionDetails"].get("text", "exception"))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(params["entry"].get("text", ""))
        self.events.append(method)

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def wait_for(self, method: str) -> None:
        while method not in self.events:
            self._event(json.loads(self.ws.recv()))
        self.events.clear()

    def goto(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def click_and_load(self, selector: str) -> None:
        self.events.clear()
        self.js(f"document.querySelector({json.dumps(selector)}).click()")
        self.wait_for("Page.loadEventFired")

    def screenshot(self, path: Path, clip: dict | None = None) -> None:
        """The viewport, or with clip ({x, y, width, height} in page coordinates) that region."""
        extra = {"clip": {**clip, "scale": 1}, "captureBeyondViewport": True} if clip else {}
        Path(path).write_bytes(base64.b64decode(self.call("Page.captureScreenshot",
                                                          format="png", **extra)["data"]))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
