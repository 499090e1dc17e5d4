"""A tiny headless-Chromium driver over the DevTools protocol, standard library only.

Used by tests/test_ui_browser.py and tools/screenshot.py. It launches Chromium with a
throw-away profile, reads the DevTools port from DevToolsActivePort, speaks a minimal
websocket (RFC 6455, client side) and offers a handful of helpers: navigate, evaluate,
click at an element, type text, screenshot.
"""
import base64
import collections
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    """Path of a Chromium binary, or None. GRAPHMEM_CHROMIUM overrides the search."""
    env = os.environ.get("GRAPHMEM_CHROMIUM")
    if env and os.path.exists(env):
        return env
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class CDPError(RuntimeError):
    pass


class WebSocket:
    """Just enough of a websocket client for DevTools: text frames, ping/pong, close."""

    GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, host, port, path, timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        req = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, host, port, key))
        self.sock.sendall(req.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise CDPError("websocket handshake: connection closed")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in lines[0] + " ":
            raise CDPError("websocket handshake refused: " + lines[0])
        want = base64.b64encode(hashlib.sha1((key + self.GUID).encode()).digest()).decode()
        headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        if headers.get("sec-websocket-accept") != want:
            raise CDPError("websocket handshake: bad accept key")

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise CDPError("websocket closed by peer")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send_frame(self, opcode, payload):
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send(self, text):
        self._send_frame(0x1, text.encode("utf-8"))

    def recv(self):
        """Next complete text message (str). Answers pings; raises on close."""
        parts, first_op = [], None
        while True:
            b1, b2 = self._read(2)
            fin, opcode = b1 & 0x80, b1 & 0x0F
            n = b2 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b2 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 0x9:
                self._send_frame(0xA, data)
                continue
            if opcode == 0xA:
                continue
            if opcode == 0x8:
                raise CDPError("websocket closed")
            if opcode in (0x1, 0x2):
                first_op, parts = opcode, [data]
            elif opcode == 0x0:
                parts.append(data)
            if fin and first_op is not None:
                return b"".join(parts).decode("utf-8")

    def settimeout(self, t):
        self.sock.settimeout(t)

    def close(self):
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class Browser:
    """Headless Chromium with one page attached (flat session)."""

    def __init__(self, binary=None, width=1280, height=800, color_scheme="light", timeout=20.0):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise CDPError("no chromium binary found")
        self.profile = tempfile.mkdtemp(prefix="graphmem-chromium-")
        args = [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--disable-extensions", "--disable-dev-shm-usage", "--mute-audio", "--hide-scrollbars",
                "--remote-debugging-port=0", "--user-data-dir=" + self.profile,
                "--window-size=%d,%d" % (width, height), "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.events = collections.deque(maxlen=5000)
        self.next_id = 0
        self.ws = None
        try:
            port, path = self._devtools_port(timeout)
            self.ws = WebSocket("127.0.0.1", port, path)
            target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
            self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                     session=False)["sessionId"]
            for domain in ("Page.enable", "Runtime.enable"):
                self.call(domain)
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
            if color_scheme:
                self.call("Emulation.setEmulatedMedia",
                          {"features": [{"name": "prefers-color-scheme", "value": color_scheme}]})
        except Exception:
            self.close()
            raise

    def _devtools_port(self, timeout):
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise CDPError("chromium exited with code %s" % self.proc.returncode)
            try:
                with open(path) as fh:
                    lines = fh.read().split()
                if len(lines) >= 2:
                    return int(lines[0]), lines[1]
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.05)
        raise CDPError("chromium did not open its DevTools port")

    # -- protocol --------------------------------------------------------------
    def call(self, method, params=None, session=True, timeout=15.0):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise CDPError("timeout waiting for %s" % method)
            self.ws.settimeout(left)
            try:
                data = json.loads(self.ws.recv())
            except socket.timeout:
                raise CDPError("timeout waiting for %s" % method)
            if data.get("id") == mid:
                if "error" in data:
                    raise CDPError("%s: %s" % (method, data["error"]))
                return data.get("result", {})
            if "method" in data:
                self.events.append(data)

    def pump(self, seconds):
        """Collect events for a while."""
        deadline = time.time() + seconds
        while True:
            left = deadline - time.time()
            if left <= 0:
                return
            self.ws.settimeout(left)
            try:
                data = json.loads(self.ws.recv())
            except socket.timeout:
                return
            if "method" in data:
                self.events.append(data)

    def wait_event(self, method, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for ev in list(self.events):
                if ev["method"] == method:
                    self.events.remove(ev)
                    return ev
            self.pump(0.05)
        raise CDPError("timeout waiting for event " + method)

    def events_named(self, method):
        return [ev for ev in self.events if ev["method"] == method]

    # -- helpers -----------------------------------------------------------------
    def navigate(self, url, timeout=15.0):
        self.events.clear()
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", timeout)

    def evaluate(self, expression, timeout=15.0):
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in res:
            det = res["exceptionDetails"]
            raise CDPError("JS error: %s" % (det.get("exception", {}).get("description") or det.get("text")))
        return res.get("result", {}).get("value")

    def wait_for(self, expression, timeout=10.0, interval=0.05):
        """Poll a JS expression until it is truthy; return its value."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = self.evaluate(expression)
            if last:
                return last
            self.pump(interval)
        raise CDPError("timeout waiting for: %s (last value %r)" % (expression, last))

    def center_of(self, selector_js):
        """Viewport centre of the element a JS expression returns (scrolled into view)."""
        box = self.evaluate("(() => { const el = %s; if (!el) return null; el.scrollIntoView && el.scrollIntoView({block: 'center'});"
                            " const r = el.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()" % selector_js)
        if not box:
            raise CDPError("element not found: " + selector_js)
        return box

    def click_at(self, x, y):
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            params = {"type": kind, "x": x, "y": y, "button": "left" if kind != "mouseMoved" else "none"}
            if kind != "mouseMoved":
                params["clickCount"] = 1
            self.call("Input.dispatchMouseEvent", params)

    def click(self, selector_js):
        x, y = self.center_of(selector_js)
        self.click_at(x, y)

    def type_text(self, text):
        self.call("Input.insertText", {"text": text})

    def press(self, key, code=None, key_code=None):
        base = {"key": key, "code": code or key, "windowsVirtualKeyCode": key_code or 0}
        self.call("Input.dispatchKeyEvent", dict(base, type="keyDown"))
        self.call("Input.dispatchKeyEvent", dict(base, type="keyUp"))

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(data))

    def close(self):
        try:
            if self.ws:
                try:
                    self.call("Browser.close", session=False, timeout=3)
                except Exception:
                    pass
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
