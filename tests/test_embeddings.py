"""Optional real embeddings (MEMORY_EMBEDDINGS_URL): a real server over stdio against a small local fake
OpenAI-compatible endpoint (http.server in this process). Its vectors are a bag of concepts, so words the
fake knows as one concept ("zorblat", "quuxify") meet although they share no letters: a paraphrase only
embeddings can find. Covers: used when up, cache reused (memory and memory.db), batching, writes embed their
facts, and an endpoint that is down, slow, erroring, answering garbage or the wrong size costs one note and
nothing else; the key is sent and never shown."""
from __future__ import annotations

import http.server
import json
import math
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SERVER, StdioServer, write_graph

import memory_server as ms

# word -> concept dimension; every text also gets a small constant so no vector is zero
CONCEPTS = {"zorblat": 0, "quuxify": 0, "frobnicate": 1, "blimster": 1, "sync": 2, "nightly": 3, "job": 2}
DIM = 8
KEY = "sk-test-7f3a9c1e5b2d"


def concept_vector(text: str, dim: int = DIM) -> list[float]:
    vec = [0.0] * dim
    vec[dim - 1] = 0.05
    for word in ms.tokenize(text):
        if word in CONCEPTS and CONCEPTS[word] < dim - 1:
            vec[CONCEPTS[word]] += 1.0
    return vec


class FakeEndpoint:
    """POST /v1/embeddings on 127.0.0.1. mode: ok, http500, garbage, wrong_dim (after the first request),
    wrong_count, slow (sleeps past the server's timeout). Records each request's inputs and headers."""

    def __init__(self, mode: str = "ok"):
        self.mode = mode
        self.requests: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "input": body["input"], "model": body["model"],
                                       "auth": self.headers.get("Authorization")})
                outer.answer(self, body["input"])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, handler, inputs: list[str]) -> None:
        mode = self.mode
        if mode == "slow" or (mode == "slow_batches" and len(inputs) > 8):
            time.sleep(4)
        if mode == "http500":
            return self._send(handler, 500, b'{"error": "model crashed"}')
        if mode == "garbage":
            return self._send(handler, 200, b"<html>not json</html>")
        dim = 5 if mode == "wrong_dim" and len(self.requests) > 1 else DIM
        data = [{"object": "embedding", "index": i, "embedding": concept_vector(t, dim)} for i, t in enumerate(inputs)]
        if mode == "wrong_count":
            data = data[:-1]
        self._send(handler, 200, json.dumps({"object": "list", "data": data, "model": "fake"}).encode())

    @staticmethod
    def _send(handler, code: int, payload: bytes) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def inputs(self) -> list[str]:
        return [text for r in self.requests for text in r["input"]]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def endpoint():
    fake = FakeEndpoint()
    yield fake
    fake.close()


TEAM = [
    ("nightly batch", "process", ["zorblat sync starts at 02:00 on the build host", "owned by the platform team"]),
    ("Lee Park", "person", ["based in Lisbon", "reviews the frobnicate pipeline"]),
]
PARAPHRASE = "when does the quuxify run?"


def env_for(fake: FakeEndpoint | str, **extra: str) -> dict[str, str]:
    url = fake if isinstance(fake, str) else fake.url
    return {"MEMORY_EMBEDDINGS_URL": url, "MEMORY_EMBEDDINGS_MODEL": "fake-concepts", **extra}


def start(path: Path, env: dict[str, str] | None) -> StdioServer:
    server = StdioServer(path, env)
    server.initialize()
    return server


def ask(server: StdioServer, tool: str, args: dict) -> str:
    text, is_error = server.call(tool, args)
    assert not is_error, text
    return text


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_paraphrase_is_found_only_with_embeddings(tmp_path, endpoint):
    path = tmp_path / "memory.jsonl"
    write_graph(path, TEAM)
    plain = start(path, None)
    try:
        assert "zorblat sync" not in ask(plain, "recall", {"query": PARAPHRASE})
    finally:
        plain.close()
    server = start(path, env_for(endpoint))
    try:
        text = ask(server, "recall", {"query": PARAPHRASE})
        assert "zorblat sync starts at 02:00" in text and "Note:" not in text
        assert "nightly batch" in ask(server, "search_nodes", {"query": "quuxify"})
    finally:
        server.close()
    assert endpoint.requests[0]["path"] == "/v1/embeddings" and endpoint.requests[0]["model"] == "fake-concepts"


def test_fact_vectors_are_batched_and_cached_in_memory_and_in_memory_db(tmp_path, endpoint):
    path = tmp_path / "memory.jsonl"
    facts = [f"routine note number {i} about the zorblat sync" for i in range(150)]
    write_graph(path, [("ops log", "log", facts)])
    env = env_for(endpoint, MEMORY_OBS_MAX="1000")
    server = start(path, env)
    try:
        ask(server, "recall", {"query": PARAPHRASE})
        batches = [r["input"] for r in endpoint.requests[1:]]
        assert endpoint.requests[0]["input"] == [PARAPHRASE]  # the query first, alone
        assert [len(b) for b in batches] == [64, 64, 22] and sorted(sum(batches, [])) == sorted(facts)
        ask(server, "recall", {"query": "quuxify frobnicate"})
        assert [r["input"] for r in endpoint.requests[4:]] == [["quuxify frobnicate"]]  # no fact embedded again
    finally:
        server.close()
    with sqlite3.connect(tmp_path / "memory.db") as db:
        counted = db.execute("SELECT count(*), min(dim) FROM embeddings WHERE model='fake-concepts'").fetchone()
        assert counted == (150, DIM)
    endpoint.requests.clear()
    server = start(path, env)  # a new process reads the vectors from memory.db
    try:
        ask(server, "recall", {"query": PARAPHRASE})
        assert [r["input"] for r in endpoint.requests] == [[PARAPHRASE]]
    finally:
        server.close()


def test_a_write_embeds_its_new_facts_after_the_commit(tmp_path, endpoint):
    path = tmp_path / "memory.jsonl"
    write_graph(path, TEAM)
    server = start(path, env_for(endpoint))
    try:
        ask(server, "add_observations", {"observations": [{"entityName": "Lee Park",
                                                           "contents": ["blimster reviews happen on Fridays"]}]})
        assert "blimster reviews happen on Fridays" in endpoint.inputs()  # before any read
        assert "blimster reviews happen on Fridays" in path.read_text()
        before = len(endpoint.inputs())
        assert "blimster reviews" in ask(server, "recall", {"query": "frobnicate"})
        assert "blimster reviews happen on Fridays" not in endpoint.inputs()[before:]  # not embedded again
    finally:
        server.close()


def one_note(text: str) -> str:
    notes = [line for line in text.splitlines() if line.startswith("Note:")]
    assert len(notes) == 1, text
    return notes[0]


def test_an_endpoint_that_is_down_costs_one_note_and_nothing_else(tmp_path):
    path = tmp_path / "memory.jsonl"
    write_graph(path, TEAM)
    server = start(path, env_for(closed_port_url()))
    try:
        started = time.monotonic()
        text = ask(server, "recall", {"query": "where is Lee Park based?"})
        assert time.monotonic() - started < 2.0
        assert "based in Lisbon" in text  # the lexical answer
        assert "embeddings endpoint" in one_note(text) and "ranked by words only" in text
        saved = ask(server, "add_observations", {"observations": [{"entityName": "Lee Park",
                                                                   "contents": ["speaks Portuguese"]}]})
        assert "speaks Portuguese" in path.read_text() and "rror" not in saved
        text = ask(server, "search_nodes", {"query": "Portuguese"})
        assert "Lee Park" in text and "next try in" in one_note(text)
        assert ms.estimate_tokens(ask(server, "recall", {"query": "Lisbon", "budget": 50})) <= 50
    finally:
        server.close()


@pytest.mark.parametrize("mode", ["http500", "garbage", "wrong_dim", "wrong_count"])
def test_an_endpoint_that_answers_badly_costs_a_note_and_backs_off(tmp_path, mode):
    fake = FakeEndpoint(mode)
    path = tmp_path / "memory.jsonl"
    write_graph(path, TEAM)
    server = start(path, env_for(fake))
    try:
        text = ask(server, "recall", {"query": "where is Lee Park based?"})
        assert "based in Lisbon" in text and "embeddings endpoint" in one_note(text)
        calls = len(fake.requests)
        ask(server, "add_observations", {"observations": [{"entityName": "Lee Park", "contents": ["likes tea"]}]})
        text = ask(server, "recall", {"query": "tea"})
        assert "likes tea" in text and "likes tea" in path.read_text() and one_note(text)
        assert len(fake.requests) == calls  # backing off: not called again on every call
        assert server.proc.poll() is None
    finally:
        server.close()
        fake.close()
    if mode == "wrong_dim":  # the query's vector came (8 numbers), the facts' did not (5): none cached
        with sqlite3.connect(tmp_path / "memory.db") as db:
            assert db.execute("SELECT count(*) FROM embeddings").fetchone() == (0,)


def test_a_slow_endpoint_is_not_waited_for(tmp_path):
    fake = FakeEndpoint("slow")
    path = tmp_path / "memory.jsonl"
    write_graph(path, TEAM)
    server = start(path, env_for(fake))
    try:
        started = time.monotonic()
        text = ask(server, "recall", {"query": "where is Lee Park based?"})
        took = time.monotonic() - started
        assert "based in Lisbon" in text and "within 2 s" in one_note(text)
        assert took < ms.EMBED_QUERY_TIMEOUT + 1.5
    finally:
        server.close()
        fake.close()


def test_the_key_is_sent_and_never_shown(tmp_path):
    fake = FakeEndpoint("http500")
    path = tmp_path / "memory.jsonl"
    write_graph(path, TEAM)
    env = env_for(fake, MEMORY_EMBEDDINGS_KEY_ENV="FAKE_EMBED_KEY", FAKE_EMBED_KEY=KEY)
    server = start(path, env)
    try:
        text = ask(server, "recall", {"query": "Lisbon"})
        assert KEY not in text and one_note(text)
        lint = subprocess.run([sys.executable, str(SERVER), "--lint"], capture_output=True, text=True, timeout=30,
                              env={**env, "PATH": "/usr/bin:/bin", "MEMORY_FILE_PATH": str(path)})
        assert "key from FAKE_EMBED_KEY" in lint.stdout and "embeddings:" in lint.stdout
        assert KEY not in lint.stdout + lint.stderr
    finally:
        server.close()
        fake.close()
    assert fake.requests[0]["auth"] == f"Bearer {KEY}"
    assert KEY not in b"".join(server.stderr).decode()
    assert KEY not in repr(ms.Settings.from_env({**env, "MEMORY_FILE_PATH": str(path)}))


def test_bad_embedding_settings_are_clear_errors(tmp_path):
    base = {"MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}
    for env, words in [({"MEMORY_EMBEDDINGS_URL": "http://localhost:11434/v1"}, "MEMORY_EMBEDDINGS_MODEL"),
                       ({"MEMORY_EMBEDDINGS_URL": "localhost:11434", "MEMORY_EMBEDDINGS_MODEL": "m"}, "http(s)"),
                       ({"MEMORY_EMBEDDINGS_URL": "http://h/v1", "MEMORY_EMBEDDINGS_MODEL": "m",
                         "MEMORY_EMBEDDINGS_KEY_ENV": "NOT_SET_ANYWHERE"}, "NOT_SET_ANYWHERE")]:
        with pytest.raises(ms.ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
            ms.Settings.from_env({**base, **env})
    url = "http://user:hunter2@localhost:11434/v1?token=abc"
    settings = ms.Settings.from_env({**base, "MEMORY_EMBEDDINGS_URL": url, "MEMORY_EMBEDDINGS_MODEL": "m"})
    label = ms.EmbeddingClient(settings).label
    assert "hunter2" not in label and "abc" not in label and label == "http://localhost:11434/v1/embeddings"


def test_help_and_lint_name_the_embedding_settings(tmp_path):
    done = subprocess.run([sys.executable, str(SERVER), "--help"], capture_output=True, text=True, timeout=30)
    assert all(name in done.stdout for name in ("MEMORY_EMBEDDINGS_URL", "MEMORY_EMBEDDINGS_MODEL",
                                                "MEMORY_EMBEDDINGS_KEY_ENV", "MEMORY_EMBEDDINGS_KEY"))
    path = tmp_path / "memory.jsonl"
    write_graph(path, TEAM)
    lint = subprocess.run([sys.executable, str(SERVER), "--lint"], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "MEMORY_FILE_PATH": str(path)})
    assert "embeddings: off" in lint.stdout


def test_a_memory_db_of_the_previous_schema_gains_the_cache_and_keeps_its_rows(tmp_path):
    path = tmp_path / "memory.db"
    with sqlite3.connect(path) as db:
        for script in ms.SCHEMA[:5]:
            db.executescript(script)
        db.execute("PRAGMA user_version=5")
        db.execute("INSERT INTO probes(query, entity, fact, source, created) VALUES ('q', 'e', '', 'manual', 0)")
    meta = ms.MetaStore(path)
    assert meta.conn.execute("PRAGMA user_version").fetchone()[0] == len(ms.SCHEMA) >= 6
    assert meta.probes() == [("q", "e", "", "manual")]
    vec = ms.unit_vector([3.0, 4.0])
    meta.save_vectors("m", [("h1", vec)])
    assert list(meta.vectors("m", ["h1", "h2"])["h1"]) == pytest.approx([0.6, 0.8])
    assert meta.forget_vectors("m", {"h2"}) == 1 and meta.vectors("m", ["h1"]) == {}


def test_past_the_scan_limit_only_word_matches_are_compared(tmp_path, endpoint, monkeypatch):
    """Over DENSE_SCAN_MAX facts the cosine is worked out for the lexical pool only (pure Python is ~15 us a
    fact): embeddings still re-rank, but a fact sharing no word with the query is no longer found."""
    from conftest import make_memory, call
    mem = make_memory(tmp_path, TEAM, MEMORY_EMBEDDINGS_URL=endpoint.url, MEMORY_EMBEDDINGS_MODEL="fake-concepts")
    assert "zorblat sync" in call(mem, "recall", {"query": PARAPHRASE})
    monkeypatch.setattr(ms, "DENSE_SCAN_MAX", 1)
    assert "zorblat sync" not in call(mem, "recall", {"query": PARAPHRASE})
    assert "zorblat sync" in call(mem, "recall", {"query": "zorblat quuxify"})


def test_an_endpoint_too_slow_for_a_batch_gets_smaller_batches_not_a_back_off(tmp_path, monkeypatch):
    from conftest import make_memory, call
    fake = FakeEndpoint("slow_batches")  # more than 8 texts at once: no answer in time
    monkeypatch.setattr(ms, "EMBED_FILL_SECONDS", 0.5)
    try:
        facts = [f"routine entry {i}" for i in range(11)] + ["zorblat sync starts at 02:00"]
        mem = make_memory(tmp_path, [("nightly batch", "process", facts)], MEMORY_EMBEDDINGS_URL=fake.url,
                          MEMORY_EMBEDDINGS_MODEL="fake-concepts")
        started = time.monotonic()
        first = call(mem, "recall", {"query": PARAPHRASE})
        assert time.monotonic() - started < 3.0 and "no embedding yet" in first  # waited ~1.5 s, then words
        assert mem.vectors.batch < ms.EMBED_BATCH and mem.vectors.client.available()
        for _ in range(4):  # each call embeds a little more, in smaller batches
            text = call(mem, "recall", {"query": PARAPHRASE})
        assert "zorblat sync" in text and "Note:" not in text
    finally:
        fake.close()


def test_user_and_password_in_the_url_go_as_basic_auth_never_into_the_host_name(tmp_path, endpoint):
    """urllib takes user:password@ in a URL for part of the host name (the endpoint then looked unreachable):
    they are sent as Basic auth, as curl does, and shown nowhere."""
    path = tmp_path / "memory.jsonl"
    write_graph(path, TEAM)
    url = endpoint.url.replace("http://", "http://me%40corp:s3cret-pass@")
    lint = subprocess.run([sys.executable, str(SERVER), "--lint"], capture_output=True, text=True, timeout=30,
                          env={**env_for(url), "PATH": "/usr/bin:/bin", "MEMORY_FILE_PATH": str(path)})
    assert "embeddings:" in lint.stdout and "answers (" in lint.stdout, lint.stdout + lint.stderr
    assert "s3cret-pass" not in lint.stdout + lint.stderr
    import base64
    assert endpoint.requests[0]["auth"] == "Basic " + base64.b64encode(b"me@corp:s3cret-pass").decode()


def test_a_broken_connection_is_named_once_in_the_note():
    """An unexpected failure (a reset connection, a broken answer) reads "failed (ConnectionResetError: ...)",
    not "failed (failed (...))"."""
    settings = ms.Settings.from_env({"MEMORY_FILE_PATH": "/tmp/unused-graphmem.jsonl",
                                     "MEMORY_EMBEDDINGS_URL": "http://127.0.0.1:9/v1",
                                     "MEMORY_EMBEDDINGS_MODEL": "m"})
    client = ms.EmbeddingClient(settings)

    class Resetting:
        def open(self, *args, **kwargs):
            raise ConnectionResetError(104, "Connection reset by peer")
    client._opener = Resetting()
    with pytest.raises(ms.EmbeddingError) as caught:
        client.embed(["x"], 1.0)
    assert str(caught.value).startswith("ConnectionResetError") and "failed" not in str(caught.value)


def test_config_never_copies_credentials_in_the_endpoint_url(tmp_path):
    """--config (and --config --hooks) copy MEMORY_EMBEDDINGS_URL into a client's config file: without its
    user:password@ and key-like query parameters (said on stderr); other parameters stay."""
    url = "https://me:s3cret-pass@embed.example/v1?api-version=2024-02&api_key=k3y-value"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MEMORY_FILE_PATH": str(tmp_path / "m.jsonl"),
           **env_for(url)}
    for extra in ([], ["--hooks"]):
        done = subprocess.run([sys.executable, str(SERVER), "--config", "claude-code", *extra], capture_output=True,
                              text=True, timeout=30, env=env)
        assert done.returncode == 0, done.stderr
        assert "s3cret-pass" not in done.stdout + done.stderr and "k3y-value" not in done.stdout + done.stderr
        assert "embed.example/v1?api-version=2024-02" in done.stdout, done.stdout
    done = subprocess.run([sys.executable, str(SERVER), "--config", "cursor"], capture_output=True, text=True,
                          timeout=30, env=env)
    assert "without its user:password@ and parameter api_key" in done.stderr
    assert json.loads(done.stdout)["mcpServers"]["graphmem"]["env"]["MEMORY_EMBEDDINGS_URL"] == \
        "https://embed.example/v1?api-version=2024-02"
