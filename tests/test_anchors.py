"""Facts anchored to code: `[@path]` / `[@path::Symbol]` at the end of a fact, checked at read time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import memory_server  # noqa: E402

SCANNER = '''\
"""Scanner module."""


class Scanner:
    """Walks the tree."""

    def run(self, paths):
        """Scan every path once."""
        seen = set()
        for p in paths:  # keep order
            if p not in seen:
                seen.add(p)
        return sorted(seen)

    def stop(self):
        return None


def helper(x):
    return x * 2
'''

RUN_FACT = "run dedupes before sorting, callers rely on it [@src/scanner.py::Scanner.run]"
HELPER_FACT = "helper doubles on purpose, see ticket 12 [@src/scanner.py::helper]"
DEPLOY_FACT = "deploy config pins two replicas [@config/deploy.yml]"


def make_memory(tmp: Path, project: Path, **extra: str) -> memory_server.Memory:
    env = {"MEMORY_FILE_PATH": str(tmp / "mem" / "memory.jsonl"), "MEMORY_PROJECT_ROOT": str(project), **extra}
    return memory_server.Memory(memory_server.Settings.from_env(env), client="t")


def ok(mem: memory_server.Memory, tool: str, args: dict) -> str:
    text, is_error = mem.call_tool(tool, args)
    assert not is_error, text
    return text


def fact_line(mem: memory_server.Memory, entity: str, start: str) -> str:
    text = ok(mem, "open_nodes", {"names": [entity]})
    lines = [line for line in text.splitlines() if line.startswith("- " + start)]
    assert len(lines) == 1, text
    return lines[0]


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (old, text)
    path.write_text(text.replace(old, new))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "project"
    (proj / "src").mkdir(parents=True)
    (proj / "config").mkdir()
    (proj / "src" / "scanner.py").write_text(SCANNER)
    (proj / "src" / "other.py").write_text("def unrelated():\n    return 1\n")
    (proj / "config" / "deploy.yml").write_text("replicas: 2\nimage: app:1.4\n")
    return proj


@pytest.fixture
def mem(tmp_path: Path, project: Path) -> memory_server.Memory:
    m = make_memory(tmp_path, project)
    out = ok(m, "create_entities", {"entities": [
        {"name": "scanner", "entityType": "module", "observations": [RUN_FACT, HELPER_FACT, "plain fact, no anchor"]},
        {"name": "deploy", "entityType": "config", "observations": [DEPLOY_FACT]}]})
    assert "refused" not in out, out
    return m


def state(mem: memory_server.Memory, entity: str, text: str) -> dict | None:
    return mem.anchors.status(entity, text)


# ── write time ──

def test_fresh_anchor_is_current_and_recorded(mem, project):
    assert state(mem, "scanner", RUN_FACT) == {"state": "current", "detail": "src/scanner.py::Scanner.run unchanged"}
    assert mem.anchors.note("scanner", RUN_FACT) == ""
    assert state(mem, "scanner", "plain fact, no anchor") is None
    assert mem.anchors.note("scanner", "plain fact, no anchor") == ""
    rows = mem.meta.conn.execute("SELECT entity, root, path, symbol FROM anchors ORDER BY entity, path, symbol").fetchall()
    assert rows == [("deploy", str(project), "config/deploy.yml", ""),
                    ("scanner", str(project), "src/scanner.py", "Scanner.run"),
                    ("scanner", str(project), "src/scanner.py", "helper")]
    assert fact_line(mem, "scanner", "run dedupes") == "- " + RUN_FACT


def test_unresolvable_anchors_are_refused_with_did_you_mean(mem):
    out, is_error = mem.call_tool("add_observations", {"observations": [{"entityName": "scanner", "contents": [
        "typo in file [@src/scaner.py::Scanner.run]",
        "typo in symbol [@src/scanner.py::Scanner.runn]",
        "wrong case [@src/scanner.py::scanner]",
        "symbol in yaml [@config/deploy.yml::replicas]",
        "escape [@../outside.py]",
    ]}]})
    assert is_error and "+0" in out
    assert "no file src/scaner.py" in out and "did you mean [@src/scanner.py]?" in out
    assert "no symbol Scanner.runn in src/scanner.py; did you mean [@src/scanner.py::Scanner.run]" in out
    assert "no symbol scanner" in out and "[@src/scanner.py::Scanner]" in out
    assert "symbols resolve only in Python files" in out
    assert "inside the project root" in out
    graph = mem.fresh_graph()
    assert len(graph.get("scanner").observations) == 3
    assert memory_server.AnchorChecker(mem.meta, mem.settings.project_root).check_new("fine [@src/scanner.py::helper]") is None
    assert mem.anchors.check_new("a file [@src/other.py]") is None
    assert mem.anchors.check_new("no anchor here") is None


def test_refused_folder_and_unparsable_file(mem, project):
    (project / "src" / "broken.py").write_text("def f(:\n")
    assert "names a folder" in mem.anchors.check_new("x [@src]")
    assert "syntax error on line 1" in mem.anchors.check_new("x [@src/broken.py::f]")
    assert mem.anchors.check_new("a whole broken file is fine [@src/broken.py]") is None


# ── Python symbols ──

def test_reformat_comments_and_docstrings_keep_it_current(mem, project):
    src = project / "src" / "scanner.py"
    edit(src, "        for p in paths:  # keep order\n", "        # iterate\n        for p in (\n            paths\n        ):\n")
    edit(src, '"""Scan every path once."""', '"""Scan each path exactly once, a new docstring."""')
    edit(src, "seen = set()", "seen = set( )   # a comment")
    edit(src, "        return sorted(seen)\n", "\n\n        return sorted(\n            seen,\n        )\n")
    assert state(mem, "scanner", RUN_FACT)["state"] == "current"
    assert fact_line(mem, "scanner", "run dedupes") == "- " + RUN_FACT


def test_body_edit_is_stale_everywhere_and_revert_heals(mem, project):
    src = project / "src" / "scanner.py"
    edit(src, "return sorted(seen)", "return list(seen)")
    assert state(mem, "scanner", RUN_FACT) == {"state": "stale", "detail": "body edited"}
    assert mem.anchors.is_stale("scanner", RUN_FACT)
    assert mem.anchors.rank_penalty("scanner", RUN_FACT) == pytest.approx(0.6)
    assert mem.anchors.rank_penalty("scanner", HELPER_FACT) == 1.0
    assert fact_line(mem, "scanner", "run dedupes").endswith("[stale: body edited]")
    assert fact_line(mem, "scanner", "helper doubles") == "- " + HELPER_FACT  # other symbols unaffected
    found = ok(mem, "search_nodes", {"query": "dedupes"})
    assert "[stale: body edited]" in found, found
    recalled = ok(mem, "recall", {"query": "run dedupes sorting callers"})
    assert "[stale: body edited]" in recalled and "anchored to code that changed" in recalled, recalled
    # stale facts are never hidden, only ranked lower
    assert "run dedupes" in recalled
    edit(src, "return list(seen)", "return sorted(seen)")
    assert state(mem, "scanner", RUN_FACT)["state"] == "current"
    assert fact_line(mem, "scanner", "run dedupes") == "- " + RUN_FACT


def test_argument_and_decorator_changes_count(mem, project):
    src = project / "src" / "scanner.py"
    edit(src, "def helper(x):\n    return x * 2", "def helper(y):\n    return y * 2")
    assert state(mem, "scanner", HELPER_FACT)["state"] == "stale"
    edit(src, "def helper(y):\n    return y * 2", "@staticmethod\ndef helper(x):\n    return x * 2")
    assert state(mem, "scanner", HELPER_FACT)["state"] == "stale"
    edit(src, "@staticmethod\ndef helper(x):", "def helper(x):")
    assert state(mem, "scanner", HELPER_FACT)["state"] == "current"


def test_class_anchor_sees_method_edits(mem, project):
    fact = "Scanner is not thread-safe [@src/scanner.py::Scanner]"
    ok(mem, "add_observations", {"observations": [{"entityName": "scanner", "contents": [fact]}]})
    edit(project / "src" / "scanner.py", '"""Walks the tree."""', '"""Walks the whole tree."""')
    assert state(mem, "scanner", fact)["state"] == "current"
    edit(project / "src" / "scanner.py", "return None", "return 0")
    assert state(mem, "scanner", fact) == {"state": "stale", "detail": "body edited"}
    assert state(mem, "scanner", RUN_FACT)["state"] == "current"


def test_rename_in_same_file_is_followed_and_revert_comes_back(mem, project):
    src = project / "src" / "scanner.py"
    edit(src, "def run(self, paths):", "def scan(self, paths):")
    assert state(mem, "scanner", RUN_FACT) == {"state": "moved", "detail": "now at src/scanner.py::Scanner.scan"}
    assert fact_line(mem, "scanner", "run dedupes").endswith("[moved: now at src/scanner.py::Scanner.scan]")
    assert not mem.anchors.is_stale("scanner", RUN_FACT)
    row = mem.meta.conn.execute("SELECT path, symbol FROM anchors WHERE text=?", (RUN_FACT,)).fetchone()
    assert row == ("src/scanner.py", "Scanner.scan")  # the anchor follows
    # the followed anchor keeps watching the body at its new place
    edit(src, "return sorted(seen)", "return list(seen)")
    assert state(mem, "scanner", RUN_FACT) == {"state": "stale",
                                               "detail": "body edited (now at src/scanner.py::Scanner.scan)"}
    edit(src, "return list(seen)", "return sorted(seen)")
    assert state(mem, "scanner", RUN_FACT)["state"] == "moved"
    # renaming back heals it and the record returns to where the fact says
    edit(src, "def scan(self, paths):", "def run(self, paths):")
    assert state(mem, "scanner", RUN_FACT)["state"] == "current"
    row = mem.meta.conn.execute("SELECT path, symbol FROM anchors WHERE text=?", (RUN_FACT,)).fetchone()
    assert row == ("src/scanner.py", "Scanner.run")


def test_move_to_another_file_is_followed(mem, project):
    src = project / "src" / "scanner.py"
    edit(src, "def helper(x):\n    return x * 2\n", "")
    (project / "src" / "util").mkdir()
    (project / "src" / "util" / "maths.py").write_text("import os\n\n\ndef double(x):\n    # moved here\n    return x * 2\n")
    assert state(mem, "scanner", HELPER_FACT) == {"state": "moved", "detail": "now at src/util/maths.py::double"}
    recalled = ok(mem, "recall", {"query": "helper doubles ticket"})
    assert "[moved: now at src/util/maths.py::double]" in recalled
    # a whole class moved: its method is found under the same dotted name in the new file
    text = src.read_text()
    start = text.index("class Scanner:")
    (project / "src" / "walker.py").write_text(text[start:])
    src.write_text(text[:start])
    assert state(mem, "scanner", RUN_FACT) == {"state": "moved", "detail": "now at src/walker.py::Scanner.run"}


def test_ambiguous_copies_are_not_followed(mem, project):
    src = project / "src" / "scanner.py"
    edit(src, "def helper(x):\n    return x * 2\n", "")
    (project / "src" / "a.py").write_text("def twice(x):\n    return x * 2\n")
    (project / "src" / "b.py").write_text("def double(x):\n    return x * 2\n")
    assert state(mem, "scanner", HELPER_FACT) == {"state": "gone", "detail": "symbol deleted"}


def test_delete_symbol_and_file_is_gone(mem, project):
    src = project / "src" / "scanner.py"
    edit(src, "def helper(x):\n    return x * 2\n", "def helper(x):\n    return x * 3\n")
    assert state(mem, "scanner", HELPER_FACT)["state"] == "stale"
    edit(src, "def helper(x):\n    return x * 3\n", "")
    assert state(mem, "scanner", HELPER_FACT) == {"state": "gone", "detail": "symbol deleted"}
    assert fact_line(mem, "scanner", "helper doubles").endswith("[gone: symbol deleted]")
    assert mem.anchors.is_stale("scanner", HELPER_FACT)
    assert mem.anchors.rank_penalty("scanner", HELPER_FACT) == pytest.approx(0.6)
    src.unlink()
    assert state(mem, "scanner", RUN_FACT) == {"state": "gone", "detail": "file deleted"}
    # putting the code back heals both
    src.write_text(SCANNER)
    assert state(mem, "scanner", RUN_FACT)["state"] == "current"
    assert state(mem, "scanner", HELPER_FACT)["state"] == "current"


def test_unparsable_file_is_stale_not_gone(mem, project):
    src = project / "src" / "scanner.py"
    edit(src, "def helper(x):", "def helper(x:")
    st = state(mem, "scanner", RUN_FACT)
    assert st["state"] == "stale" and "does not parse" in st["detail"]
    edit(src, "def helper(x:", "def helper(x):")
    assert state(mem, "scanner", RUN_FACT)["state"] == "current"


# ── files ──

def test_file_anchor_whitespace_stays_current_content_goes_stale(mem, project):
    cfg = project / "config" / "deploy.yml"
    cfg.write_text("replicas:    2\n\n\nimage: app:1.4   \n")
    assert state(mem, "deploy", DEPLOY_FACT)["state"] == "current"
    cfg.write_text("replicas: 3\nimage: app:1.4\n")
    assert state(mem, "deploy", DEPLOY_FACT) == {"state": "stale", "detail": "file edited"}
    assert fact_line(mem, "deploy", "deploy config").endswith("[stale: file edited]")
    cfg.write_text("replicas: 2\nimage: app:1.4\n")
    assert state(mem, "deploy", DEPLOY_FACT)["state"] == "current"


def test_file_anchor_move_and_delete(mem, project):
    cfg = project / "config" / "deploy.yml"
    (project / "ops").mkdir()
    cfg.rename(project / "ops" / "deploy.yml")
    assert state(mem, "deploy", DEPLOY_FACT) == {"state": "moved", "detail": "now at ops/deploy.yml"}
    (project / "ops" / "deploy.yml").unlink()
    assert state(mem, "deploy", DEPLOY_FACT) == {"state": "gone", "detail": "file deleted"}
    assert fact_line(mem, "deploy", "deploy config").endswith("[gone: file deleted]")


def test_python_file_without_symbol_is_a_file_anchor(mem, project):
    fact = "other.py is generated, do not edit [@src/other.py]"
    ok(mem, "add_observations", {"observations": [{"entityName": "scanner", "contents": [fact]}]})
    (project / "src" / "other.py").write_text("def unrelated():\n\n    return 1   \n")
    assert state(mem, "scanner", fact)["state"] == "current"
    (project / "src" / "other.py").write_text("def unrelated():\n    return 1  # note\n")
    assert state(mem, "scanner", fact) == {"state": "stale", "detail": "file edited"}


# ── verified, lint, bookkeeping ──

def test_verified_re_fingerprints(mem, project):
    src = project / "src" / "scanner.py"
    edit(src, "return sorted(seen)", "return sorted(seen, reverse=False)")
    assert state(mem, "scanner", RUN_FACT)["state"] == "stale"
    out = ok(mem, "mark_fact", {"entityName": "scanner", "observation": RUN_FACT, "action": "verified"})
    assert "Verified" in out and "was stale, now current" in out, out
    assert state(mem, "scanner", RUN_FACT)["state"] == "current"
    assert fact_line(mem, "scanner", "run dedupes") == "- " + RUN_FACT
    # the old body is now the changed one
    edit(src, "return sorted(seen, reverse=False)", "return sorted(seen)")
    assert state(mem, "scanner", RUN_FACT)["state"] == "stale"


def test_verified_refuses_without_anchor_and_when_gone(mem, project):
    text, is_error = mem.call_tool("mark_fact", {"entityName": "scanner", "observation": "plain fact, no anchor",
                                                 "action": "verified"})
    assert is_error and "no code anchor" in text
    edit(project / "src" / "scanner.py", "def helper(x):\n    return x * 2\n", "")
    text, is_error = mem.call_tool("mark_fact", {"entityName": "scanner", "observation": HELPER_FACT,
                                                 "action": "verified"})
    assert is_error and "symbol deleted" in text, text


def test_lint_lists_stale_and_gone(mem, project):
    report = memory_server.lint_report(mem)
    assert "stale or gone code anchors: 0 (of 3 anchored facts" in report
    edit(project / "src" / "scanner.py", "return sorted(seen)", "return list(seen)")
    edit(project / "src" / "scanner.py", "def helper(x):\n    return x * 2\n", "")
    report = memory_server.lint_report(mem)
    assert "stale or gone code anchors: 2" in report, report
    lines = report.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("stale or gone code anchors"))
    body = lines[i + 1:i + 3]
    assert all(line.startswith("  ") for line in body)
    assert any("stale: body edited: scanner: run dedupes" in line for line in body), body
    assert any("gone: symbol deleted: scanner: helper doubles" in line for line in body), body


def test_adding_facts_again_does_not_rebaseline(mem, project):
    """on_new_fact runs for every fact of a changed entity: a stale fact must stay stale."""
    edit(project / "src" / "scanner.py", "return sorted(seen)", "return list(seen)")
    ok(mem, "add_observations", {"observations": [{"entityName": "scanner", "contents": ["another plain fact"]}]})
    assert state(mem, "scanner", RUN_FACT)["state"] == "stale"


def test_deleted_then_re_added_fact_gets_a_fresh_baseline(mem, project):
    edit(project / "src" / "scanner.py", "return sorted(seen)", "return list(seen)")
    ok(mem, "delete_observations", {"deletions": [{"entityName": "scanner", "observations": [RUN_FACT]}]})
    ok(mem, "add_observations", {"observations": [{"entityName": "scanner", "contents": [RUN_FACT]}]})  # same instant
    assert state(mem, "scanner", RUN_FACT)["state"] == "current"


def test_rename_entity_keeps_the_anchor(mem, project):
    edit(project / "src" / "scanner.py", "return sorted(seen)", "return list(seen)")
    ok(mem, "rename_entity", {"name": "scanner", "newName": "scan-module"})
    assert state(mem, "scan-module", RUN_FACT) == {"state": "stale", "detail": "body edited"}


def test_root_is_stored_with_the_anchor(tmp_path, mem, project):
    """One memory file, many projects: a fact keeps resolving against the project it was written in."""
    other = tmp_path / "other-project"
    other.mkdir()
    elsewhere = make_memory(tmp_path, other)
    assert elsewhere.anchors.status("scanner", RUN_FACT)["state"] == "current"
    edit(project / "src" / "scanner.py", "return sorted(seen)", "return list(seen)")
    assert elsewhere.anchors.status("scanner", RUN_FACT)["state"] == "stale"
    # new anchors resolve against this server's own root
    text, _ = elsewhere.call_tool("add_observations", {"observations": [
        {"entityName": "scanner", "contents": ["in the other project [@src/scanner.py]"]}]})
    assert "does not resolve" in text


def test_working_directory_is_the_default_root(tmp_path, project, monkeypatch):
    monkeypatch.chdir(project)
    m = memory_server.Memory(memory_server.Settings.from_env(
        {"MEMORY_FILE_PATH": str(tmp_path / "m2" / "memory.jsonl")}), client="t")
    ok(m, "create_entities", {"entities": [{"name": "s", "entityType": "module", "observations": [RUN_FACT]}]})
    row = m.meta.conn.execute("SELECT root FROM anchors").fetchone()
    assert row == (str(project.resolve()),)


def test_ui_status_shape(mem, project):
    edit(project / "src" / "scanner.py", "return sorted(seen)", "return list(seen)")
    st = mem.anchors.status("scanner", RUN_FACT)
    assert set(st) == {"state", "detail"} and st["state"] in ("current", "stale", "moved", "gone")


# ── cost: unchanged files are never re-read or re-hashed ──

def test_large_repo_answers_without_rehashing(tmp_path):
    proj = tmp_path / "big"
    past = time.time() - 3600
    for d in range(20):
        folder = proj / f"pkg{d:02d}"
        folder.mkdir(parents=True)
        for f in range(100):
            n = d * 100 + f
            path = folder / f"mod{f:03d}.py"
            path.write_text(f"def f{n}(x):\n    return x + {n}\n\n\nclass C{n}:\n    def m(self):\n        return {n}\n")
            os.utime(path, (past, past))
    m = make_memory(tmp_path, proj)
    entities = []
    for e in range(10):
        facts = [f"f{e * 100 + i} adds its number [@pkg{e:02d}/mod{i:03d}.py::f{e * 100 + i}]" for i in range(10)]
        entities.append({"name": f"pkg{e:02d}", "entityType": "package", "observations": facts})
    out = ok(m, "create_entities", {"entities": entities})
    assert "refused" not in out
    names = [e["name"] for e in entities]
    anchors = m.anchors
    start = anchors.hash_count
    assert start <= 100  # only the anchored files were ever parsed
    ok(m, "open_nodes", {"names": names})
    ok(m, "recall", {"query": "adds its number"})
    assert anchors.hash_count == start  # nothing changed: nothing re-hashed
    # one file changes: exactly that one is parsed again
    target = proj / "pkg03" / "mod004.py"
    edit(target, "return x + 304", "return x - 304")
    os.utime(target, (past + 10, past + 10))
    text = ok(m, "open_nodes", {"names": names})
    assert anchors.hash_count == start + 1
    assert text.count("[stale: body edited]") == 1
    ok(m, "open_nodes", {"names": names})
    assert anchors.hash_count == start + 1
    # a deleted symbol makes one search across the project; later answers reuse every fingerprint
    target = proj / "pkg05" / "mod006.py"
    edit(target, "def f506(x):\n    return x + 506\n", "")
    os.utime(target, (past + 20, past + 20))
    text = ok(m, "open_nodes", {"names": names})
    assert "[gone: symbol deleted]" in text
    after_search = anchors.hash_count
    assert after_search <= start + 1 + 2000
    ok(m, "open_nodes", {"names": names})
    ok(m, "recall", {"query": "adds its number"})
    assert anchors.hash_count == after_search
    # a restarted server reads each file's stamp from the anchors table: unchanged files are not parsed at all
    fresh = make_memory(tmp_path, proj)
    text = ok(fresh, "open_nodes", {"names": names})
    assert text.count("[stale: body edited]") == 1 and text.count("[gone: symbol deleted]") == 1
    assert fresh.anchors.hash_count <= 2 + 2000  # the stale file, and the search for the gone one
    assert fresh.anchors.hash_count >= 1
    before = fresh.anchors.hash_count
    ok(fresh, "open_nodes", {"names": names})
    assert fresh.anchors.hash_count == before


def test_restart_parses_nothing_when_files_are_unchanged(tmp_path, project):
    past = time.time() - 3600
    for path in project.rglob("*"):
        if path.is_file():
            os.utime(path, (past, past))
    m = make_memory(tmp_path, project)
    ok(m, "create_entities", {"entities": [{"name": "scanner", "entityType": "module",
                                            "observations": [RUN_FACT, HELPER_FACT, DEPLOY_FACT]}]})
    fresh = make_memory(tmp_path, project)
    assert "[" not in ok(fresh, "open_nodes", {"names": ["scanner"]}).split("\n", 1)[1].replace("[@", "")
    assert fresh.anchors.hash_count == 0
    edit(project / "src" / "scanner.py", "return x * 2", "return x * 3")
    assert fresh.anchors.status("scanner", HELPER_FACT)["state"] == "stale"
    assert fresh.anchors.status("scanner", RUN_FACT)["state"] == "current"


def test_same_stamp_edit_right_after_a_read_is_still_seen(mem, project):
    """A write in the same mtime tick as our read, same size: caught by re-reading recently modified files."""
    src = project / "src" / "scanner.py"
    assert state(mem, "scanner", HELPER_FACT)["state"] == "current"
    st = src.stat()
    edit(src, "return x * 2", "return x * 3")
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert src.stat().st_size == st.st_size
    assert state(mem, "scanner", HELPER_FACT) == {"state": "stale", "detail": "body edited"}


# ── through the real stdio server ──

def _rpc(proc: subprocess.Popen, message: dict) -> dict | None:
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()
    if "id" not in message:
        return None
    return json.loads(proc.stdout.readline())


@pytest.mark.parametrize("via_env", [True, False])
def test_stdio_server_reports_staleness(tmp_path, project, via_env):
    env = dict(os.environ, MEMORY_FILE_PATH=str(tmp_path / "mem" / "memory.jsonl"))
    env.pop("MEMORY_PROJECT_ROOT", None)
    if via_env:
        env["MEMORY_PROJECT_ROOT"] = str(project)
    proc = subprocess.Popen([sys.executable, str(ROOT / "memory_server.py")], cwd=project, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        init = _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}})
        assert "result" in init
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})

        def call(i: int, name: str, arguments: dict) -> str:
            reply = _rpc(proc, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                "params": {"name": name, "arguments": arguments}})
            assert reply["result"]["isError"] is False, reply
            return reply["result"]["content"][0]["text"]

        call(2, "create_entities", {"entities": [{"name": "scanner", "entityType": "module",
                                                  "observations": [RUN_FACT]}]})
        assert "[stale" not in call(3, "open_nodes", {"names": ["scanner"]})
        edit(project / "src" / "scanner.py", "return sorted(seen)", "return list(seen)")
        assert "[stale: body edited]" in call(4, "open_nodes", {"names": ["scanner"]})
        assert "[stale: body edited]" in call(5, "recall", {"query": "run dedupes"})
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
