"""Sessions: the `--context` briefing, `--export markdown` and `--import`, through the real command line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SERVER, StdioServer, write_graph

import memory_server as ms


def cli(path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(path.parent), "MEMORY_FILE_PATH": str(path)}
    return subprocess.run([sys.executable, str(SERVER), *args], capture_output=True, text=True, env=env,
                          cwd=path.parent, timeout=60)


@pytest.fixture
def used_graph(tmp_path: Path) -> Path:
    """A graph with a rule, a pinned fact, many ordinary facts and a write made through the server."""
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("RULE migrations", "rule", ["migrations must stay backward compatible for one release"]),
                       ("api", "service", ["written in Go", "listens on 8080"])]
                + [(f"svc{i}", "service", [f"service {i} handles queue {j}" for j in range(10)]) for i in range(40)])
    server = StdioServer(path)
    try:
        server.initialize()
        server.call("mark_fact", {"entityName": "api", "observation": "written in Go", "action": "pin"})
        server.call("add_observations", {"observations": [{"entityName": "api", "contents": ["2026-11-30: p99 is 120 ms"]}]})
        for query in ("service handles queue", "queue 3", "which service handles queue 7"):
            server.call("recall", {"query": query})
    finally:
        server.close()
    return path


@pytest.mark.parametrize("budget", [10, 200, 2000])
def test_the_briefing_stays_within_its_budget(used_graph, budget):
    done = cli(used_graph, "--context", "--budget", str(budget))
    assert done.returncode == 0, done.stderr
    assert ms.estimate_tokens(done.stdout.rstrip("\n")) <= budget
    if budget >= 200:
        assert "RULE migrations: migrations must stay backward compatible" in done.stdout
        assert "api: written in Go" in done.stdout  # pinned
        assert "+ api: 2026-11-30: p99 is 120 ms" in done.stdout  # changed since the last session
        assert done.stdout.rstrip().endswith("open_nodes by name.")
    if budget == 200:
        assert "more left out" in done.stdout


def test_a_second_briefing_shows_only_what_changed_since_the_first(used_graph):
    cli(used_graph, "--context")
    graph = [json.loads(line) for line in used_graph.read_text().splitlines()]
    graph[1]["observations"].append("edited by hand in another tool")
    used_graph.write_text("\n".join(json.dumps(g) for g in graph))
    done = cli(used_graph, "--context")
    assert "api: edited by hand in another tool (first seen" in done.stdout
    assert "p99 is 120 ms" not in done.stdout.split("## Changed since")[1].split("##")[0]


def test_the_briefing_with_a_query_recalls_for_the_task(used_graph):
    done = cli(used_graph, "--context", "--query", "which port does the api listen on", "--budget", "400")
    assert "listens on 8080" in done.stdout and ms.estimate_tokens(done.stdout.rstrip("\n")) <= 400


def test_no_memory_yet_is_quiet(tmp_path):
    done = cli(tmp_path / "memory.jsonl", "--context")
    assert done.returncode == 0 and done.stdout == "" and not (tmp_path / "memory.jsonl").exists()


def test_a_bad_budget_is_a_clear_error(used_graph):
    done = cli(used_graph, "--context", "--budget", "0")
    assert done.returncode == 2 and "--budget 0" in done.stderr


ODD = [("api/v2: gateway", "service", ["plain fact", "line one\nline two", '"quoted" start', " padded ", "ünïcödé ✓",
                                         "plain fact"]),
       ("Alice", "person", ["works on [[not a link]]"]),
       ("CON", "weird", [])]


def test_export_then_import_gives_the_same_graph_byte_for_byte(tmp_path):
    source = tmp_path / "a" / "memory.jsonl"
    source.parent.mkdir()
    write_graph(source, ODD, [("Alice", "api/v2: gateway", "works on"), ("Alice", "ghost", "knows"),
                              ("api/v2: gateway", "CON", "depends_on")])
    out = tmp_path / "vault"
    assert cli(source, "--export", "markdown", str(out)).returncode == 0
    note = (out / "api-v2- gateway.md").read_text(encoding="utf-8")
    assert note.startswith("---\nname: \"api/v2: gateway\"\ntype: \"service\"") and "- plain fact" in note
    alice = (out / "Alice.md").read_text(encoding="utf-8")
    assert "- works on [[api-v2- gateway|api/v2: gateway]]" in alice  # a relation: a wiki link to its note
    assert "- works on [[not a link]]" in alice  # a fact that only looks like a link stays a fact
    target = tmp_path / "b" / "memory.jsonl"
    target.parent.mkdir()
    done = cli(target, "--import", str(out))
    assert done.returncode == 0 and "3 new entities" in done.stdout, done.stdout + done.stderr
    assert target.read_bytes() == source.read_bytes().replace(
        b'{"type":"relation","from":"Alice","to":"ghost","relationType":"knows"}\n', b"")
    assert "1 relation(s) to entities that do not exist left out" in done.stdout, done.stdout
    again = cli(target, "--import", str(out))
    assert "0 new entities, 0 facts, 0 relations" in again.stdout
    assert target.read_bytes().count(b'"name":"Alice"') == 1


def test_import_of_an_export_says_what_it_left_out(tmp_path):
    """Archived facts are exported (their own section) but not imported, and a vault holds other notes too:
    the import's answer counts both instead of leaving them out in silence."""
    source = tmp_path / "a" / "memory.jsonl"
    source.parent.mkdir()
    write_graph(source, [("api", "service", ["written in Go"])])
    archive = source.parent / "archive"
    archive.mkdir()
    ms.GraphStore(ms.Settings(file_path=source)).write_archive("api", [
        ms.ArchivedFact("2025-01-01: ran on Python 2", "over cap", "2026-01-01 09:00 UTC")])
    out = tmp_path / "vault"
    assert cli(source, "--export", "markdown", str(out)).returncode == 0
    assert "## Archived" in (out / "api.md").read_text(encoding="utf-8")
    (out / "Daily note.md").write_text("# today\n- bought milk\n", encoding="utf-8")
    target = tmp_path / "b" / "memory.jsonl"
    target.parent.mkdir()
    done = cli(target, "--import", str(out))
    assert "1 archived fact(s) left out" in done.stdout and "1 other .md file(s) skipped" in done.stdout, done.stdout
    assert "milk" not in target.read_text(encoding="utf-8")


def test_import_of_a_reference_graph_merges_without_duplicating(tmp_path):
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("api", "service", ["written in Go"])])
    other = tmp_path / "memory.json"
    write_graph(other, [("api", "service", ["written in Go", "listens on 8080"]), ("db", "database", ["Postgres 16"])],
                [("api", "db", "uses")])
    done = cli(path, "--import", str(other))
    assert "1 new entities, 2 facts, 1 relations; 1 already there" in done.stdout, done.stdout
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["observations"] == ["written in Go", "listens on 8080"]


def test_import_of_claude_md_refuses_the_secret_and_keeps_the_rest(tmp_path):
    path = tmp_path / "memory.jsonl"
    notes = tmp_path / "CLAUDE.md"
    notes.write_text("# Shop API\n\nSome prose that is not a fact.\n\n- Use pnpm, never npm\n"
                     "- CI token: ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8\n"
                     "* migrations must stay backward compatible\n1. run `make test` before pushing\n", encoding="utf-8")
    done = cli(path, "--import", str(notes))
    assert done.returncode == 0 and "3 facts" in done.stdout and "1 refused" in done.stdout, done.stdout
    assert "ghp_" not in done.stdout + path.read_text()
    entity = json.loads(path.read_text().splitlines()[0])
    assert entity["name"] == "Shop API" and entity["observations"] == [
        "Use pnpm, never npm", "migrations must stay backward compatible", "run `make test` before pushing"]


def test_import_is_one_transaction_with_one_history_entry(tmp_path):
    path = tmp_path / "memory.jsonl"
    other = tmp_path / "other.jsonl"
    write_graph(other, [(f"e{i}", "t", [f"fact {i}"]) for i in range(30)])
    cli(path, "--import", str(other))
    mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": str(path)}))
    assert [row[3] for row in mem.meta.history(10)] == ["import other.jsonl"]


def test_import_of_a_missing_path_is_a_clear_error(tmp_path):
    done = cli(tmp_path / "memory.jsonl", "--import", str(tmp_path / "nope"))
    assert done.returncode == 2 and "no such file or folder" in done.stderr


@pytest.mark.parametrize("client", ["claude-code", "codex", "gemini"])
def test_each_hooks_config_parses_and_its_command_prints_the_briefing(used_graph, client):
    done = cli(used_graph, "--config", client, "--hooks")
    assert done.returncode == 0 and "paste into" in done.stderr
    config = json.loads(done.stdout)
    group = config["hooks"]["SessionStart"][0]
    if client == "claude-code":
        assert "compact" in group["matcher"] and "clear" in group["matcher"]
    command = group["hooks"][0]["command"]
    assert group["hooks"][0]["type"] == "command" and "--context" in command
    assert f"MEMORY_FILE_PATH={used_graph}" in command  # the hook reads the same graph as the server
    run = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60, cwd=used_graph.parent,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(used_graph.parent)})
    assert run.returncode == 0, run.stderr
    text = run.stdout if client == "claude-code" else json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "RULE migrations" in text and "recall before a task" in text


def test_hooks_for_a_client_without_a_session_hook_say_so(used_graph):
    done = cli(used_graph, "--config", "cursor", "--hooks")
    assert done.returncode == 1 and done.stdout == "" and "no session hook for cursor" in done.stderr


@pytest.mark.parametrize("args", [["--hooks"], ["--hook-json"], ["--budget", "300"], ["--query", "deploy"],
                                  ["--fix"], ["--dry-run"], ["--all"]])
def test_an_option_without_the_one_it_goes_with_is_refused_not_a_silent_server(used_graph, args):
    """`graphmem --hooks` (without --config CLIENT) used to start the stdio server: in a terminal, a hang."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(used_graph.parent),
           "MEMORY_FILE_PATH": str(used_graph)}
    done = subprocess.run([sys.executable, str(SERVER), *args], input="", capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert f"{args[0]} goes with --" in done.stderr and "on stdio" not in done.stderr


def test_the_briefing_outside_a_project_says_it_is_the_global_memory(tmp_path):
    home = tmp_path / "home"
    graph = home / ".local" / "share" / "graphmem" / "memory.jsonl"
    graph.parent.mkdir(parents=True)
    write_graph(graph, [("me", "person", ["prefers tabs"])])
    done = subprocess.run([sys.executable, str(SERVER), "--context"], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}, timeout=60)
    assert done.stdout.startswith("graphmem global memory (not in a git project): 1 entities"), done.stdout
    assert "this project" not in done.stdout


def test_the_hook_json_of_an_empty_memory_is_an_empty_object(tmp_path):
    done = cli(tmp_path / "memory.jsonl", "--context", "--hook-json")
    assert done.returncode == 0 and json.loads(done.stdout) == {}


def test_since_and_until_filter_recall_and_search_by_when_a_fact_was_written(tmp_path):
    import sqlite3
    import time
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("api", "service", ["deploy branch is main", "deploy runs on Fridays"])])
    server = StdioServer(path)
    try:
        server.initialize()
        server.call("search_nodes", {"query": "deploy"})  # first sighting of the two facts: now
        ten_days_ago = time.time() - 10 * 86400
        with sqlite3.connect(tmp_path / "memory.db") as db:  # as if written ten days ago
            db.execute("UPDATE facts SET created=? WHERE text='deploy runs on Fridays'", (ten_days_ago,))
        server.call("add_observations", {"observations": [{"entityName": "api", "contents": ["deploy needs two approvals"]}]})
        recent, _ = server.call("recall", {"query": "deploy", "since": "7d"})
        assert "two approvals" in recent and "branch is main" in recent and "Fridays" not in recent
        assert "only facts written since" in recent
        old, _ = server.call("recall", {"query": "deploy", "until": "7d"})
        assert "Fridays" in old and "two approvals" not in old
        day = time.strftime("%Y-%m-%d", time.gmtime(ten_days_ago))
        boundary, _ = server.call("search_nodes", {"query": "deploy Fridays", "since": day, "until": "9d"})
        assert "Fridays" in boundary
        none, _ = server.call("search_nodes", {"query": "deploy Fridays", "since": "1d"})
        assert "runs on Fridays" not in none  # matched, but written before the window
        text, is_error = server.call("recall", {"query": "deploy", "since": "last week"})
        assert is_error and "is not a time" in text and "7d" in text
        text, is_error = server.call("recall", {"query": "deploy", "since": "1d", "until": "2d"})
        assert is_error and "not before" in text
    finally:
        server.close()


def test_changes_lists_writes_archives_deletes_and_renames_with_their_time(tmp_path):
    path = tmp_path / "memory.jsonl"
    server = StdioServer(path)
    try:
        server.initialize()
        server.call("create_entities", {"entities": [{"name": "api", "entityType": "service",
                                                      "observations": ["deploy branch is main", "written in Go"]}]})
        server.call("add_observations", {"observations": [{"entityName": "api", "contents": ["deploy branch is prod"]}]})
        server.call("delete_observations", {"deletions": [{"entityName": "api", "observations": ["written in Go"]}]})
        server.call("rename_entity", {"name": "api", "newName": "gateway"})
        text, is_error = server.call("changes", {"since": "1h"})
        assert not is_error, text
        lines = text.splitlines()
        assert lines[0].startswith("6 change(s) since"), text
        assert lines[1].startswith("> api renamed to gateway (")
        assert any(l.startswith("- api: written in Go (deleted ") for l in lines)
        assert any(l.startswith('~ api: deploy branch is main (archived: superseded by "deploy branch is prod"') for l in lines)
        assert any(l.startswith("+ api: deploy branch is prod (") for l in lines)
        text, _ = server.call("changes", {"since": "2h", "until": "1h"})
        assert text.startswith("No changes from")
        tools = [t["name"] for t in server.request("tools/list")["result"]["tools"]]
        assert "changes" in tools
    finally:
        server.close()


def test_import_of_one_exported_note_reads_it_as_that_entity(tmp_path):
    """A single note of an --export folder: its entity with its type and facts, its relations where their
    targets exist; before, it was read as a CLAUDE.md (type "project", wiki links and archive comments as facts)."""
    source = tmp_path / "a" / "memory.jsonl"
    source.parent.mkdir()
    write_graph(source, [("api", "service", ["written in Go"]), ("db", "database", ["Postgres 16"])],
                [("api", "db", "reads from")])
    out = tmp_path / "vault"
    assert cli(source, "--export", "markdown", str(out)).returncode == 0
    target = tmp_path / "b" / "memory.jsonl"
    target.parent.mkdir()
    write_graph(target, [("db", "database", ["Postgres 16"])])
    done = cli(target, "--import", str(out / "api.md"))
    assert done.returncode == 0 and "1 new entities, 1 facts, 1 relations" in done.stdout, done.stdout
    lines = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert {"type": "entity", "name": "api", "entityType": "service", "observations": ["written in Go"]} in lines
    assert {"type": "relation", "from": "api", "to": "db", "relationType": "reads from"} in lines
