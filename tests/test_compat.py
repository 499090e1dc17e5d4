"""Compatibility with the reference memory server's memory.jsonl (reference-server.md section 4), both ways,
and hostile input through the real stdio server leaving the file byte-identical.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import memory_server as ms  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REF_DEMO = FIXTURES / "ref-demo-memory.jsonl"
NODE = shutil.which("node")

# A Unicode stress entity exactly as the reference (JSON.stringify) writes it: raw UTF-8 for non-ASCII,
# U+2028/2029 and DEL; \b \f \n \r \t and lowercase \u00XX for other controls; lone surrogates escaped.
STRESS_LINE = (
    '{"type":"entity","name":"Uni 😀 漢字 \u2028 é","entityType":"stress ✓","observations":['
    '"emoji 👩\u200d💻 and 🇩🇪",'
    '"CJK 日本語の文と한국어",'
    '"line\u2028para\u2029end",'
    '"ctl \\u0001\\u001f\\b\\f\\r\\n\\t del \x7f",'
    '"lone \\ud800 high and \\udfff low",'
    '"quote \\" back \\\\ slash / solidus",'
    '"nbsp\u00a0zwj\u200d bom\ufeff end"]}'
)
STRESS_RELATION = '{"type":"relation","from":"Uni 😀 漢字 \u2028 é","to":"Alice","relationType":"knöws 😀"}'
STRESS_NAME = "Uni 😀 漢字 \u2028 é"


def stress_file_bytes() -> bytes:
    """The reference demo file with the stress entity and relation in the reference's own order."""
    lines = REF_DEMO.read_bytes().decode("utf-8").split("\n")
    entities = [line for line in lines if '"type":"entity"' in line] + [STRESS_LINE]
    relations = [line for line in lines if '"type":"relation"' in line] + [STRESS_RELATION]
    return "\n".join(entities + relations).encode("utf-8")


def reference_load(data: bytes) -> tuple[list[dict], list[dict]]:
    """The reference's loader (section 4): split on "\\n", skip blank, JSON.parse each line (any failure fails
    the call), keep only type entity/relation with their known keys."""
    text = data.decode("utf-8", "replace")  # fs.readFile(..., "utf-8")
    entities, relations = [], []
    for line in text.split("\n"):
        if line.strip() == "":
            continue
        obj = json.loads(line, parse_constant=_reject_constant)  # JSON.parse has no NaN/Infinity
        if not isinstance(obj, dict):
            continue
        if obj.get("type") == "entity":
            entities.append({"name": obj.get("name"), "entityType": obj.get("entityType"),
                             "observations": obj.get("observations")})
        elif obj.get("type") == "relation":
            relations.append({"from": obj.get("from"), "to": obj.get("to"), "relationType": obj.get("relationType")})
    return entities, relations


def _reject_constant(name: str):
    raise ValueError(f"JSON.parse rejects {name}")


def graph_as_reference(graph: ms.Graph) -> tuple[list[dict], list[dict]]:
    return ([{"name": e.name, "entityType": e.entityType, "observations": list(e.observations)} for e in graph.entities],
            [{"from": r.frm, "to": r.to, "relationType": r.relationType} for r in graph.relations])


NODE_LOADER = r"""
const fs = require("fs");
const text = fs.readFileSync(process.argv[1], "utf-8");
const out = {entities: [], relations: []};
for (const line of text.split("\n")) {
  if (line.trim() === "") continue;
  const item = JSON.parse(line);
  if (item.type === "entity") out.entities.push({name: item.name, entityType: item.entityType, observations: item.observations});
  else if (item.type === "relation") out.relations.push({from: item.from, to: item.to, relationType: item.relationType});
}
process.stdout.write(JSON.stringify(out));
"""


def node_load(path: Path) -> tuple[list[dict], list[dict]]:
    proc = subprocess.run([NODE, "-e", NODE_LOADER, str(path)], capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = json.loads(proc.stdout.decode("utf-8"))
    return out["entities"], out["relations"]


def make_memory(path: Path, **env: str) -> ms.Memory:
    return ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": str(path), **env}), client="t")


def ok(result: tuple[str, bool]) -> str:
    text, is_error = result
    assert not is_error, text
    return text


# ───────────────────────────────────────────────────────────── reference file → graphmem

def test_fixture_is_the_reference_servers_file():
    data = REF_DEMO.read_bytes()
    assert not data.endswith(b"\n") and data.count(b"\n") == 4


def test_reference_file_loads_unchanged():
    graph = ms.parse_graph_bytes(REF_DEMO.read_bytes())
    assert graph.unreadable == [] and graph.other_lines == []
    assert graph_as_reference(graph) == (
        [{"name": "Alice", "entityType": "person", "observations": ["works at Acme Corp", "likes coffee", "likes coffee"]},
         {"name": "Bob", "entityType": "person", "observations": ["works at TechCo"]},
         {"name": "Acme Corp", "entityType": "company", "observations": ["tech company"]}],
        [{"from": "Alice", "to": "Acme Corp", "relationType": "works_at"},
         {"from": "Bob", "to": "Alice", "relationType": "knows"}])
    assert all(e.extra == {} for e in graph.entities) and all(r.extra == {} for r in graph.relations)
    assert graph_as_reference(graph) == reference_load(REF_DEMO.read_bytes())


def test_serialising_the_reference_file_gives_identical_bytes():
    data = REF_DEMO.read_bytes()
    assert ms.serialise_graph(ms.parse_graph_bytes(data)).encode("utf-8") == data


def test_unicode_stress_entity_serialises_byte_identical():
    data = stress_file_bytes()
    graph = ms.parse_graph_bytes(data)
    assert graph.unreadable == []
    stress = graph.get(STRESS_NAME)
    assert stress is not None
    assert "lone \ud800 high and \udfff low" in stress.observations  # loaded from the escaped form
    assert "ctl \x01\x1f\b\f\r\n\t del \x7f" in stress.observations
    assert ms.serialise_graph(graph).encode("utf-8") == data
    assert ms.dump_json_line(stress.to_json()) == STRESS_LINE


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_stress_line_is_what_json_stringify_writes(tmp_path):
    """Our hand-written STRESS_LINE really is the reference runtime's output (JSON.stringify of JSON.parse)."""
    path = tmp_path / "stress.jsonl"
    path.write_bytes(stress_file_bytes())
    script = ('const fs=require("fs");const t=fs.readFileSync(process.argv[1],"utf-8");'
              'process.stdout.write(t.split("\\n").map(l=>JSON.stringify(JSON.parse(l))).join("\\n"));')
    proc = subprocess.run([NODE, "-e", script, str(path)], capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == stress_file_bytes()


def test_memory_reads_the_reference_file_without_touching_it(tmp_path):
    path = tmp_path / "memory.jsonl"
    shutil.copyfile(REF_DEMO, path)
    before = path.read_bytes()
    mem = make_memory(path)
    text = ok(mem.call_tool("read_graph", {}))
    assert text.startswith("3 entities, 2 relations, 5 facts")
    opened = ok(mem.call_tool("open_nodes", {"names": ["Alice"]}))
    assert opened.count("likes coffee") == 2
    assert "Alice -works_at-> Acme Corp" in opened and "Bob -knows-> Alice" in opened
    assert "Bob" in ok(mem.call_tool("search_nodes", {"query": "techco"}))
    assert path.read_bytes() == before


def test_a_write_keeps_untouched_reference_lines_byte_identical(tmp_path):
    path = tmp_path / "memory.jsonl"
    shutil.copyfile(REF_DEMO, path)
    before = REF_DEMO.read_bytes().split(b"\n")
    mem = make_memory(path)
    text = ok(mem.call_tool("add_observations", {"observations": [{"entityName": "Bob", "contents": ["plays chess"]}]}))
    assert "+1" in text
    after = path.read_bytes().split(b"\n")
    assert after[0] == before[0]  # Alice, with her duplicate "likes coffee", untouched
    assert after[1] == b'{"type":"entity","name":"Bob","entityType":"person","observations":["works at TechCo","plays chess"]}'
    assert after[2:] == before[2:]
    # Adding the duplicate again is skipped and the existing duplicate stays as it was.
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "Alice", "contents": ["likes coffee"]}]}))
    assert path.read_bytes().split(b"\n")[0] == before[0]


def test_memory_handles_a_reference_file_with_lone_surrogates(tmp_path):
    """The reference writes lone surrogates as \\ud800; graphmem must read and rewrite such a file."""
    path = tmp_path / "memory.jsonl"
    data = stress_file_bytes()
    path.write_bytes(data)
    mem = make_memory(path)
    text = ok(mem.call_tool("read_graph", {}))
    assert text.startswith("4 entities, 3 relations")
    assert "lone" in ok(mem.call_tool("open_nodes", {"names": [STRESS_NAME]}))
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "Bob", "contents": ["plays chess"]}]}))
    lines = path.read_bytes().decode("utf-8").split("\n")
    assert STRESS_LINE in lines and STRESS_RELATION in lines


# ───────────────────────────────────────────────────────────── graphmem file → reference

def _exercise(mem: ms.Memory) -> None:
    ok(mem.call_tool("create_entities", {"entities": [
        {"name": "Zoë 😀", "entityType": "persön", "observations": ["likes 日本語", "line\u2028break and tab\t and nul\x00"]},
        {"name": "<img src=x onerror=alert(1)>", "entityType": "<b>html</b>", "observations": ["<script>alert(1)</script>"]},
        {"name": "../x", "entityType": "path", "observations": ['quote " and backslash \\ and /']},
        {"name": "Carol", "entityType": "person", "observations": []}]}))
    ok(mem.call_tool("create_relations", {"relations": [{"from": "Zoë 😀", "to": "Alice", "relationType": "knöws"},
                                                        {"from": "Carol", "to": "../x", "relationType": "owns"}]}))
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "Alice", "contents": ["2026-01-02: joined 🚀 team"]}]}))
    ok(mem.call_tool("delete_observations", {"deletions": [{"entityName": "Bob", "observations": ["works at TechCo"]}]}))
    ok(mem.call_tool("delete_relations", {"relations": [{"from": "Bob", "to": "Alice", "relationType": "knows"}]}))
    ok(mem.call_tool("rename_entity", {"name": "Carol", "newName": "Carol 2"}))
    ok(mem.call_tool("delete_entities", {"entityNames": ["Acme Corp"]}))


def _check_reference_shape(data: bytes) -> None:
    assert not data.endswith(b"\n")
    lines = data.decode("utf-8").split("\n")
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds == sorted(kinds, key=lambda k: k != "entity"), "entities must come before relations"
    for line in lines:
        obj = json.loads(line)
        assert line == json.dumps(obj, ensure_ascii=False, separators=(",", ":")), "not compact raw-UTF-8 JSON"
        keys = list(obj)
        assert keys[:4] in (["type", "name", "entityType", "observations"], ["type", "from", "to", "relationType"])


def test_file_written_by_graphmem_loads_under_the_reference_rules(tmp_path):
    path = tmp_path / "memory.jsonl"
    shutil.copyfile(REF_DEMO, path)
    mem = make_memory(path)
    _exercise(mem)
    data = path.read_bytes()
    _check_reference_shape(data)
    loaded = reference_load(data)
    assert loaded == graph_as_reference(ms.parse_graph_bytes(data))
    names = [e["name"] for e in loaded[0]]
    assert names == ["Alice", "Bob", "Zoë 😀", "<img src=x onerror=alert(1)>", "../x", "Carol 2"]
    assert loaded[0][0]["observations"] == ["works at Acme Corp", "likes coffee", "likes coffee", "2026-01-02: joined 🚀 team"]
    assert loaded[0][1]["observations"] == []
    assert {"from": "Carol 2", "to": "../x", "relationType": "owns"} in loaded[1]
    assert all(r["from"] != "Acme Corp" and r["to"] != "Acme Corp" for r in loaded[1])
    assert "line\u2028break and tab\t and nul\x00" in loaded[0][2]["observations"]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_file_written_by_graphmem_parses_in_node(tmp_path):
    path = tmp_path / "memory.jsonl"
    shutil.copyfile(REF_DEMO, path)
    _exercise(make_memory(path))
    assert node_load(path) == reference_load(path.read_bytes())


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_empty_graph_written_by_graphmem_is_a_zero_byte_file(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path)
    ok(mem.call_tool("create_entities", {"entities": [{"name": "Tmp", "entityType": "t", "observations": []}]}))
    ok(mem.call_tool("delete_entities", {"entityNames": ["Tmp"]}))
    assert path.read_bytes() == b""
    assert node_load(path) == ([], [])


# ───────────────────────────────────────────────────────────── hostile input through the real stdio server

class Stdio:
    def __init__(self, memory_file: Path, **env: str):
        child_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
                     "MEMORY_FILE_PATH": str(memory_file), "PYTHONDONTWRITEBYTECODE": "1", **env}
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "memory_server.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env,
                                     cwd=str(memory_file.parent))
        self.replies: "queue.Queue[bytes]" = queue.Queue()
        self.stderr: list[bytes] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.replies.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        self.next_id = 0

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in iter(stream.readline, b""):
            sink(line)

    def raw(self, data: bytes, timeout: float = 20.0) -> dict:
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()
        return json.loads(self.replies.get(timeout=timeout))

    def request(self, method: str, params=None, timeout: float = 20.0) -> dict:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        reply = self.raw(json.dumps(message).encode(), timeout)
        assert reply.get("id") == self.next_id, reply
        return reply

    def call(self, tool: str, arguments) -> tuple[str, bool]:
        reply = self.request("tools/call", {"name": tool, "arguments": arguments})
        assert "result" in reply, reply
        return reply["result"]["content"][0]["text"], reply["result"]["isError"]

    def close(self) -> int:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                return self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return -9
        return self.proc.returncode


@pytest.fixture
def stdio(tmp_path):
    folder = tmp_path / "mem"
    folder.mkdir()
    server = Stdio(folder / "memory.jsonl", MEMORY_OBS_MAX="1")
    reply = server.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "pytest", "version": "1"}})
    assert reply["result"]["protocolVersion"] == "2025-11-25"
    server.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    server.proc.stdin.flush()
    yield server
    server.close()


BIG = "x" * 1_000_000

# (label, raw line or (tool, arguments), check on the reply)
BAD_INPUT = [
    ("malformed json", b'{"jsonrpc":"2.0","id":7,"method":"tools/call",', ("error", -32700)),
    ("invalid utf-8", b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read_graph","x":"\xff\xfe"}}',
     ("error", -32700)),
    ("json array", b'[{"jsonrpc":"2.0","id":9,"method":"ping"}]', ("error", -32600)),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, ("error", None)),
    ("json string", b'"just a string"', ("error", -32600)),
    ("params not object", b'{"jsonrpc":"2.0","id":10,"method":"tools/call","params":[1,2]}', ("error", -32602)),
    ("no tool name", b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"arguments":{}}}', ("error", -32602)),
    ("unknown tool", b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"rm_rf","arguments":{}}}',
     ("error", -32602)),
    ("arguments a string", ("create_entities", "entities"), ("tool", "arguments must be an object")),
    ("entities a string", ("create_entities", {"entities": "Alice"}), ("tool", "expected array, received string at entities")),
    ("name a number", ("create_entities", {"entities": [{"name": 5, "entityType": "t", "observations": []}]}),
     ("tool", "expected string, received number at entities[0].name")),
    ("observations null", ("create_entities", {"entities": [{"name": "N", "entityType": "t", "observations": None}]}),
     ("tool", "expected array, received null")),
    ("missing entityType", ("create_entities", {"entities": [{"name": "X", "observations": []}]}),
     ("tool", "missing required field entities[0].entityType")),
    ("missing observations", ("add_observations", {}), ("tool", "missing required field observations")),
    ("contents a string", ("add_observations", {"observations": [{"entityName": "Base", "contents": "hello"}]}),
     ("tool", "expected array, received string")),
    ("1 MB fact", ("add_observations", {"observations": [{"entityName": "Base", "contents": [BIG]}]}),
     ("tool", "300-char limit")),
    ("1 MB fact on create", ("create_entities", {"entities": [{"name": "Base", "entityType": "t", "observations": [BIG]}]}),
     ("ok", "Already existed")),
    ("unknown entity ../x", ("add_observations", {"observations": [{"entityName": "../x", "contents": ["fact"]}]}),
     ("tool", "unknown entity")),
    ("unknown entity a/b", ("add_observations", {"observations": [{"entityName": "a/b", "contents": ["fact"]}]}),
     ("tool", "unknown entity")),
    ("relation to missing", ("create_relations", {"relations": [{"from": "Base", "to": ".", "relationType": "r"}]}),
     ("ok", "unknown entity")),
    ("query a number", ("search_nodes", {"query": 5}), ("tool", "expected string, received number at query")),
    ("limit a word", ("search_nodes", {"query": "a", "limit": "ten"}), ("tool", "expected integer")),
    ("limit a bool", ("search_nodes", {"query": "a", "limit": True}), ("tool", "expected integer")),
    ("1 MB query", ("search_nodes", {"query": BIG}), ("ok", "No entities match")),
    ("1 MB open", ("open_nodes", {"names": [BIG]}), ("ok", "Not found")),
    ("deletions an object", ("delete_observations", {"deletions": {"entityName": "Base"}}), ("tool", "expected array")),
    ("relations missing to", ("delete_relations", {"relations": [{"from": "Base", "relationType": "r"}]}),
     ("tool", "missing required field")),
    ("bad action", ("mark_fact", {"entityName": "Base", "observation": "base fact one", "action": "explode"}),
     ("tool", "expected one of")),
    ("rename to empty", ("rename_entity", {"name": "Base", "newName": "   "}), ("tool", "empty")),
    ("rename unknown", ("rename_entity", {"name": "../x", "newName": "y"}), ("tool", "unknown entity")),
    ("restore unknown", ("archived_observations", {"entityName": "Base", "restore": ["nope"]}), ("tool", "no archived")),
    ("secret", ("add_observations", {"observations": [{"entityName": "Base", "contents": ["password=Hunter2Hunter2!"]}]}),
     ("tool", "credential")),
    ("empty name", ("create_entities", {"entities": [{"name": "", "entityType": "t", "observations": []}]}),
     ("ok", "refused")),
    ("html lookup", ("open_nodes", {"names": ["<img src=x onerror=alert(1)>"]}), ("ok", "Not found")),
]


def test_bad_input_through_stdio_leaves_the_file_byte_identical(stdio, tmp_path):
    path = tmp_path / "mem" / "memory.jsonl"
    text, is_error = stdio.call("create_entities", {"entities": [{"name": "Base", "entityType": "t",
                                                                  "observations": ["base fact one"]}]})
    assert not is_error, text
    snapshot = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    for label, sent, (kind, expect) in BAD_INPUT:
        if isinstance(sent, bytes):
            reply = stdio.raw(sent)
        else:
            reply = stdio.request("tools/call", {"name": sent[0], "arguments": sent[1]})
        if kind == "error":
            assert "error" in reply, (label, reply)
            if expect is not None:
                assert reply["error"]["code"] == expect, (label, reply)
            assert reply["error"]["message"], label
        else:
            assert "result" in reply, (label, reply)
            result_text = reply["result"]["content"][0]["text"]
            assert reply["result"]["isError"] is (kind == "tool"), (label, result_text[:300])
            assert expect in result_text, (label, result_text[:300])
            assert len(result_text) < 5000, (label, "answer echoes the huge input")
        assert path.read_bytes() == snapshot, f"{label}: the file changed"
        assert path.stat().st_mtime_ns == mtime, f"{label}: the file was rewritten"
    assert not list(path.parent.glob("*.tmp")) and not (path.parent / "memory.jsonl.lock").exists()
    assert stdio.request("ping")["result"] == {}
    assert stdio.proc.poll() is None
    assert stdio.close() == 0


def test_hostile_but_valid_names_and_text_through_stdio(stdio, tmp_path):
    folder = tmp_path / "mem"
    path = folder / "memory.jsonl"
    xss = "<img src=x onerror=alert(1)>"
    names = ["../x", "a/b", ".", "..", "CON", xss, "Zoë 😀 日本語", "a\\b"]
    text, is_error = stdio.call("create_entities", {"entities": [
        {"name": n, "entityType": "<b>t</b>" if n == xss else "thing",
         "observations": [f"2024-01-0{i + 1}: first {n} event"]} for i, n in enumerate(names)]})
    assert not is_error, text
    assert f"Created {len(names)}" in text
    # Over the cap of 1: each entity's older dated fact is archived, inside archive/ only.
    for i, n in enumerate(names):
        text, is_error = stdio.call("add_observations", {"observations": [{"entityName": n,
                                                                          "contents": [f"2025-02-0{i + 1}: second event"]}]})
        assert not is_error, text
    text, is_error = stdio.call("open_nodes", {"names": [xss]})
    assert not is_error and xss in text and "<b>t</b>" in text  # plain text, not escaped or dropped
    text, is_error = stdio.call("search_nodes", {"query": "onerror"})
    assert not is_error and xss in text
    text, is_error = stdio.call("open_nodes", {"names": ["Zoë 😀 日本語"]})
    assert not is_error and "Zoë 😀 日本語" in text and "(1 archived)" in text

    stored = {o["name"]: o for o in map(json.loads, path.read_bytes().decode("utf-8").split("\n"))}
    assert set(stored) == set(names)
    assert stored[xss]["entityType"] == "<b>t</b>"
    archive = folder / "archive"
    files = sorted(archive.iterdir())
    assert len(files) == len(names)
    for f in files:
        assert f.resolve().parent == archive.resolve() and f.suffix == ".md"
    assert sorted(ms.archive_entity_name(f) for f in files) == sorted(names)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mem"]  # nothing escaped the folder
    for n in names:
        text, is_error = stdio.call("archived_observations", {"entityName": n})
        assert not is_error and f"first {n} event" in text, text
    assert stdio.request("ping")["result"] == {}
    assert stdio.close() == 0


def test_lone_surrogate_over_the_wire_is_stored_or_refused_and_the_server_keeps_working(stdio, tmp_path):
    path = tmp_path / "mem" / "memory.jsonl"
    line = b'{"jsonrpc":"2.0","id":"s1","method":"tools/call","params":{"name":"create_entities","arguments":' \
           b'{"entities":[{"name":"Surr","entityType":"t","observations":["lone \\ud800 here"]}]}}}'
    reply = stdio.raw(line)
    assert reply["id"] == "s1"
    assert "result" in reply, f"a valid JSON string gave a protocol error: {reply}"
    text, is_error = stdio.call("read_graph", {})
    assert not is_error, text
    if not reply["result"]["isError"]:
        assert text.startswith("1 entities")
        assert path.read_bytes() == \
            b'{"type":"entity","name":"Surr","entityType":"t","observations":["lone \\ud800 here"]}'
    text, is_error = stdio.call("create_entities", {"entities": [{"name": "After", "entityType": "t", "observations": []}]})
    assert not is_error, text
    assert stdio.request("ping")["result"] == {}


def test_big_requests_are_answered_promptly(stdio):
    start = time.monotonic()
    text, is_error = stdio.call("recall", {"query": " ".join(["word"] * 100_000)})
    assert time.monotonic() - start < 15
    assert len(text) < 5000


def test_duplicate_entity_names_in_a_reference_file(tmp_path):
    """Reference section 4: duplicates are tolerated; add_observations touches the first copy; delete removes all."""
    path = tmp_path / "memory.jsonl"
    first = b'{"type":"entity","name":"Dup","entityType":"t","observations":["first copy"]}'
    second = b'{"type":"entity","name":"Dup","entityType":"t","observations":["second copy"]}'
    other = b'{"type":"entity","name":"Other","entityType":"t","observations":[]}'
    path.write_bytes(b"\n".join([first, other, second]))
    mem = make_memory(path)
    assert ok(mem.call_tool("read_graph", {})).startswith("3 entities")
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "Dup", "contents": ["added later"]}]}))
    lines = path.read_bytes().split(b"\n")
    assert lines == [b'{"type":"entity","name":"Dup","entityType":"t","observations":["first copy","added later"]}',
                     other, second]
    ok(mem.call_tool("delete_entities", {"entityNames": ["Dup"]}))
    assert path.read_bytes() == other
