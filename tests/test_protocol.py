"""The MCP protocol over stdio, against the real server process (mcp-protocol.md section 1)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import SERVER, StdioServer, write_graph

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {},
          "io.modelcontextprotocol/clientInfo": {"name": "modern-client", "version": "1"}}
REFERENCE_NINE = ["create_entities", "create_relations", "add_observations", "delete_entities",
                  "delete_observations", "delete_relations", "read_graph", "search_nodes", "open_nodes"]


def test_first_answer_is_fast_and_negotiates_the_clients_version(server):
    start = time.monotonic()
    reply = server.initialize("2025-06-18")
    assert time.monotonic() - start < 2.0  # spec target 0.5 s; generous on a loaded CI machine
    result = reply["result"]
    assert result["protocolVersion"] == "2025-06-18"
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "graphmem"
    assert "recall" in result["instructions"]


@pytest.mark.parametrize("asked,answered", [("2024-11-05", "2024-11-05"), ("2025-03-26", "2025-03-26"),
                                            ("2025-11-25", "2025-11-25"), ("2099-01-01", "2025-11-25"),
                                            ("2026-07-28", "2025-11-25"), (None, "2025-11-25")])
def test_version_negotiation(server, asked, answered):
    assert server.initialize(asked)["result"]["protocolVersion"] == answered


def test_tools_list_fields_follow_the_negotiated_version(memory_file):
    memory_file.parent.mkdir(parents=True)
    for version, has_title, has_annotations in [("2024-11-05", False, False), ("2025-03-26", False, True),
                                                ("2025-11-25", True, True)]:
        s = StdioServer(memory_file)
        s.initialize(version)
        tools = s.request("tools/list")["result"]["tools"]
        assert all(("title" in t) == has_title and ("annotations" in t) == has_annotations for t in tools)
        assert all("outputSchema" not in t for t in tools)
        s.close()


def test_tools_list_is_one_portable_page_under_3000_tokens(server):
    server.initialize()
    reply = server.request("tools/list")  # no params key, as the Python SDK sends it
    result = reply["result"]
    assert "nextCursor" not in result
    names = [t["name"] for t in result["tools"]]
    assert names[:9] == REFERENCE_NINE
    assert {"rename_entity", "archived_observations", "recall", "mark_fact"} <= set(names)
    assert len(json.dumps(result)) / 4 < 3000
    for tool in result["tools"]:
        assert re.fullmatch(r"[a-z][a-z0-9_]{0,39}", tool["name"])
        assert tool["description"] and tool["title"]
        schema = tool["inputSchema"]
        assert schema["type"] == "object" and "properties" in schema
        assert not {"oneOf", "anyOf", "allOf", "$ref"} & set(json.dumps(schema).replace('"', " ").split())
        _assert_single_types(schema)
    by_name = {t["name"]: t for t in result["tools"]}
    for name in ("read_graph", "search_nodes", "open_nodes", "recall"):
        assert by_name[name]["annotations"]["readOnlyHint"] is True
    for name in ("delete_entities", "delete_observations", "delete_relations"):
        assert by_name[name]["annotations"]["destructiveHint"] is True


def _assert_single_types(schema):
    if isinstance(schema, dict):
        if "type" in schema:
            assert isinstance(schema["type"], str)
        for value in schema.values():
            _assert_single_types(value)


def test_reference_input_schemas_are_kept(server):
    """The nine tools take exactly the reference's input (properties, required, descriptions)."""
    reference = json.loads((SERVER.parent / "tests" / "fixtures" / "ref-tools-list.json").read_text())
    ref_tools = {t["name"]: t for t in (reference["tools"] if isinstance(reference, dict) else reference)}
    server.initialize()
    ours = {t["name"]: t for t in server.request("tools/list")["result"]["tools"]}
    for name in REFERENCE_NINE:
        ref_schema = dict(ref_tools[name]["inputSchema"])
        ref_schema.pop("$schema", None)
        our_schema = dict(ours[name]["inputSchema"])
        extra = set(our_schema["properties"]) - set(ref_schema["properties"])
        for key in extra:  # optional extras only (limit on search)
            assert key not in our_schema.get("required", [])
            our_schema["properties"] = {k: v for k, v in our_schema["properties"].items() if k not in extra}
        assert our_schema == ref_schema, name
        assert ours[name]["title"] == ref_tools[name]["title"]
        assert ours[name]["annotations"] == ref_tools[name]["annotations"]


def test_ids_are_echoed_with_their_type_including_zero(server):
    server.send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {}}})
    assert server.read()["id"] == 0
    server.send({"jsonrpc": "2.0", "id": "s1", "method": "ping"})
    reply = server.read()
    assert reply["id"] == "s1" and reply["result"] == {}


@pytest.mark.parametrize("line,code", [
    (b"garbage", -32700), (b"{\"jsonrpc\":\"2.0\",\"id\":1,", -32700), (b"\xff\xfe{}", -32700),
    (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', -32600), (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600),
    (b'{"jsonrpc":"2.0","id":7.5,"method":"ping"}', -32600), (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600),
    (b'{"jsonrpc":"2.0","id":3,"method":5}', -32600), (b'[]', -32600), (b'"just a string"', -32600),
    (b'[{"jsonrpc":"2.0","id":9,"method":"ping"}]', -32600),
    (b'{"jsonrpc":"2.0","id":4,"method":"no/such"}', -32601),
    (b'{"jsonrpc":"2.0","id":5,"method":"resources/list"}', -32601),
    (b'{"jsonrpc":"2.0","id":6,"method":"ping","params":[1]}', -32602),
])
def test_bad_messages_get_the_right_error_and_the_server_keeps_going(server, line, code):
    server.initialize()
    server.send_raw(line + b"\n")
    reply = server.read()
    assert reply["error"]["code"] == code
    assert set(reply) == {"jsonrpc", "id", "error"}
    if code in (-32700,):
        assert reply["id"] is None
    assert server.request("ping")["result"] == {}


def test_notifications_and_responses_are_never_answered(server):
    server.initialize()
    server.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {"x": 1}})
    server.send({"jsonrpc": "2.0", "method": "no/such/method"})
    server.send({"jsonrpc": "2.0", "id": 55, "result": {}})
    assert server.no_reply(0.5)


def test_crlf_blank_lines_and_utf8_whatever_the_locale(memory_file):
    memory_file.parent.mkdir(parents=True)
    s = StdioServer(memory_file, {"PYTHONIOENCODING": "cp1252", "LANG": "C", "LC_ALL": "C"})
    s.send_raw(b"\r\n\n")
    s.send_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                           "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}).encode() + b"\r\n")
    assert s.read()["id"] == 1
    name = "café ✓ 😀 日本"
    s.call("create_entities", {"entities": [{"name": name, "entityType": "thing", "observations": ["naïve ✓"]}]})
    s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "open_nodes", "arguments": {"names": [name]}}})
    raw = s.read_raw()
    assert b"\r" not in raw and raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert name.encode("utf-8") in raw  # raw UTF-8 on the wire
    assert name in json.loads(raw)["result"]["content"][0]["text"]
    assert name.encode("utf-8") in memory_file.read_bytes()
    s.close()


def test_stdout_carries_only_protocol_and_logs_go_to_stderr(server):
    server.initialize()
    server.call("create_entities", {"entities": [{"name": "a", "entityType": "t", "observations": ["x"]}]})
    server.call("read_graph")
    assert server.close() == 0
    assert b"graphmem" in b"".join(server.stderr)
    while not server.lines.empty():
        json.loads(server.lines.get())  # every stdout line is JSON


def test_exits_zero_promptly_at_end_of_input(memory_file):
    memory_file.parent.mkdir(parents=True)
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(SERVER)], stdin=subprocess.DEVNULL, capture_output=True,
                          env={"PATH": os.environ["PATH"], "MEMORY_FILE_PATH": str(memory_file)}, timeout=10)
    assert done.returncode == 0 and done.stdout == b""
    assert time.monotonic() - start < 3


def test_works_from_root_with_a_minimal_environment(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(SERVER)], input=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
                          capture_output=True, env=env, cwd="/", timeout=10)
    assert json.loads(done.stdout)["result"] == {}
    assert not (tmp_path / ".local" / "share" / "graphmem" / "memory.jsonl").exists()  # reading never creates it


def test_tool_requests_before_initialize_are_refused_politely(server):
    reply = server.request("tools/list")
    assert reply["error"]["code"] == -32602 and "initialize" in reply["error"]["message"]
    assert server.request("ping")["result"] == {}


def test_unknown_tool_and_bad_arguments(server):
    server.initialize()
    reply = server.request("tools/call", {"name": "no_such_tool", "arguments": {}})
    assert reply["error"]["code"] == -32602 and "no_such_tool" in reply["error"]["message"]
    reply = server.request("tools/call", {"arguments": {}})
    assert reply["error"]["code"] == -32602
    text, is_error = server.call("search_nodes", {"query": 5})
    assert is_error and "expected string" in text and "query" in text
    text, is_error = server.call("create_entities", {})
    assert is_error and "entities" in text
    text, is_error = server.call("create_entities", {"entities": [{"name": "a", "entityType": "t"}]})
    assert is_error and "entities[0].observations" in text
    reply = server.request("tools/call", {"name": "read_graph", "arguments": [1, 2]})
    assert reply["result"]["isError"] is True
    reply = server.request("tools/call", {"name": "read_graph"})  # arguments omitted
    assert reply["result"]["isError"] is False


def test_batches_only_in_a_2025_03_26_session(server):
    server.initialize("2025-03-26")
    server.send_raw(b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},'
                    b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}]\n')
    replies = server.read()
    assert isinstance(replies, list) and [r["id"] for r in replies] == [1, 2]


def test_server_discover_is_answered_even_before_initialize(server):
    reply = server.request("server/discover", {"_meta": MODERN})
    result = reply["result"]
    assert result["supportedVersions"] == ["2026-07-28"] and result["resultType"] == "complete"
    assert result["capabilities"]["tools"] is not None and isinstance(result["ttlMs"], int)
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "graphmem"
    assert server.initialize()["result"]["protocolVersion"] == "2025-11-25"  # a late initialize still works


def test_modern_requests_are_stateless_and_carry_result_type(server):
    listing = server.request("tools/list", {"_meta": MODERN})["result"]
    assert listing["resultType"] == "complete" and "ttlMs" in listing and listing["cacheScope"] in ("public", "private")
    assert len(listing["tools"]) == 14  # the nine reference tools, recall, mark_fact, rename, archive, changes
    reply = server.request("tools/call", {"name": "create_entities", "_meta": MODERN, "arguments": {
        "entities": [{"name": "m", "entityType": "t", "observations": ["modern fact"]}]}})
    assert reply["result"]["resultType"] == "complete" and reply["result"]["isError"] is False
    assert server.request("ping", {"_meta": MODERN})["error"]["code"] == -32601
    assert server.request("initialize", {"_meta": MODERN, "protocolVersion": "2025-11-25"})["error"]["code"] == -32601
    bad = dict(MODERN, **{"io.modelcontextprotocol/protocolVersion": "1999-01-01"})
    error = server.request("tools/list", {"_meta": bad})["error"]
    assert error["code"] == -32022 and error["data"] == {"supported": ["2026-07-28"], "requested": "1999-01-01"}
    missing = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    assert server.request("tools/list", {"_meta": missing})["error"]["code"] == -32602


def test_client_name_from_initialize_is_recorded(server, memory_file):
    server.initialize()
    server.call("create_entities", {"entities": [{"name": "a", "entityType": "t", "observations": ["fact one"]}]})
    server.call("read_graph")
    server.close()
    import sqlite3
    db = sqlite3.connect(memory_file.with_suffix(".db"))
    assert db.execute("SELECT client FROM facts").fetchone()[0] == "pytest"
    assert db.execute("SELECT client FROM ledger_days").fetchone()[0] == "pytest"


def test_a_cursor_we_never_issued_is_refused(server):
    server.initialize()
    assert server.request("tools/list", {"cursor": "zzz"})["error"]["code"] == -32602
    assert server.request("tools/list", {"cursor": "zzz", "_meta": MODERN})["error"]["code"] == -32602
    assert "nextCursor" not in server.request("tools/list", {})["result"]


def _stderr_text(server) -> str:
    return b"".join(server.stderr).decode("utf-8", "replace")


def _wait_for_stderr(server, needle: str, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in _stderr_text(server):
            return True
        time.sleep(0.05)
    return False


def test_the_graph_is_loaded_in_the_background_once_a_client_says_hello(tmp_path):
    """After initialize, with no tool called yet, the graph is read and indexed (stderr says so); the first
    call then uses that same loaded graph."""
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("shop-api", "service", ["deploys from main", "written in Go"]), ("web", "app", ["React 18"])])
    server = StdioServer(path)
    try:
        time.sleep(0.3)
        assert "graph loaded" not in _stderr_text(server)  # nothing before a client speaks
        server.initialize()
        assert _wait_for_stderr(server, "graph loaded and indexed in the background: 3 facts")
        text, is_error = server.call("recall", {"query": "how does shop-api deploy"})
        assert not is_error and "deploys from main" in text
    finally:
        server.close()
    assert _stderr_text(server).count("graph loaded") == 1


def test_a_tool_call_racing_the_background_load_waits_for_it(tmp_path):
    """A call sent right after initialize, while a larger graph is still loading, gets the full answer."""
    path = tmp_path / "memory.jsonl"
    entities = [(f"service-{i}", "service", [f"service-{i} listens on port {8000 + i}", f"owned by team {i % 40}",
                                             f"deploys every {i % 7 + 1} days"]) for i in range(3000)]
    write_graph(path, entities)
    server = StdioServer(path)
    try:
        server.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}})
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "open_nodes", "arguments": {"names": ["service-2999"]}}})
        assert server.read(timeout=30)["id"] == 1
        reply = server.read(timeout=30)
        assert reply["id"] == 2 and "listens on port 10999" in reply["result"]["content"][0]["text"]
        text, _ = server.call("read_graph")
        assert text.startswith("3000 entities")
    finally:
        server.close()
    stderr = _stderr_text(server)
    assert "Traceback" not in stderr and "stopped" not in stderr


def test_tool_descriptions_and_instructions_state_the_limits_the_server_runs_with(tmp_path):
    server = StdioServer(tmp_path / "memory.jsonl", {"MEMORY_OBS_MAX_CHARS": "80", "MEMORY_RECALL_BUDGET": "700"})
    try:
        reply = server.initialize()
        assert "<=80 chars" in reply["result"]["instructions"]
        listing = json.dumps(server.request("tools/list")["result"]["tools"])
        assert "<=80 chars" in listing and "default 700" in listing
        assert "<=300" not in listing and "{obs_max_chars}" not in listing
    finally:
        server.close()
