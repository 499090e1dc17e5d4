"""The UI's HTTP API against the real server (`memory_server.py --ui 0 --no-open`) in a subprocess.

Covers: the one-time key traded for a per-port session cookie, the page token header every API call needs,
Origin / Sec-Fetch-Site and Host checks (a page on another 127.0.0.1 port is refused), JSON-only writes, no
CORS, content types, every mutation op reaching memory.jsonl, limits (length, secrets, body size, bad or
deeply nested JSON, GET on a mutation), undo, hostile names as plain JSON strings, and a concurrent agent
write showing up in /api/graph and /api/version.
"""
import http.client
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).absolute().parent.parent
SERVER = ROOT / "memory_server.py"
XSS = "<img src=x onerror=alert(1)>"
XSS2 = "\"quoted\" & </script><script>alert(2)</script>"

SEED = [
    {"type": "entity", "name": "Alpha", "entityType": "service", "observations": ["runs on port 8080", "2026-01-05: deployed 1.0"]},
    {"type": "entity", "name": "Beta", "entityType": "person", "observations": ["maintains Alpha"]},
    {"type": "entity", "name": XSS, "entityType": "<b>type</b>", "observations": ["<script>alert('fact')</script>"]},
    {"type": "relation", "from": "Beta", "to": "Alpha", "relationType": "maintains"},
]


# ---------------------------------------------------------------- server helpers
TOKEN_META = re.compile(rb'<meta name="graphmem-token" content="([^"]+)">')


class UIServer:
    """The real `memory_server.py --ui 0 --no-open` on a temporary graph (or `path`), logged in with its link."""

    def __init__(self, graph_lines=SEED, extra_args=(), path=None, env=None):
        self.dir = tempfile.mkdtemp(prefix="graphmem-ui-api-")
        self.path = path or os.path.join(self.dir, "memory.jsonl")
        if path is None:
            with open(self.path, "w", encoding="utf-8") as fh:
                for obj in graph_lines:
                    fh.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.env = dict(os.environ, MEMORY_FILE_PATH=self.path, **(env or {}))
        self.stderr = open(os.path.join(self.dir, "server.stderr"), "w+")
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--ui", "0", "--no-open", *extra_args],
                                     cwd=str(ROOT), env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        line = self._first_line(30.0)
        prefix = "graphmem UI: "
        assert line.startswith(prefix), "server printed %r; stderr: %s" % (line, self.stderr_text())
        self.url = line[len(prefix):].strip()
        u = urllib.parse.urlsplit(self.url)
        self.port = u.port
        self.origin = "http://127.0.0.1:%d" % self.port
        self.key = urllib.parse.parse_qs(u.query)["key"][0]
        assert u.hostname == "127.0.0.1"
        self.cookie = self.token = None

    def login(self):
        """What a browser does with the printed link: trade the key for the session cookie, load the page,
        read its token. Returns self."""
        status, headers, _ = self.request("GET", "/?key=" + self.key, auth=False)
        assert status == 303, status
        self.cookie = headers["set-cookie"].split(";", 1)[0]
        status, _, raw = self.request("GET", "/", auth=False, headers={"Cookie": self.cookie})
        assert status == 200, status
        self.token = TOKEN_META.search(raw).group(1).decode()
        return self

    def _first_line(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.stop()
            pytest.fail("server printed no link within %.0fs; stderr: %s" % (timeout, self.stderr_text()))
        return self.proc.stdout.readline()

    def stderr_text(self):
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()[-3000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- HTTP ---------------------------------------------------------------------
    def auth_headers(self):
        """What the UI's own page sends: the session cookie and the page's token."""
        return {"Cookie": self.cookie, "X-Graphmem-Token": self.token}

    def request(self, method, path, body=None, headers=None, auth=True, host=None):
        """(status, headers dict lower-cased, raw body bytes). auth=True sends the cookie and the token."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        hdrs = self.auth_headers() if auth else {}
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", host or "127.0.0.1:%d" % self.port)
            for k, v in hdrs.items():
                conn.putheader(k, v)
            data = body.encode() if isinstance(body, str) else body
            if data is not None:
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders(data)
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, raw
        finally:
            conn.close()

    def raw_post(self, body, length=None):
        """POST a JSON body to /api/op over a bare socket (Content-Length may lie), read until the server
        closes; (status, raw response)."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        headers = dict(self.auth_headers(), **{"Content-Type": "application/json",
                                               "Content-Length": str(len(body) if length is None else length)})
        head = "".join("%s: %s\r\n" % kv for kv in headers.items())
        try:
            try:
                sock.sendall(("POST /api/op HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%sConnection: close\r\n\r\n"
                              % (self.port, head)).encode() + body)
                sock.shutdown(socket.SHUT_WR)  # all sent: a body shorter than its length ends here
            except OSError:
                pass  # the server may answer and close before reading the body
            data = b""
            while True:
                try:
                    chunk = sock.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                data += chunk
        finally:
            sock.close()
        status_line = data.split(b"\r\n", 1)[0].split()
        return (int(status_line[1]) if len(status_line) > 1 else None), data  # None: no answer at all

    def get_json(self, path, **kw):
        status, headers, raw = self.request("GET", path, **kw)
        assert status == 200, (path, status, raw[:300])
        return json.loads(raw)

    def op(self, **body):
        status, headers, raw = self.request("POST", "/api/op", body=body)
        assert status == 200, (body, status, raw[:300])
        assert headers.get("content-type", "").startswith("application/json"), headers
        res = json.loads(raw)
        assert isinstance(res.get("ok"), bool) and isinstance(res.get("message"), str), res
        return res

    def graph_file(self):
        ents, rels = {}, []
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                o = json.loads(line)
                if o.get("type") == "entity":
                    ents[o["name"]] = o
                elif o.get("type") == "relation":
                    rels.append((o["from"], o["to"], o["relationType"]))
        return ents, rels


@pytest.fixture(scope="module")
def srv():
    if not SERVER.exists():
        pytest.fail("memory_server.py not found at %s" % SERVER)
    s = UIServer()
    try:
        yield s.login()
    finally:
        s.stop()


def agent_write(path, entities):
    """Another process (an agent) writes through the library, as the contract says."""
    code = ("import sys, json; sys.path.insert(0, %r); import memory_server as ms; "
            "m = ms.Memory(ms.Settings.from_env({'MEMORY_FILE_PATH': %r}), client='agent'); "
            "text, err = m.call_tool('create_entities', {'entities': json.loads(sys.argv[1])}); "
            "print(text); sys.exit(1 if err else 0)" % (str(ROOT), path))
    out = subprocess.run([sys.executable, "-c", code, json.dumps(entities)], cwd=str(ROOT),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


# ---------------------------------------------------------------- access control
READ_PATHS = ("/api/graph", "/api/version", "/api/search?q=Alpha", "/api/overview", "/api/history",
              "/api/archived?name=Alpha")


@pytest.fixture
def fresh():
    """A server of its own whose printed key nobody has used yet."""
    s = UIServer()
    yield s
    s.stop()


def refused(res, status=403):
    """A JSON error with this status that leaks no graph content."""
    code, headers, raw = res
    assert code == status, (code, raw[:200])
    assert headers.get("content-type", "").startswith("application/json"), headers
    assert "error" in json.loads(raw) and b"Alpha" not in raw and b"runs on port" not in raw
    return json.loads(raw)["error"]


def test_api_needs_the_session(srv):
    for path in READ_PATHS:
        refused(srv.request("GET", path, auth=False))
        refused(srv.request("GET", path, headers={"Cookie": srv.cookie + "x"}))
        refused(srv.request("GET", path, auth=False, headers={"Cookie": "graphmem_key=" + srv.key}))
    refused(srv.request("POST", "/api/op", body={"op": "create_entity", "name": "Sneaky", "entityType": "x"}, auth=False))
    assert "Sneaky" not in srv.graph_file()[0]


def test_reads_need_the_cookie_and_the_page_token(srv):
    for path in READ_PATHS:
        assert "X-Graphmem-Token" in refused(srv.request("GET", path, auth=False, headers={"Cookie": srv.cookie}))
        refused(srv.request("GET", path, headers={"X-Graphmem-Token": srv.token + "x"}))
        refused(srv.request("GET", path, auth=False, headers={"X-Graphmem-Token": srv.token}))
        assert srv.request("GET", path)[0] == 200, path


def test_the_printed_key_works_once_and_the_browser_keeps_its_session(fresh):
    assert fresh.request("GET", "/?key=wrong", auth=False)[0] == 403
    status, headers, _ = fresh.request("GET", "/?key=" + fresh.key, auth=False)
    assert status == 303 and headers.get("location") == "/", (status, headers)  # the key leaves the address bar
    cookie = headers.get("set-cookie", "")
    name, _, value = cookie.split(";", 1)[0].partition("=")
    assert name == "graphmem_session_%d" % fresh.port and value and fresh.key not in cookie, cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie, cookie
    session = {"Cookie": name + "=" + value}
    # a second use of the link: a clear page, no session
    status, headers, raw = fresh.request("GET", "/?key=" + fresh.key, auth=False)
    assert status == 410 and "set-cookie" not in headers, (status, headers)
    assert b"already used" in raw and b"graphmem --ui" in raw and b"<script" not in raw.lower()
    # the browser that has the cookie: the old link and a reload both still work
    status, headers, _ = fresh.request("GET", "/?key=" + fresh.key, auth=False, headers=session)
    assert status == 303 and headers.get("location") == "/" and "set-cookie" not in headers
    status, headers, raw = fresh.request("GET", "/", auth=False, headers=session)
    assert status == 200 and headers.get("content-type", "").startswith("text/html")
    assert b'id="search"' in raw and TOKEN_META.search(raw)
    # the key itself opens nothing
    refused(fresh.request("GET", "/api/version", auth=False, headers={"X-Graphmem-Key": fresh.key}))


def test_a_second_ui_on_another_port_keeps_the_first_logged_in(srv):
    """A browser keeps one cookie per name for 127.0.0.1, whatever the port: the names must differ."""
    other = UIServer()
    try:
        name, _, value = srv.cookie.partition("=")
        jar = {name: value}
        status, headers, _ = other.request("GET", "/?key=" + other.key, auth=False)
        assert status == 303
        name, _, value = headers["set-cookie"].split(";", 1)[0].partition("=")
        jar[name] = value
        cookie_header = "; ".join("%s=%s" % kv for kv in jar.items())
        for server, token in ((srv, srv.token), (other, None)):
            status, _, raw = server.request("GET", "/", auth=False, headers={"Cookie": cookie_header})
            assert status == 200, server.port
            token = token or TOKEN_META.search(raw).group(1).decode()
            status, _, _ = server.request("GET", "/api/version", auth=False,
                                          headers={"Cookie": cookie_header, "X-Graphmem-Token": token})
            assert status == 200, server.port
    finally:
        other.stop()


def test_a_no_cors_text_plain_post_from_another_local_port_changes_nothing(srv):
    """The request a page on http://127.0.0.1:<other port> makes with fetch(..., {mode: "no-cors"}): the browser
    adds the SameSite=Strict cookie (same site), but cannot add a custom header or a JSON content type."""
    before = srv.graph_file()
    attacker = {"Cookie": srv.cookie, "Content-Type": "text/plain;charset=UTF-8", "Sec-Fetch-Mode": "no-cors",
                "Origin": "http://127.0.0.1:%d" % (srv.port + 1), "Sec-Fetch-Site": "same-site"}
    for body in ({"op": "add_fact", "name": "Alpha", "text": "planted by another page"},
                 {"op": "delete_entity", "name": "Beta"}):
        refused(srv.request("POST", "/api/op", body=json.dumps(body), auth=False, headers=attacker))
        refused(srv.request("POST", "/api/op", body=json.dumps(body), auth=False,
                            headers={k: v for k, v in attacker.items() if not k.startswith(("Origin", "Sec-"))}))
    assert srv.graph_file() == before


def test_origin_and_sec_fetch_site_must_be_the_uis_own(srv):
    body = {"op": "add_fact", "name": "Beta", "text": "from a foreign origin"}
    for origin in ("http://127.0.0.1:%d" % (srv.port + 1), "http://localhost:%d" % srv.port, "http://evil.com",
                   "null", "https://127.0.0.1:%d" % srv.port):
        assert "refused" in refused(srv.request("POST", "/api/op", body=body, headers={"Origin": origin}))
        refused(srv.request("GET", "/api/graph", headers={"Origin": origin}))
    for site in ("same-site", "cross-site"):
        refused(srv.request("POST", "/api/op", body=body, headers={"Sec-Fetch-Site": site}))
        refused(srv.request("GET", "/api/graph", headers={"Sec-Fetch-Site": site}))
    assert "from a foreign origin" not in srv.graph_file()[0]["Beta"]["observations"]
    own = {"Origin": srv.origin, "Sec-Fetch-Site": "same-origin"}
    assert srv.request("GET", "/api/graph", headers=own)[0] == 200
    assert srv.request("GET", "/api/graph", headers={"Sec-Fetch-Site": "none"})[0] == 200
    assert srv.request("POST", "/api/op", body=dict(body, text="from the UI itself"), headers=own)[0] == 200
    assert srv.request("GET", "/api/version", host="localhost:%d" % srv.port,
                       headers={"Origin": "http://localhost:%d" % srv.port})[0] == 200
    assert srv.op(op="delete_fact", name="Beta", text="from the UI itself")["ok"]


def test_writes_need_the_token_header(srv):
    body = {"op": "add_fact", "name": "Beta", "text": "no token"}
    own = {"Origin": srv.origin, "Sec-Fetch-Site": "same-origin"}
    assert "X-Graphmem-Token" in refused(srv.request("POST", "/api/op", body=body, auth=False,
                                                     headers=dict(own, Cookie=srv.cookie)))
    refused(srv.request("POST", "/api/op", body=body, headers=dict(own, **{"X-Graphmem-Token": "guess"})))
    assert "no token" not in srv.graph_file()[0]["Beta"]["observations"]


def test_writes_must_be_json(srv):
    body = json.dumps({"op": "add_fact", "name": "Beta", "text": "sent as text"})
    for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                  "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": ctype} if ctype else {}
        assert "application/json" in refused(srv.request("POST", "/api/op", body=body, headers=headers), 415)
    assert "sent as text" not in srv.graph_file()[0]["Beta"]["observations"]
    status, _, raw = srv.request("POST", "/api/op", body={"op": "no_such_op"},
                                 headers={"Content-Type": "application/json; charset=utf-8"})
    assert status == 200 and json.loads(raw)["ok"] is False


def test_page_needs_the_session(srv):
    status, headers, raw = srv.request("GET", "/", auth=False)
    assert status == 403 and headers.get("content-type", "").startswith("text/html")
    assert b"<script" not in raw.lower() and b"graphmem --ui" in raw
    assert srv.request("GET", "/?key=wrong", auth=False)[0] == 403
    status, headers, raw = srv.request("GET", "/", auth=False, headers={"Cookie": srv.cookie})
    assert status == 200 and headers.get("content-type", "").startswith("text/html"), headers
    assert b'id="search"' in raw and TOKEN_META.search(raw).group(1).decode() == srv.token


def test_wrong_host_header_refused(srv):
    for host in ("evil.com:%d" % srv.port, "evil.com", "127.0.0.1.evil.com:%d" % srv.port, "127.0.0.1:1"):
        status, _, raw = srv.request("GET", "/api/graph", host=host)
        assert status == 403, (host, status)
        assert b"Alpha" not in raw
        status, _, _ = srv.request("GET", "/?key=" + srv.key, auth=False, host=host)
        assert status == 403, (host, status)
        status, _, _ = srv.request("POST", "/api/op", body={"op": "create_entity", "name": "ViaEvil", "entityType": "x"}, host=host)
        assert status == 403, (host, status)
    assert "ViaEvil" not in srv.graph_file()[0]
    for host in ("127.0.0.1:%d" % srv.port, "localhost:%d" % srv.port):
        status, _, _ = srv.request("GET", "/api/version", host=host)
        assert status == 200, host


def test_no_cors_headers_and_no_store(srv):
    origin = {"Origin": "http://evil.com"}
    checks = [srv.request("GET", "/api/graph", headers={"Origin": srv.origin}),
              srv.request("GET", "/api/graph", headers=origin),
              srv.request("GET", "/api/version", headers=origin, auth=False),
              srv.request("POST", "/api/op", body={"op": "undo-nothing"}, headers=origin),
              srv.request("OPTIONS", "/api/op", headers=dict(origin, **{"Access-Control-Request-Method": "POST"}))]
    for status, headers, _ in checks:
        assert not [h for h in headers if h.startswith("access-control-")], headers
    status, headers, raw = checks[0]
    assert status == 200
    assert headers.get("content-type") == "application/json; charset=utf-8", headers
    assert "no-store" in headers.get("cache-control", ""), headers
    assert checks[4][0] != 200 or not checks[4][2]


# ---------------------------------------------------------------- reads
def test_graph_shape(srv):
    g = srv.get_json("/api/graph")
    for k in ("version", "file", "limits", "entities", "relations"):
        assert k in g, k
    assert g["limits"]["obsMaxChars"] == 300
    alpha = next(e for e in g["entities"] if e["name"] == "Alpha")
    assert alpha["entityType"] == "service"
    texts = [f["text"] for f in alpha["facts"]]
    assert "runs on port 8080" in texts
    dated = next(f for f in alpha["facts"] if f["text"].startswith("2026-01-05"))
    assert dated["dated"] is True and dated["date"] == "2026-01-05"
    for f in alpha["facts"]:
        for k in ("pinned", "retention", "fading", "anchor"):
            assert k in f, (k, f)
    assert {"from": "Beta", "to": "Alpha", "relationType": "maintains"} in g["relations"]
    ov = srv.get_json("/api/overview")
    for k in ("pending", "mostConnected", "overBudget", "fading", "stale", "receipts"):
        assert k in ov, k
    assert "series" in ov["receipts"]
    hist = srv.get_json("/api/history?limit=5")
    assert isinstance(hist["changes"], list)


def test_search_every_term_must_match(srv):
    q = lambda text: srv.get_json("/api/search?q=" + urllib.parse.quote(text))
    assert "Alpha" in q("8080")["entities"]                    # a fact
    assert "Alpha" in q("alpha 8080")["entities"]              # name + fact, any case
    assert "Beta" in q("person")["entities"]                   # a type
    assert "Beta" in q("maintains")["entities"]                # a fact or relation type
    assert q("alpha zzzunknownzzz")["entities"] == []          # every term must match
    res = q("8080")
    assert res["query"] == "8080" and isinstance(res["archivedHits"], list)


def test_hostile_names_roundtrip_as_plain_json(srv):
    res = srv.op(op="create_entity", name=XSS2, entityType="<i>t</i>")
    assert res["ok"], res
    status, headers, raw = srv.request("GET", "/api/graph")
    assert headers["content-type"].startswith("application/json")
    g = json.loads(raw)
    names = {e["name"]: e for e in g["entities"]}
    assert XSS in names and XSS2 in names
    assert names[XSS]["entityType"] == "<b>type</b>"
    assert names[XSS]["facts"][0]["text"] == "<script>alert('fact')</script>"
    assert names[XSS2]["entityType"] == "<i>t</i>"
    hits = srv.get_json("/api/search?q=" + urllib.parse.quote("onerror"))
    assert XSS in hits["entities"], hits
    arch = srv.get_json("/api/archived?name=" + urllib.parse.quote(XSS))
    assert arch["name"] == XSS
    assert XSS2 in srv.graph_file()[0]


# ---------------------------------------------------------------- mutations
def test_entity_ops_reach_the_file(srv):
    assert srv.op(op="create_entity", name="Gamma", entityType="repo")["ok"]
    ents, _ = srv.graph_file()
    assert ents["Gamma"]["entityType"] == "repo"
    assert srv.op(op="set_type", name="Gamma", entityType="library")["ok"]
    assert srv.graph_file()[0]["Gamma"]["entityType"] == "library"
    assert srv.op(op="add_relation", **{"from": "Gamma", "to": "Alpha", "relationType": "used by"})["ok"]
    assert ("Gamma", "Alpha", "used by") in srv.graph_file()[1]
    assert srv.op(op="rename", name="Gamma", newName="Gamma2")["ok"]
    ents, rels = srv.graph_file()
    assert "Gamma" not in ents and "Gamma2" in ents
    assert ("Gamma2", "Alpha", "used by") in rels
    assert srv.op(op="delete_relation", **{"from": "Gamma2", "to": "Alpha", "relationType": "used by"})["ok"]
    assert ("Gamma2", "Alpha", "used by") not in srv.graph_file()[1]
    assert srv.op(op="delete_entity", name="Gamma2")["ok"]
    assert "Gamma2" not in srv.graph_file()[0]
    res = srv.op(op="delete_entity", name="No Such Entity")
    assert res["ok"] is False and res["message"]
    res = srv.op(op="create_entity", name="Alpha", entityType="service")
    assert res["ok"] is False and res["message"], res


def test_fact_ops_reach_the_file(srv):
    assert srv.op(op="create_entity", name="Delta", entityType="service")["ok"]
    assert srv.op(op="add_fact", name="Delta", text="listens on 9000")["ok"]
    assert srv.graph_file()[0]["Delta"]["observations"] == ["listens on 9000"]
    res = srv.op(op="add_fact", name="Delta", text="listens on 9000")
    assert res["ok"] is False and res["message"], res  # duplicate refused
    assert srv.op(op="edit_fact", name="Delta", old="listens on 9000", new="listens on 9001")["ok"]
    assert srv.graph_file()[0]["Delta"]["observations"] == ["listens on 9001"]
    assert srv.op(op="pin", name="Delta", text="listens on 9001", pinned=True)["ok"]
    g = srv.get_json("/api/graph")
    fact = next(f for e in g["entities"] if e["name"] == "Delta" for f in e["facts"])
    assert fact["pinned"] is True
    assert srv.op(op="pin", name="Delta", text="listens on 9001", pinned=False)["ok"]
    g = srv.get_json("/api/graph")
    assert next(f for e in g["entities"] if e["name"] == "Delta" for f in e["facts"])["pinned"] is False
    assert srv.op(op="add_fact", name="Delta", text="owned by Beta")["ok"]
    assert srv.op(op="delete_fact", name="Delta", text="owned by Beta")["ok"]
    assert "owned by Beta" not in srv.graph_file()[0]["Delta"]["observations"]


def test_archive_restore_and_verify(srv):
    assert srv.op(op="create_entity", name="Epsilon", entityType="service")["ok"]
    assert srv.op(op="add_fact", name="Epsilon", text="uses the old queue")["ok"]
    assert srv.op(op="archive_fact", name="Epsilon", text="uses the old queue")["ok"]
    assert "uses the old queue" not in srv.graph_file()[0]["Epsilon"]["observations"]
    arch = srv.get_json("/api/archived?name=Epsilon")
    assert "uses the old queue" in [f["text"] for f in arch["facts"]], arch
    hits = srv.get_json("/api/search?q=" + urllib.parse.quote("old queue"))
    assert {"entity": "Epsilon", "text": "uses the old queue"} in [
        {"entity": h["entity"], "text": h["text"]} for h in hits["archivedHits"]], hits
    g = srv.get_json("/api/graph")
    assert next(e for e in g["entities"] if e["name"] == "Epsilon")["archived"] >= 1
    assert srv.op(op="restore", name="Epsilon", text="uses the old queue")["ok"]
    assert "uses the old queue" in srv.graph_file()[0]["Epsilon"]["observations"]
    res = srv.op(op="verify_fact", name="Epsilon", text="uses the old queue")
    assert isinstance(res["ok"], bool) and res["message"]  # no anchor here: a clear answer either way


def test_limits_are_enforced(srv):
    before = srv.graph_file()[0]["Alpha"]["observations"]
    res = srv.op(op="add_fact", name="Alpha", text="x" * 301)
    assert res["ok"] is False, res
    assert "300" in res["message"], res
    res = srv.op(op="add_fact", name="Alpha", text="password=hunter2hunter2")
    assert res["ok"] is False and res["message"], res
    res = srv.op(op="edit_fact", name="Alpha", old="runs on port 8080", new="y" * 301)
    assert res["ok"] is False, res
    assert srv.graph_file()[0]["Alpha"]["observations"] == before
    res = srv.op(op="add_fact", name="Alpha", text="x" * 300)
    assert res["ok"] is True, res
    assert srv.op(op="delete_fact", name="Alpha", text="x" * 300)["ok"]


def test_body_too_large_is_413(srv):
    body = json.dumps({"op": "add_fact", "name": "Alpha", "text": "z" * 70000}).encode()
    status, _ = srv.raw_post(body)
    assert status == 413
    assert "z" * 100 not in "".join(srv.graph_file()[0]["Alpha"]["observations"])


def test_deeply_nested_json_is_a_clean_400(srv):
    """Nesting the parser cannot follow (RecursionError) is answered like any bad JSON; the server serves on."""
    for body in (b"[" * 60000, b'{"op": "add_fact", "name": ' + b"[" * 60000, b'{"op": ' + b'{"a":' * 12000):
        status, data = srv.raw_post(body)
        assert status == 400, data[:300]
        assert "nested too deeply" in json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]
    body = b"[" * 100000
    assert srv.raw_post(body)[0] == 413
    assert srv.request("GET", "/api/version")[0] == 200
    assert "Traceback" not in srv.stderr_text() and "RecursionError" not in srv.stderr_text()


def test_a_body_shorter_than_its_length_is_400(srv):
    status, data = srv.raw_post(b'{"op": "undo"}', length=100)
    assert status == 400 and b"shorter" in data


def test_invalid_json_is_400(srv):
    for body in (b"{not json", b"", b"[1, 2]", "\"just a string\""):
        status, headers, raw = srv.request("POST", "/api/op", body=body, headers={"Content-Type": "application/json"})
        assert status == 400, (body, status, raw[:200])
        assert "error" in json.loads(raw)
    status, headers, raw = srv.request("POST", "/api/op", body={"op": "no_such_op"})
    assert status in (200, 400), status
    if status == 200:
        assert json.loads(raw)["ok"] is False


def test_get_cannot_mutate(srv):
    before = srv.graph_file()
    for path in ("/api/op", "/api/op?op=create_entity&name=ByGet&entityType=x"):
        status, headers, raw = srv.request("GET", path)
        assert status in (404, 405), (path, status)
    status, _, _ = srv.request("POST", "/api/graph", body={"op": "create_entity", "name": "ByPost", "entityType": "x"})
    assert status in (404, 405), status
    assert srv.graph_file() == before


def test_undo_reverts_the_last_change(srv):
    assert srv.op(op="add_fact", name="Beta", text="likes tea")["ok"]
    assert "likes tea" in srv.graph_file()[0]["Beta"]["observations"]
    hist = srv.get_json("/api/history?limit=3")
    assert hist["changes"], hist
    res = srv.op(op="undo")
    assert res["ok"] and res["message"], res
    assert "likes tea" not in srv.graph_file()[0]["Beta"]["observations"]
    assert srv.op(op="create_entity", name="Zeta", entityType="x")["ok"]
    assert srv.op(op="undo")["ok"]
    assert "Zeta" not in srv.graph_file()[0]


def test_concurrent_agent_write_is_seen(srv):
    v1 = srv.get_json("/api/version")["version"]
    agent_write(srv.path, [{"name": "FromAgent", "entityType": "service", "observations": ["written by an agent"]}])
    deadline = time.time() + 3
    while time.time() < deadline:
        v2 = srv.get_json("/api/version")["version"]
        if v2 != v1:
            break
        time.sleep(0.05)
    assert v2 != v1, "version did not change after an agent write"
    g = srv.get_json("/api/graph")
    ent = next((e for e in g["entities"] if e["name"] == "FromAgent"), None)
    assert ent is not None
    assert [f["text"] for f in ent["facts"]] == ["written by an agent"]
    # and the UI's next write keeps the agent's entity (no lost update)
    assert srv.op(op="add_fact", name="FromAgent", text="seen by the UI")["ok"]
    assert srv.graph_file()[0]["FromAgent"]["observations"] == ["written by an agent", "seen by the UI"]


def test_version_changes_on_ui_write(srv):
    v1 = srv.get_json("/api/version")["version"]
    assert srv.op(op="add_fact", name="Beta", text="version bump check")["ok"]
    assert srv.get_json("/api/version")["version"] != v1
    v2 = srv.get_json("/api/version")["version"]
    assert srv.op(op="pin", name="Beta", text="version bump check", pinned=True)["ok"]
    assert srv.get_json("/api/version")["version"] != v2, "pinning (metadata only) must change the version"


# ---------------------------------------------------------------- races, ports, demo
def agent_edit(path, tool, arguments):
    code = ("import sys, json; sys.path.insert(0, %r); import memory_server as ms; "
            "m = ms.Memory(ms.Settings.from_env({'MEMORY_FILE_PATH': %r}), client='agent'); "
            "text, err = m.call_tool(%r, json.loads(sys.argv[1])); sys.exit(1 if err else 0)" % (str(ROOT), path, tool))
    out = subprocess.run([sys.executable, "-c", code, json.dumps(arguments)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_an_edit_racing_an_agent_is_reapplied_or_refused_never_lost(srv):
    assert srv.op(op="create_entity", name="Race", entityType="service")["ok"]
    assert srv.op(op="add_fact", name="Race", text="port is 7000")["ok"]
    srv.get_json("/api/graph")  # the page has the graph; now an agent changes the same fact
    agent_edit(srv.path, "delete_observations", {"deletions": [{"entityName": "Race", "observations": ["port is 7000"]}]})
    agent_edit(srv.path, "add_observations", {"observations": [{"entityName": "Race", "contents": ["port is 7100"]}]})
    res = srv.op(op="edit_fact", name="Race", old="port is 7000", new="port is 7001")  # edit of a stale view
    assert res["ok"] is False and "changed meanwhile" in res["message"]
    assert srv.op(op="add_fact", name="Race", text="owned by the ops team")["ok"]  # re-applied on the fresh graph
    facts = srv.graph_file()[0]["Race"]["observations"]
    assert facts == ["port is 7100", "owned by the ops team"]


def test_content_length_that_is_not_a_number_is_400(srv):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    conn.putrequest("POST", "/api/op", skip_host=True)
    conn.putheader("Host", "127.0.0.1:%d" % srv.port)
    for k, v in srv.auth_headers().items():
        conn.putheader(k, v)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", "abc")
    conn.endheaders()
    assert conn.getresponse().status == 400
    conn.close()


def test_a_taken_port_moves_to_the_next_one_and_says_so(tmp_path):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    taken = blocker.getsockname()[1]
    env = dict(os.environ, MEMORY_FILE_PATH=str(tmp_path / "memory.jsonl"))
    proc = subprocess.Popen([sys.executable, str(SERVER), "--ui", str(taken), "--no-open"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no link printed"
        url = proc.stdout.readline().split(": ", 1)[1].strip()
        assert urllib.parse.urlsplit(url).port != taken
    finally:
        proc.terminate()
        proc.wait(10)
        blocker.close()
    assert f"port {taken} is taken" in proc.stderr.read()


def test_demo_never_touches_the_users_graph(tmp_path):
    user = tmp_path / "memory.jsonl"
    user.write_text('{"type":"entity","name":"mine","entityType":"t","observations":["keep me"]}', encoding="utf-8")
    before = user.read_bytes()
    s = UIServer(extra_args=["--demo"], path=str(user))
    try:
        graph = s.login().get_json("/api/graph")
        assert len(graph["entities"]) >= 35 and "mine" not in {e["name"] for e in graph["entities"]}
        assert graph["file"] != str(user)
        name = graph["entities"][0]["name"]
        assert s.op(op="add_fact", name=name, text="a demo edit")["ok"]
    finally:
        s.stop()
    assert user.read_bytes() == before and not (tmp_path / "backups").exists()


def test_an_op_is_judged_by_what_it_changed_not_by_the_words_of_its_answer(srv):
    """Names that read like refusals ("Not found page", "refused-orders") are saved and reported as saved;
    an op that changes nothing is reported as not done."""
    res = srv.op(op="create_entity", name="Not found page", entityType="page")
    assert res["ok"] is True, res
    assert srv.op(op="create_entity", name="skipped-jobs", entityType="queue")["ok"]
    res = srv.op(op="rename", name="skipped-jobs", newName="refused-orders")
    assert res["ok"] is True, res
    assert srv.op(op="add_fact", name="Not found page", text="Nothing here is cached")["ok"]
    res = srv.op(op="add_fact", name="Not found page", text="Nothing here is cached")
    assert res["ok"] is False and "duplicate" in res["message"], res
    ents, _ = srv.graph_file()
    assert "Not found page" in ents and "refused-orders" in ents and "skipped-jobs" not in ents


def test_probes_are_listed_added_and_removed_from_the_ui(srv):
    assert srv.get_json("/api/overview")["probes"] == {"items": [], "total": 0}
    res = srv.op(op="add_probe", query="which port does alpha use", entity="Alpha", fact="runs on port 8080")
    assert res["ok"], res
    probes = srv.get_json("/api/overview")["probes"]
    assert probes["total"] == 1
    probe = probes["items"][0]
    assert (probe["query"], probe["entity"], probe["fact"], probe["source"]) == (
        "which port does alpha use", "Alpha", "runs on port 8080", "manual")
    res = srv.op(op="add_probe", query="anything", entity="Alpah", fact="")
    assert res["ok"] is False and "Alpha" in res["message"], res  # did you mean
    res = srv.op(op="remove_probe", id=str(probe["id"]))
    assert res["ok"] is False and "whole number" in res["message"]
    assert srv.op(op="remove_probe", id=probe["id"])["ok"]
    assert srv.get_json("/api/overview")["probes"]["total"] == 0
    res = srv.op(op="remove_probe", id=probe["id"])
    assert res["ok"] is False and "no probe" in res["message"], res


# ---------------------------------------------------------------- results are data (issue 10 item 7)
SECRET_FACT = "deploy key AKIA" + "IOSFODNN7EXAMPLE"


def reasons(res, kind):
    return [item["reason"] for item in res["result"][kind]]


def test_names_that_read_like_refusals_are_reported_from_data(fresh):
    """The UI once matched the server's sentences ("Not found", "refused", "skipped"): these are saved and
    reported as done, with what was done in the result's lists."""
    srv = fresh.login()
    res = srv.op(op="create_entity", name="Not found page", entityType="page")
    assert (res["ok"], res["status"]) == (True, "done"), res
    assert res["result"]["added"] == [{"what": "entity", "entity": "Not found page", "item": "Not found page"}]
    assert srv.op(op="create_entity", name="skipped-jobs", entityType="queue")["status"] == "done"
    res = srv.op(op="rename", name="skipped-jobs", newName="refused-orders")
    assert (res["ok"], res["status"]) == (True, "done"), res
    assert res["result"]["changed"] == [{"what": "name", "entity": "refused-orders", "item": "refused-orders",
                                         "reason": "renamed", "detail": "facts, relations and archive kept",
                                         "old": "skipped-jobs"}]
    res = srv.op(op="add_fact", name="refused-orders", text="Not found: refused, skipped, Nothing, Deleted 0")
    assert (res["ok"], res["status"]) == (True, "done"), res
    ents, _ = srv.graph_file()
    assert "Not found page" in ents and "refused-orders" in ents and "skipped-jobs" not in ents


def test_a_real_refusal_is_reported_refused_with_its_reason(srv):
    res = srv.op(op="add_fact", name="Alpha", text=SECRET_FACT)
    assert (res["ok"], res["status"]) == (False, "refused"), res
    assert res["result"]["error"]["reason"] == "all_refused"
    [refused] = res["result"]["refused"]
    assert refused["reason"] == "secret" and "looks like a credential" in refused["message"]
    assert "AKIA" not in json.dumps(res)  # never echoed, not even in the data
    res = srv.op(op="create_entity", name="n" * 201, entityType="t")
    assert (res["ok"], res["status"]) == (False, "refused"), res
    assert reasons(res, "refused") == ["too_long"] and "200-char limit" in res["result"]["refused"][0]["message"]
    res = srv.op(op="rename", name="Alpha", newName="n" * 201)
    assert (res["ok"], res["status"], res["result"]["error"]["reason"]) == (False, "refused", "too_long"), res
    res = srv.op(op="add_fact", name="Alpah", text="anything")
    assert res["result"]["error"]["reason"] == "unknown_entity" and "Alpha" in res["message"], res
    ents, _ = srv.graph_file()
    assert "n" * 201 not in ents and "Alpha" in ents and SECRET_FACT not in ents["Alpha"]["observations"]


def test_partial_success_is_reported_partial(fresh):
    srv = fresh.login()
    res = srv.op(op="add_facts", name="Beta", texts=["reviews every release", SECRET_FACT])
    assert (res["ok"], res["status"]) == (True, "partial"), res
    assert [a["item"] for a in res["result"]["added"]] == ["reviews every release"]
    assert reasons(res, "refused") == ["secret"]
    assert res["message"].startswith("Beta: +1, now 2; refused a fact: looks like a credential"), res["message"]
    res = srv.op(op="add_facts", name="Beta", texts=["reviews every release", "x" * 400])
    assert (res["ok"], res["status"]) == (False, "refused"), res  # nothing new: one duplicate, one refused
    assert reasons(res, "skipped") == ["duplicate"] and reasons(res, "refused") == ["too_long"]
    assert srv.graph_file()[0]["Beta"]["observations"] == ["maintains Alpha", "reviews every release"]
    res = srv.op(op="add_facts", name="Beta", texts=[])
    assert res["status"] == "refused" and "list of strings" in res["message"], res


def test_every_reason_code_reaches_the_json():
    """Each kind of outcome and reason code a write can give, as the UI receives it."""
    s = UIServer(graph_lines=[], env={"MEMORY_OBS_MAX": "3"}).login()
    seen: dict[str, set] = {}

    def op(**body):
        res = s.op(**body)
        for kind, items in res["result"].items():
            if isinstance(items, list):
                seen.setdefault(kind, set()).update(i.get("reason", "") for i in items)
        if "error" in res["result"]:
            seen.setdefault("error", set()).add(res["result"]["error"]["reason"])
        return res

    try:
        op(op="create_entity", name="Api", entityType="service")
        op(op="create_entity", name="Api", entityType="service")                              # skipped: exists
        op(op="create_entity", name="   ", entityType="service")                              # refused: empty
        op(op="create_entity", name="Web", entityType="service")
        op(op="add_facts", name="Api", texts=["Status: open", "runs on port 8080", "runs on port 8080 ",
                                               "", SECRET_FACT, "y" * 400])                   # duplicate, empty..
        op(op="add_fact", name="Api", text=SECRET_FACT)                                       # all_refused
        op(op="rename", name="Api", newName="x" * 201)                                        # too_long
        op(op="add_facts", name="Api", texts=["Owner: Lucas Perez"])
        op(op="add_facts", name="Api", texts=["Owned by Lucas Perez"])                        # near_duplicate
        op(op="add_facts", name="Api", texts=["2026-02-11: fixed and merged, closing"])       # superseded
        redis = "uses Redis for caching of the session store and of the rendered {} pages"
        op(op="add_facts", name="Api", texts=["2026-01-01: deployed 1.0", "2026-01-02: deployed 1.1",
                                               redis.format("product")])                      # over_cap
        op(op="add_facts", name="Api", texts=[redis.format("cart")])                          # possible_conflict
        op(op="add_fact", name="Web", text="a third fact")
        op(op="add_relation", **{"from": "Api", "to": "Web", "relationType": "calls"})
        op(op="add_relation", **{"from": "Api", "to": "Web", "relationType": "calls"})       # skipped: exists
        op(op="add_relation", **{"from": "Api", "to": "Wbe", "relationType": "calls"})       # unknown_entity
        op(op="delete_relation", **{"from": "Api", "to": "Nope", "relationType": "calls"})   # skipped: not_found
        op(op="delete_fact", name="Web", text="not there")                                   # not_matched
        op(op="delete_fact", name="Gone", text="x")                                          # not_found
        op(op="edit_fact", name="Web", old="a third fact", new="a third fact, edited")         # edited
        op(op="edit_fact", name="Web", old="a third fact, edited", new="a third fact, edited")  # unchanged
        op(op="pin", name="Web", text="a third fact, edited", pinned=True)                   # changed: pin
        op(op="archive_fact", name="Web", text="a third fact, edited")                       # by_hand
        op(op="restore", name="Web", text="a third fact, edited")                            # restored
        op(op="rename", name="Web", newName="Api")                                           # error: exists
        op(op="archive_fact", name="Web", text="a third fact, edited")
        op(op="delete_entity", name="Web")                                                   # archive_kept, end_deleted
        op(op="rename", name="Web", newName="Site")                                          # unknown_entity
        op(op="rename", name="Api", newName="Service")                                       # renamed
        op(op="nonsense")                                                                    # invalid_arguments
    finally:
        s.stop()
    expected = {
        "added": {"", "restored"}, "skipped": {"exists", "duplicate", "near_duplicate", "not_found", "not_matched",
                                               "unchanged"},
        "refused": {"empty", "secret", "too_long", "unknown_entity"}, "replaced": {"superseded", "edited"},
        "archived": {"over_cap", "by_hand"}, "conflicts": {"possible_conflict"}, "changed": {"renamed", "pin"},
        "removed": {"", "end_deleted"}, "notes": {"over_cap_kept", "archive_kept"},
        "error": {"exists", "unknown_entity", "invalid_arguments", "all_refused", "too_long"},
    }
    for kind, codes in expected.items():
        assert codes <= seen.get(kind, set()), (kind, codes - seen.get(kind, set()), seen)


def test_a_bad_history_limit_is_a_400_that_names_it(srv):
    """`limit=abc` once answered Python's own words ("invalid literal for int() with base 10")."""
    status, _, raw = srv.request("GET", "/api/history?limit=abc")
    assert status == 400 and json.loads(raw) == {"error": "limit must be a whole number, got 'abc'"}
    assert len(srv.get_json("/api/history?limit=-3")["changes"]) <= 1  # clamped to 1..200, as before


def test_a_ui_port_out_of_range_is_a_clear_error_not_a_traceback(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    for port in ("99999", "-1"):
        done = subprocess.run([sys.executable, str(SERVER), "--ui", port, "--no-open"], capture_output=True,
                              text=True, timeout=30, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"--ui {port}: give a port from 1 to 65535" in done.stderr
