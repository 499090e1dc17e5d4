"""The command line: settings errors, --version, --protocol, --skill, --config, --lint, --compact, --report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import pytest

from conftest import ROOT, SERVER

import memory_server as ms


def run(*args: str, env: dict[str, str] | None = None, cwd=None, input: bytes | None = None):
    full_env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(SERVER), *args], capture_output=True, env=full_env, cwd=cwd,
                          input=input, timeout=60)


def test_version():
    done = run("--version")
    assert done.returncode == 0 and done.stdout.decode().strip() == f"graphmem {ms.__version__}"


@pytest.mark.parametrize("name,value,words", [
    ("MEMORY_OBS_MAX", "lots", "not a whole number"), ("MEMORY_OBS_MAX_CHARS", "5", "out of range"),
    ("MEMORY_SEARCH_LIMIT", "0", "out of range"), ("MEMORY_BACKUPS_KEPT", "-1", "out of range"),
    ("MEMORY_GUARDRAIL_MAX_DROP", "abc", "not a number"), ("MEMORY_RECALL_BUDGET", "10", "out of range")])
def test_bad_setting_is_a_clear_startup_error_not_a_traceback(tmp_path, name, value, words):
    done = run(env={"MEMORY_FILE_PATH": str(tmp_path / "m.jsonl"), name: value}, input=b"")
    err = done.stderr.decode()
    assert done.returncode == 2 and name in err and words in err and "Traceback" not in err
    assert done.stdout == b""


def test_memory_file_path_relative_to_working_directory_and_folder_refused(tmp_path):
    settings = ms.Settings.from_env({"MEMORY_FILE_PATH": "rel.jsonl"})
    assert settings.file_path == (ms.Path.cwd() / "rel.jsonl")
    with pytest.raises(ms.ConfigError, match="is a folder"):
        ms.Settings.from_env({"MEMORY_FILE_PATH": str(tmp_path)})


def test_default_path_is_a_per_user_data_directory(tmp_path):
    settings = ms.Settings.from_env({"XDG_DATA_HOME": str(tmp_path)}) if os.name != "nt" else None
    if settings:
        assert settings.file_path == tmp_path / "graphmem" / "memory.jsonl"


def test_protocol_and_skill(tmp_path):
    done = run("--protocol")
    text = (ROOT / "AGENT-PROTOCOL.md").read_text(encoding="utf-8")
    assert done.returncode == 0 and done.stdout.decode() == text
    done = run("--skill", str(tmp_path / "skills"))
    skill = (tmp_path / "skills" / "graphmem" / "SKILL.md").read_text(encoding="utf-8")
    assert done.returncode == 0 and skill.startswith("---\nname: graphmem\ndescription: ")
    assert skill.endswith(text)


@pytest.mark.parametrize("client", ms.CLIENTS)
def test_config_for_every_client_parses_in_its_own_format(client):
    done = run("--config", client)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    if client == "codex":
        entry = tomllib.loads(out)["mcp_servers"]["graphmem"]
        command = [entry["command"], *entry["args"]]
    else:
        data = json.loads(out)
        key = {"vscode": "servers", "zed": "context_servers", "opencode": "mcp"}.get(client, "mcpServers")
        entry = data[key]["graphmem"]
        command = entry["command"] if client == "opencode" else [entry["command"], *entry["args"]]
    assert command == [sys.executable, str(SERVER)]
    assert "paste into" in done.stderr.decode()
    # the printed command really starts the server
    reply = subprocess.run(command, input=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', capture_output=True,
                           timeout=20, env={"PATH": os.environ["PATH"], "MEMORY_FILE_PATH": "/nonexistent-dir/x.jsonl"})
    assert json.loads(reply.stdout)["result"] == {}


def test_unknown_client_is_refused():
    done = run("--config", "notepad")
    assert done.returncode == 2 and "invalid choice" in done.stderr.decode()


def _graph(tmp_path, lines):
    path = tmp_path / "memory.jsonl"
    path.write_text("\n".join(json.dumps(l) if isinstance(l, dict) else l for l in lines), encoding="utf-8")
    return path


def test_lint_is_read_only_and_reports_problems(tmp_path):
    facts = [f"2026-01-{d:02d}: event {d}" for d in range(1, 20)]
    path = _graph(tmp_path, [
        {"type": "entity", "name": "big", "entityType": "svc", "observations": facts + ["x" * 400, "dup", "Dup."]},
        {"type": "relation", "from": "big", "to": "ghost", "relationType": "uses"}, "not json"])
    before = path.read_bytes()
    done = run("--lint", env={"MEMORY_FILE_PATH": str(path)})
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert path.read_bytes() == before and not (tmp_path / "memory.jsonl.unreadable").exists()
    assert "over-long facts (> 300 chars): 1" in out
    assert "entities over the cap of 15: 1" in out and "big: 22 facts" in out
    assert "unreadable lines: 1" in out and "relations to missing entities: 1" in out
    assert "big -uses-> ghost" in out and "duplicate facts: 1" in out


def test_compact_archives_overflow_with_a_backup_and_dry_run_changes_nothing(tmp_path):
    facts = [f"2026-01-{d:02d}: event {d}" for d in range(1, 21)] + ["identity fact"]
    path = _graph(tmp_path, [{"type": "entity", "name": "big", "entityType": "svc", "observations": facts}])
    before = path.read_bytes()
    env = {"MEMORY_FILE_PATH": str(path)}
    dry = run("--compact", "--dry-run", env=env)
    assert dry.returncode == 0 and "archive 6 fact(s)" in dry.stdout.decode() and path.read_bytes() == before
    done = run("--compact", env=env)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert "archived 6 fact(s)" in out
    kept = json.loads(path.read_text())["observations"]
    assert len(kept) == 15 and "identity fact" in kept and "2026-01-01: event 1" not in kept
    archive = (tmp_path / "archive" / (ms.encode_entity_filename("big") + ".md")).read_text()
    assert "2026-01-01: event 1" in archive and "2026-01-06: event 6" in archive
    assert any(p.name.endswith("before-compact.jsonl") and p.read_bytes() == before
               for p in (tmp_path / "backups").iterdir())


def test_report_on_a_new_store_and_after_use(tmp_path):
    env = {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    out = run("--report", env=env).stdout.decode()
    assert "nothing saved so far" in out
    mem = ms.Memory(ms.Settings.from_env(env), client="cli-test")
    mem.call_tool("create_entities", {"entities": [{"name": f"e{i}", "entityType": "t",
                                                    "observations": [f"fact {i} about deploys"] * 1} for i in range(30)]})
    mem.call_tool("read_graph", {})
    mem.call_tool("search_nodes", {"query": "deploys"})
    out = run("--report", env=env).stdout.decode()
    assert "2 read calls" in out and "claude-sonnet-4-6" in out and "read_graph" in out and "cli-test" in out


def test_manual_probe(tmp_path):
    env = {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    (tmp_path / "memory.jsonl").write_text(json.dumps({"type": "entity", "name": "shop-api", "entityType": "service",
                                                       "observations": ["deploys from prod"]}))
    assert run("--probe", "deploy branch", env=env).returncode == 2
    done = run("--probe", "deploy branch", "--expect", "shop-api", "--fact", "deploys from prod", env=env)
    assert done.returncode == 0 and "probe added" in done.stdout.decode()
    mem = ms.Memory(ms.Settings.from_env(env))
    assert mem.meta.probes() == [("deploy branch", "shop-api", "deploys from prod", "manual")]


def test_demo_graph_comes_with_a_week_of_use(tmp_path):
    settings = ms.Settings.from_env({"MEMORY_FILE_PATH": str(tmp_path / "demo" / "memory.jsonl")})
    ms.write_demo_graph(settings)
    memory = ms.Memory(settings)
    overview = ms.UiApi(memory).overview()
    graph = ms.UiApi(memory).graph()
    assert len(graph["entities"]) >= 35 and overview["pending"] and overview["overBudget"]
    assert overview["receipts"]["tokensSaved"] > 0 and len(overview["receipts"]["series"]) == 8
    assert overview["fading"] and any(f["pinned"] for e in graph["entities"] for f in e["facts"])
    assert "per client:" in ms.report(memory) and "claude-code" in ms.report(memory)
