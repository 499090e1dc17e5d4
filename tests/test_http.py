"""MCP over Streamable HTTP (graphmem --http): real server processes, real sockets."""
from __future__ import annotations

import http.client
import json
import os
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, SERVER

TOKEN = "test-token-0123456789abcdef"
MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "pytest-http", "version": "1"}}


class HttpServer:
    """A real `memory_server.py --http 127.0.0.1:0` child; the bound port is read from its stderr."""

    def __init__(self, tmp: Path, *args: str, token: str | None = TOKEN, env: dict[str, str] | None = None,
                 own_file: bool = True, bind: str = "127.0.0.1:0"):
        self.memory_file = tmp / "mem" / "memory.jsonl" if own_file else None
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp),
                    "XDG_DATA_HOME": str(tmp / "xdg")}
        if self.memory_file:
            self.memory_file.parent.mkdir(parents=True, exist_ok=True)
            full_env["MEMORY_FILE_PATH"] = str(self.memory_file)
        if token:
            full_env["MEMORY_HTTP_TOKEN"] = token
        full_env.update(env or {})
        self.token = token
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--http", bind, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=full_env, cwd=str(tmp))
        self.stderr: list[str] = []
        self.port = None
        ready = threading.Event()

        def pump() -> None:
            for raw in iter(self.proc.stderr.readline, b""):
                line = raw.decode("utf-8", "replace")
                self.stderr.append(line)
                if "MCP over Streamable HTTP at" in line:
                    self.port = int(line.split("/mcp")[0].rsplit(":", 1)[1])
                    self.scheme = line.split(" at ")[1].split(":")[0]
                if "graph loaded" in line or "background load stopped" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        ready.wait(20)
        assert self.port, "".join(self.stderr)

    def stderr_text(self) -> str:
        return "".join(self.stderr)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # ── requests ──
    def connect(self, timeout: float = 20.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def post(self, body, headers: dict[str, str] | None = None, auth: bool = True, conn=None, path: str = "/mcp"):
        """(status, headers dict lower-cased, parsed JSON body or raw text or None)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if auth:
            h["Authorization"] = f"Bearer {self.token}"
        h.update(headers or {})
        own = conn is None
        conn = conn or self.connect()
        try:
            conn.request("POST", path, body=data, headers=h)
            return read_response(conn.getresponse())
        finally:
            if own:
                conn.close()

    def send(self, method: str, verb: str = "GET", headers: dict[str, str] | None = None, auth: bool = True):
        conn = self.connect()
        h = {"Authorization": f"Bearer {self.token}"} if auth else {}
        h.update(headers or {})
        conn.request(verb, "/mcp", headers=h)
        try:
            return read_response(conn.getresponse())
        finally:
            conn.close()

    def initialize(self, version: str = "2025-11-25", conn=None, client: str = "pytest-http") -> tuple[str, dict]:
        status, headers, reply = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": client, "version": "1"}}},
            conn=conn)
        assert status == 200, reply
        sid = headers["mcp-session-id"]
        status, _, _ = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                                 {"Mcp-Session-Id": sid, "MCP-Protocol-Version": version}, conn=conn)
        assert status == 202
        return sid, reply

    def legacy(self, sid: str, method: str, params: dict | None = None, rid: int = 2, conn=None,
               version: str = "2025-11-25"):
        message = {"jsonrpc": "2.0", "id": rid, "method": method, **({"params": params} if params is not None else {})}
        return self.post(message, {"Mcp-Session-Id": sid, "MCP-Protocol-Version": version}, conn=conn)

    def call(self, sid: str, tool: str, arguments: dict, conn=None) -> tuple[str, bool]:
        status, _, reply = self.legacy(sid, "tools/call", {"name": tool, "arguments": arguments}, conn=conn)
        assert status == 200, reply
        result = reply["result"]
        return result["content"][0]["text"], result["isError"]

    def modern(self, method: str, params: dict | None = None, headers: dict[str, str] | None = None, rid="m1"):
        params = {**(params or {}), "_meta": META}
        h = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if method == "tools/call":
            h["Mcp-Name"] = params["name"]
        h.update(headers or {})
        return self.post({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}, h)


def read_response(res: http.client.HTTPResponse):
    raw = res.read()
    headers = {k.lower(): v for k, v in res.getheaders()}
    ctype = headers.get("content-type", "")
    if not raw:
        return res.status, headers, None
    if ctype.startswith("application/json"):
        return res.status, headers, json.loads(raw)
    if ctype.startswith("text/event-stream"):
        return res.status, headers, raw.decode()
    return res.status, headers, raw.decode()


def sse_messages(text: str) -> list[dict]:
    return [json.loads(line[5:].strip()) for line in text.splitlines() if line.startswith("data:")]


def graph_lines(path: Path) -> list[dict]:
    """Every line of the graph file parsed (a half-written file fails here)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = HttpServer(tmp_path_factory.mktemp("http"))
    yield s
    s.stop()


# ── auth, Origin, Host ──
def test_no_token_and_wrong_token_get_401_with_a_challenge_and_the_right_one_gets_in(srv):
    status, headers, body = srv.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, auth=False)
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert "Authorization: Bearer" in body
    status, headers, body = srv.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                     {"Authorization": "Bearer " + TOKEN[:-1] + "X"}, auth=False)
    assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"] and "wrong token" in body
    status, _, _ = srv.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            {"Authorization": "Basic " + TOKEN}, auth=False)
    assert status == 401
    for verb in ("GET", "DELETE"):
        assert srv.send("", verb, auth=False)[0] == 401
    sid, reply = srv.initialize()
    assert reply["result"]["serverInfo"]["name"] == "graphmem"


def test_a_page_from_another_origin_gets_403_even_with_the_token(srv):
    status, _, body = srv.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                               {"Origin": "https://evil.example"})
    assert status == 403 and body["error"]["code"] == -32600 and "id" in body and body["id"] is None
    assert "evil.example" in body["error"]["message"]
    for origin in ("http://localhost:6274", "http://127.0.0.1:9"):
        status, _, _ = srv.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                 "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}, {"Origin": origin})
        assert status == 200, origin
    assert srv.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, {"Origin": "null"})[0] == 403


def test_allow_origin_admits_one_more_origin(tmp_path):
    s = HttpServer(tmp_path, "--allow-origin", "https://app.example")
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
        assert s.post(body, {"Origin": "https://app.example"})[0] == 200
        assert s.post(body, {"Origin": "https://other.example"})[0] == 403
    finally:
        s.stop()


def test_dns_rebinding_a_foreign_host_header_gets_403(srv):
    for host in (f"evil.example:{srv.port}", f"127.0.0.1:{srv.port + 1}", "localhost"):
        status, _, body = srv.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {"Host": host})
        assert status == 403 and "Host" in body, host
    assert srv.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                    {"Host": f"localhost:{srv.port}"})[0] == 200


def test_allow_host_admits_a_name_a_reverse_proxy_passes_on(tmp_path):
    s = HttpServer(tmp_path, "--allow-host", "mem.example")
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
        assert s.post(body, {"Host": "mem.example"})[0] == 200
        assert s.post(body, {"Host": "other.example"})[0] == 403
    finally:
        s.stop()


def test_a_generated_token_is_printed_once_on_stderr_and_works(tmp_path):
    s = HttpServer(tmp_path, token=None)
    try:
        lines = [line for line in s.stderr if "token" in line and "shown once" in line]
        assert len(lines) == 1
        s.token = lines[0].rsplit(" ", 1)[1].strip()
        assert len(s.token) >= 40
        assert s.stderr_text().count(s.token) == 1
        s.initialize()
        assert not list(tmp_path.rglob("*.log"))
    finally:
        s.stop()


def test_bad_bind_values_and_short_tokens_are_refused_with_a_message(tmp_path):
    env = {"PATH": os.environ.get("PATH", ""), "MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}
    done = subprocess.run([sys.executable, str(SERVER), "--http", "nohost:port"], capture_output=True, env=env,
                          timeout=30)
    assert done.returncode == 2 and b"HOST:PORT" in done.stderr
    done = subprocess.run([sys.executable, str(SERVER), "--http", "0"], capture_output=True, timeout=30,
                          env={**env, "MEMORY_HTTP_TOKEN": "short"})
    assert done.returncode == 2 and b"at least 16" in done.stderr


def test_a_non_loopback_bind_warns_on_stderr(tmp_path):
    s = HttpServer(tmp_path, bind="0.0.0.0:0", token=TOKEN + "-wide")
    try:
        assert "warning: listening on 0.0.0.0, not loopback" in s.stderr_text()
        assert "plain HTTP" in s.stderr_text()
    finally:
        s.stop()


# ── request shape and limits ──
def test_a_body_over_the_limit_gets_413_without_being_read_and_the_server_keeps_serving(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nAuthorization: Bearer {TOKEN}\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {5 * 1024 * 1024}\r\n\r\n").encode()
                     + b"[" * 1000)
        answer = b""
        while b"limit" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        answer = answer.decode()
    assert answer.startswith("HTTP/1.1 413") and "limit" in answer
    assert srv.initialize()[1]["result"]


def test_bad_bodies_get_clear_errors(srv):
    assert srv.post(b"{not json", {})[2]["error"]["code"] == -32700
    status, _, text = srv.post(b"{}", {"Content-Type": "text/plain"})
    assert status == 415 and "application/json" in text
    status, _, text = srv.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, path="/other")
    assert status == 404 and "/mcp" in text


def test_get_is_405_no_server_stream(srv):
    status, headers, text = srv.send("", "GET", {"Accept": "text/event-stream"})
    assert status == 405 and "POST" in headers["allow"]


def test_a_slow_client_does_not_stall_the_others(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as slow:
        slow.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1")  # and then nothing
        started = time.monotonic()
        sid, _ = srv.initialize()
        text, _ = srv.call(sid, "read_graph", {})
        assert time.monotonic() - started < 5
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as slow_body:
        slow_body.sendall((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nAuthorization: Bearer {TOKEN}\r\n"
                           "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{").encode())
        started = time.monotonic()
        srv.call(sid, "read_graph", {})
        assert time.monotonic() - started < 5


# ── the handshake era (2025-11-25): sessions ──
def test_legacy_era_initialize_list_call_with_a_session(srv):
    sid, reply = srv.initialize()
    assert reply["result"]["protocolVersion"] == "2025-11-25"
    status, _, listing = srv.legacy(sid, "tools/list")
    names = {t["name"] for t in listing["result"]["tools"]}
    assert {"create_entities", "search_nodes", "recall"} <= names
    text, is_error = srv.call(sid, "create_entities", {"entities": [
        {"name": "Http_Legacy", "entityType": "service", "observations": ["answers on port 8443"]}]})
    assert not is_error and "Http_Legacy" in text
    text, _ = srv.call(sid, "search_nodes", {"query": "port 8443"})
    assert "Http_Legacy" in text
    assert srv.legacy(sid, "ping")[2]["result"] == {}


def test_legacy_requests_need_a_known_session_and_the_negotiated_version(srv):
    status, _, body = srv.post({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})
    assert status == 400 and "Mcp-Session-Id" in body["error"]["message"] and body["id"] == 5
    status, _, body = srv.post({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, {"Mcp-Session-Id": "nope"})
    assert status == 404 and "initialize" in body["error"]["message"]
    sid, _ = srv.initialize()
    status, _, body = srv.legacy(sid, "tools/list", version="2024-11-05")
    assert status == 400 and "2025-11-25" in body["error"]["message"]
    assert srv.post({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}, {"Mcp-Session-Id": sid})[0] == 200


def test_delete_ends_a_session(srv):
    sid, _ = srv.initialize()
    assert srv.send("", "DELETE", {"Mcp-Session-Id": sid})[0] == 204
    assert srv.legacy(sid, "tools/list")[0] == 404
    assert srv.send("", "DELETE", {"Mcp-Session-Id": sid})[0] == 404
    status, _, reply = srv.send("", "DELETE")
    assert status == 400 and "DELETE ends a session" in json.dumps(reply), reply  # not "send initialize first"


def test_an_older_legacy_version_is_negotiated_per_session(srv):
    sid, reply = srv.initialize("2025-03-26")
    assert reply["result"]["protocolVersion"] == "2025-03-26"
    status, _, batch = srv.post([{"jsonrpc": "2.0", "id": 7, "method": "tools/list"},
                                 {"jsonrpc": "2.0", "id": 8, "method": "ping"}],
                                {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-03-26"})
    assert status == 200 and [r["id"] for r in batch] == [7, 8]
    assert "title" not in batch[0]["result"]["tools"][0]  # the 2025-03-26 listing


def test_sse_when_the_client_prefers_it(srv):
    message = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}
    status, headers, text = srv.post(message, {"Accept": "text/event-stream"})
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert headers["x-accel-buffering"] == "no" and "mcp-session-id" in headers
    [reply] = sse_messages(text)
    assert reply["result"]["protocolVersion"] == "2025-11-25"
    status, headers, _ = srv.post(message, {"Accept": "application/json;q=0.5, text/event-stream"})
    assert headers["content-type"] == "text/event-stream"
    status, headers, _ = srv.post(message)  # both listed, as the spec asks: JSON
    assert headers["content-type"] == "application/json"


def test_32_clients_connecting_at_once_are_all_answered(srv):
    """socketserver's default listen backlog (5) reset 13 of 32 connections opened at the same moment."""
    errors: list[str] = []
    barrier = threading.Barrier(32)

    def client() -> None:
        conn = srv.connect()
        barrier.wait()
        try:
            status, _, reply = srv.post(
                {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}},
                {"MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"}, conn=conn)
            if status != 200:
                errors.append(str(status))
        except OSError as err:
            errors.append(repr(err))
        finally:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]


def test_keep_alive_serves_many_requests_on_one_connection(srv):
    conn = srv.connect()
    try:
        sid, _ = srv.initialize(conn=conn)
        for i in range(5):
            text, _ = srv.call(sid, "read_graph", {}, conn=conn)
    finally:
        conn.close()


# ── the stateless era (2026-07-28) ──
def test_modern_era_discover_list_call_without_sessions(srv):
    status, headers, reply = srv.modern("server/discover")
    assert status == 200 and "mcp-session-id" not in headers
    assert reply["result"]["supportedVersions"] == [MODERN] and reply["result"]["resultType"] == "complete"
    status, _, listing = srv.modern("tools/list", rid=2)
    assert {"create_entities", "recall"} <= {t["name"] for t in listing["result"]["tools"]}
    status, _, reply = srv.modern("tools/call", {"name": "create_entities", "arguments": {"entities": [
        {"name": "Http_Modern", "entityType": "service", "observations": ["stateless call works"]}]}}, rid=3)
    assert status == 200 and not reply["result"]["isError"] and reply["result"]["resultType"] == "complete"
    status, _, reply = srv.modern("tools/call", {"name": "open_nodes", "arguments": {"names": ["Http_Modern"]}},
                                  {"Mcp-Session-Id": "ignored"})
    assert "stateless call works" in reply["result"]["content"][0]["text"]


def test_modern_era_header_rules(srv):
    status, _, reply = srv.modern("tools/list", headers={"MCP-Protocol-Version": "2025-11-25"})
    assert status == 400 and reply["error"]["code"] == -32020 and reply["id"] == "m1"
    status, _, reply = srv.modern("tools/list", headers={"Mcp-Method": "tools/call"})
    assert status == 400 and reply["error"]["code"] == -32020
    status, _, reply = srv.modern("tools/call", {"name": "read_graph", "arguments": {}}, {"Mcp-Name": "recall"})
    assert status == 400 and "Mcp-Name" in reply["error"]["message"]
    import base64
    encoded = "=?base64?" + base64.b64encode(b"read_graph").decode() + "?="
    assert srv.modern("tools/call", {"name": "read_graph", "arguments": {}}, {"Mcp-Name": encoded})[0] == 200
    status, _, reply = srv.post({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": META}})
    assert status == 400 and "MCP-Protocol-Version header is missing" in reply["error"]["message"]
    old = {**META, "io.modelcontextprotocol/protocolVersion": "1999-01-01"}
    status, _, reply = srv.post({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": old}},
                                {"MCP-Protocol-Version": "1999-01-01", "Mcp-Method": "tools/list"})
    assert status == 400 and reply["error"]["code"] == -32022 and reply["error"]["data"]["supported"] == [MODERN]
    status, _, reply = srv.modern("resources/list")
    assert status == 404 and reply["error"]["code"] == -32601
    no_meta = {"jsonrpc": "2.0", "id": 11, "method": "tools/list", "params": {}}
    status, _, reply = srv.post(no_meta, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})
    assert status == 400 and reply["error"]["code"] == -32602 and reply["id"] == 11
    discover = {"jsonrpc": "2.0", "id": 12, "method": "server/discover", "params": {}}
    status, _, reply = srv.post(discover, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"})
    assert status == 400 and reply["error"]["code"] == -32602 and reply["id"] == 12
    half_meta = {**no_meta, "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}}
    status, _, reply = srv.post(half_meta, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})
    assert status == 400 and reply["error"]["code"] == -32602 and "clientCapabilities" in reply["error"]["message"]
    status, _, reply = srv.modern("tools/call", {"name": "no_such_tool", "arguments": {}})
    assert status == 200 and reply["error"]["code"] == -32602  # a JSON-RPC error about the call, not the request


# ── concurrency and failure ──
def test_four_concurrent_clients_writing_25_facts_each_lose_nothing(tmp_path):
    s = HttpServer(tmp_path)
    errors: list[str] = []

    def client(n: int) -> None:
        try:
            conn = s.connect()
            sid, _ = s.initialize(conn=conn, client=f"client-{n}")
            for j in range(25):
                fact = {"name": f"client{n}-fact{j}", "entityType": "note",
                        "observations": [f"client {n} wrote fact {j}"]}
                text, is_error = s.call(sid, "create_entities", {"entities": [fact]}, conn=conn)
                if is_error:
                    errors.append(text)
            conn.close()
        except Exception as err:  # surfaced below
            errors.append(repr(err))

    try:
        threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[:3]
        names = {line["name"] for line in graph_lines(s.memory_file) if line["type"] == "entity"}
        assert names == {f"client{n}-fact{j}" for n in range(4) for j in range(25)}
        # one shared Memory, yet each write is recorded for the client that made it
        db = sqlite3.connect(s.memory_file.parent / "memory.db")
        rows = db.execute("SELECT client, summary FROM history").fetchall()
        db.close()
        assert len(rows) == 100
        assert all(f"client{client[-1]}-fact" in summary for client, summary in rows), rows[:3]
        assert {client for client, _ in rows} == {f"client-{n}" for n in range(4)}
    finally:
        s.stop()


KILLED_CLIENT = r"""
import json, socket, sys
port, token, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
entities = [{"name": f"Killed_{i}", "entityType": "note", "observations": [f"fact {i} " + "x" * 200]} for i in range(n)]
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "create_entities", "arguments": {"entities": entities}, "_meta": meta}}).encode()
head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\n"
        f"Mcp-Name: create_entities\r\nContent-Length: {len(body)}\r\n\r\n").encode()
s = socket.create_connection(("127.0.0.1", port))
half = sys.argv[4] == "half"
s.sendall(head + (body[: len(body) // 2] if half else body))
print("sent", flush=True)
sys.stdin.read()  # wait here until killed
"""


@pytest.mark.parametrize("how", ["whole", "half"])
def test_a_client_killed_mid_request_leaves_the_file_intact_and_the_server_serving(tmp_path, how):
    s = HttpServer(tmp_path)
    try:
        sid, _ = s.initialize()
        s.call(sid, "create_entities", {"entities": [{"name": "Before", "entityType": "note",
                                                      "observations": ["kept"]}]})
        client = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, str(s.port), TOKEN, "400", how],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert client.stdout.readline() == b"sent\n"
        client.kill()  # SIGKILL: the socket goes away with the process, mid-request
        client.wait()
        time.sleep(0.5)
        text, is_error = s.call(sid, "open_nodes", {"names": ["Before"]})  # still serving
        assert "kept" in text
        deadline = time.monotonic() + 20
        while True:  # the whole call either landed whole, or (half a body) not at all
            names = {line["name"] for line in graph_lines(s.memory_file) if line["type"] == "entity"}
            killed = {n for n in names if n.startswith("Killed_")}
            if how == "half" or len(killed) == 400 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "Before" in names
        assert killed == (set() if how == "half" else {f"Killed_{i}" for i in range(400)})
        assert not list(s.memory_file.parent.glob("*.tmp"))
        assert "Traceback" not in s.stderr_text()
    finally:
        s.stop()


# ── per-request project ──
def test_the_project_header_picks_the_project_graph_and_a_bad_path_gets_400(tmp_path):
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    (project / ".graphmem").mkdir()
    (project / "src").mkdir()
    s = HttpServer(tmp_path, own_file=False)  # no MEMORY_FILE_PATH: tiers as MEMORY_PROJECT_ROOT gives them
    try:
        sid, _ = s.initialize()
        body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "create_entities", "arguments": {
            "entities": [{"name": "Proj_Fact", "entityType": "note", "observations": ["lives in the project"]}]}}}
        headers = {"Mcp-Session-Id": sid, "X-Graphmem-Project": str(project / "src")}
        status, _, reply = s.post(body, headers)
        assert status == 200 and not reply["result"]["isError"], reply
        team = project / ".graphmem" / "memory.jsonl"
        assert [line["name"] for line in graph_lines(team)] == ["Proj_Fact"]
        text, _ = s.call(sid, "search_nodes", {"query": "lives in the project"})  # no header: the server's own
        assert "Proj_Fact" not in text
        for bad, words in ((str(tmp_path / "missing"), "no folder"), ("relative/path", "absolute path")):
            status, _, reply = s.post(body, {"Mcp-Session-Id": sid, "X-Graphmem-Project": bad})
            assert status == 400 and reply["id"] == body["id"], reply  # JSON-RPC, so a client shows the reason
            text = reply["error"]["message"]
            assert words in text and "X-Graphmem-Project" in text, text
    finally:
        s.stop()


# ── TLS ──
def test_tls_with_a_self_signed_certificate(tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed: cannot make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    s = HttpServer(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert s.scheme == "https"
        import ssl
        context = ssl.create_default_context(cafile=str(cert))
        with socket.create_connection(("127.0.0.1", s.port), timeout=10):  # connects, never says hello
            conn = http.client.HTTPSConnection("127.0.0.1", s.port, context=context, timeout=10)
            started = time.monotonic()
            sid, _ = s.initialize(conn=conn)
            assert time.monotonic() - started < 5
            conn.close()
        plain = s.connect(timeout=5)
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            plain.request("POST", "/mcp", body=b"{}", headers={"Content-Type": "application/json"})
            plain.getresponse().read()
    finally:
        s.stop()
    done = subprocess.run([sys.executable, str(SERVER), "--http", "0", "--tls-cert", str(cert)], capture_output=True,
                          timeout=30, env={"PATH": os.environ.get("PATH", ""), "MEMORY_HTTP_TOKEN": TOKEN,
                                           "MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")})
    assert done.returncode == 2 and b"--tls-key" in done.stderr


# ── --config CLIENT --http URL ──
def test_remote_configs_name_the_url_and_never_paste_the_token(tmp_path):
    import memory_server as ms
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "MEMORY_HTTP_TOKEN": TOKEN}
    expanding = {"claude-code": "${MEMORY_HTTP_TOKEN}", "cursor": "${env:MEMORY_HTTP_TOKEN}",
                 "vscode": "${input:graphmem-token}", "gemini": "$MEMORY_HTTP_TOKEN",
                 "windsurf": "${env:MEMORY_HTTP_TOKEN}", "opencode": "{env:MEMORY_HTTP_TOKEN}",
                 "codex": 'bearer_token_env_var = "MEMORY_HTTP_TOKEN"'}
    for client in ms.CLIENTS:
        done = subprocess.run([sys.executable, str(SERVER), "--config", client, "--http", "http://10.1.2.3:8000"],
                              capture_output=True, env=env, timeout=30)
        out, err = done.stdout.decode(), done.stderr.decode()
        assert done.returncode == 0, err
        assert "http://10.1.2.3:8000/mcp" in out and TOKEN not in out + err, client
        if client == "codex":
            import tomllib
            assert tomllib.loads(out)["mcp_servers"]["graphmem"]["url"] == "http://10.1.2.3:8000/mcp"
        else:
            json.loads(out)
        if client in expanding:
            assert expanding[client] in out, client
        else:
            assert "<paste the token>" in out and "does not expand" in err, client
        assert "token in clear" in err  # plain http to another host
    done = subprocess.run([sys.executable, str(SERVER), "--config", "cursor", "--http", "ftp://x"], capture_output=True,
                          env=env, timeout=30)
    assert done.returncode == 2 and b"URL" in done.stderr


def test_remote_config_takes_a_port_alone_and_refuses_port_0(tmp_path):
    """`--config CLIENT --http 8000` mirrors `graphmem --http 8000`: the server on this machine, not host "8000";
    port 0 (serve on any free port) is no address a client can use."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    for given in ("8000", ":8000", "127.0.0.1:8000", "http://127.0.0.1:8000/mcp/"):
        done = subprocess.run([sys.executable, str(SERVER), "--config", "cursor", "--http", given],
                              capture_output=True, env=env, timeout=30)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["mcpServers"]["graphmem"]["url"] == "http://127.0.0.1:8000/mcp", given
        assert b"in clear" not in done.stderr
    for given in ("0", "127.0.0.1:0", "http://h:99999/mcp"):
        done = subprocess.run([sys.executable, str(SERVER), "--config", "cursor", "--http", given],
                              capture_output=True, env=env, timeout=30)
        assert done.returncode == 2 and b"the port it printed" in done.stderr and not done.stdout, given


def test_hooks_with_a_remote_url_are_refused_not_ignored(tmp_path):
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(SERVER), "--config", "codex", "--hooks", "--http", "8000"],
                          capture_output=True, env=env, timeout=30)
    assert done.returncode == 2 and b"--hooks goes without --http" in done.stderr and not done.stdout


def test_the_cli_alternative_of_a_stdio_config_carries_its_settings(tmp_path):
    """`# paste into ... (or: claude mcp add ...)` must start the same server the JSON does: with the settings
    set here (quoted), after the server's name (claude's -e is variadic and would take the name)."""
    graph = tmp_path / "my memory" / "memory.jsonl"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "MEMORY_FILE_PATH": str(graph),
           "MEMORY_OBS_MAX": "9"}
    def hint(client: str) -> list[str]:
        done = subprocess.run([sys.executable, str(SERVER), "--config", client], capture_output=True, env=env,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        line = done.stderr.splitlines()[0]
        return shlex.split(line[line.index("(or: ") + 5:line.rindex(")")])
    words = hint("claude-code")
    assert words[:5] == ["claude", "mcp", "add", "-s", "user"] and words[5] == "graphmem"
    assert words[6:11] == ["-e", f"MEMORY_FILE_PATH={graph}", "-e", "MEMORY_OBS_MAX=9", "--"]
    words = hint("codex")
    assert words[3] == "graphmem" and words[4:9] == ["--env", f"MEMORY_FILE_PATH={graph}", "--env",
                                                     "MEMORY_OBS_MAX=9", "--"]
    words = hint("gemini")
    assert words[5] == "graphmem" and words[-4:] == ["-e", f"MEMORY_FILE_PATH={graph}", "-e", "MEMORY_OBS_MAX=9"]


def test_claude_desktop_bridge_allows_plain_http_only_beyond_loopback(tmp_path):
    """mcp-remote refuses a plain http URL that is not localhost unless given --allow-http; loopback and https
    need no flag."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    def args(url: str) -> list[str]:
        done = subprocess.run([sys.executable, str(SERVER), "--config", "claude-desktop", "--http", url],
                              capture_output=True, env=env, timeout=30)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["mcpServers"]["graphmem"]["args"]
    assert args("http://10.1.2.3:8000")[:4] == ["-y", "mcp-remote", "http://10.1.2.3:8000/mcp", "--allow-http"]
    assert "--allow-http" not in args("http://127.0.0.1:8000") and "--allow-http" not in args("https://mem.example")


# ── the official Python SDK's Streamable HTTP client ──
def sdk_python() -> str | None:
    """A Python with the `mcp` package: this one, after installing it into the test venv when we are in one."""
    probe = [sys.executable, "-c", "import mcp.client.streamable_http"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return sys.executable
    if sys.prefix == sys.base_prefix:
        return None  # not a venv: never install into a system Python
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "mcp==2.3.0"], capture_output=True, timeout=600)
    return sys.executable if subprocess.run(probe, capture_output=True).returncode == 0 else None


def test_the_official_python_sdk_connects_lists_and_calls_over_http(srv):
    python = sdk_python()
    if python is None:
        pytest.skip("the mcp package could not be installed into the test venv (PyPI unreachable?)")
    done = subprocess.run([python, str(ROOT / "tools" / "sdk_client_check.py"), "--http",
                           f"http://127.0.0.1:{srv.port}/mcp", "--token", TOKEN, "--timeout", "60"],
                          capture_output=True, timeout=180)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()[-2000:]
    for check in ("session-initialize", "session-list_tools", "session-call-create_entities",
                  "session-call-search_nodes", "client-auto-connect", "client-auto-call-read_graph"):
        assert f"PASS {check}" in out, out
    assert "path=modern(adopted server/discover)" in out


def test_project_graphs_kept_loaded_are_bounded_and_the_servers_own_stays(tmp_path, monkeypatch):
    """X-Graphmem-Project names any folder: the server keeps the most recently used HTTP_PROJECTS_KEPT project
    graphs loaded and drops the least recently used (it loads again when asked for); its own graph stays."""
    import memory_server as ms
    monkeypatch.setattr(ms, "HTTP_PROJECTS_KEPT", 2)
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg"),
           "MEMORY_FILE_PATH": str(tmp_path / "own" / "memory.jsonl")}
    mcp = ms.HttpMcp(ms.Settings.from_env(env), env, TOKEN, "127.0.0.1")
    own = mcp.memory_for(None)
    folders = []
    for name in "abcd":
        folder = tmp_path / name
        folder.mkdir()
        folders.append(str(folder))
    first = mcp.memory_for(folders[0])
    for folder in folders[1:]:
        mcp.memory_for(folder)
    assert len(mcp._memories) == 3  # its own + the two most recently used projects
    assert mcp.memory_for(None) is own
    assert mcp.memory_for(folders[3]) is mcp.memory_for(folders[3])  # kept: the same Memory
    assert mcp.memory_for(folders[0]) is not first  # dropped, then loaded again


def test_an_option_without_the_one_it_belongs_to_is_refused_not_a_silent_stdio_server(tmp_path):
    """`graphmem --dry-run` or `graphmem --tls-cert x` once started the stdio server and sat waiting for JSON-RPC
    on the terminal."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}
    for argv, words in ((["--tls-cert", "c.pem"], "--tls-cert goes with --http"),
                        (["--allow-origin", "https://a.example"], "--allow-origin goes with --http"),
                        (["--no-open"], "--no-open goes with --ui"), (["--demo"], "--demo goes with --ui"),
                        (["--dry-run"], "--dry-run goes with --compact"), (["--all"], "--all goes with --compact")):
        done = subprocess.run([sys.executable, str(SERVER), *argv], capture_output=True, text=True, timeout=30,
                              env=env, stdin=subprocess.DEVNULL)
        assert done.returncode == 2 and words in done.stderr and not done.stdout, (argv, done.stderr)
    done = subprocess.run([sys.executable, str(SERVER), "--compact", "--dry-run", "--all"], capture_output=True,
                          text=True, timeout=30, env=env)
    assert done.returncode == 0 and "dry run" in done.stdout, done.stderr


def test_allow_origin_and_allow_host_values_that_could_never_match_are_refused(tmp_path):
    """`--allow-origin app.example` (no scheme) or `--allow-host mem.example:443` were accepted and then never
    matched: the browser or proxy got a 403 that pointed back at the very flag."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "MEMORY_HTTP_TOKEN": TOKEN,
           "MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}
    for flag, value in (("--allow-origin", "app.example"), ("--allow-origin", "https://app.example/page"),
                        ("--allow-host", "http://mem.example"), ("--allow-host", "mem.example:443")):
        done = subprocess.run([sys.executable, str(SERVER), "--http", "0", flag, value], capture_output=True,
                              text=True, timeout=30, env=env)
        assert done.returncode == 2 and f"{flag} {value!r}: give" in done.stderr, done.stderr


def test_an_allowed_origin_matches_whatever_its_case_and_trailing_slash(tmp_path):
    s = HttpServer(tmp_path, "--allow-origin", "https://App.example/")
    try:
        sid, _ = s.initialize()
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        session = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        assert s.post(ping, {**session, "Origin": "https://app.example"})[0] == 200
        assert s.post(ping, {**session, "Origin": "https://other.example"})[0] == 403
    finally:
        s.stop()
