"""The command line: settings errors, --version, --protocol, --skill, --config, --lint, --compact, --report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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
    outside = {"XDG_DATA_HOME": str(tmp_path), "MEMORY_PROJECT_ROOT": str(tmp_path)}  # not a git work tree
    settings = ms.Settings.from_env(outside) if os.name != "nt" else None
    if settings:
        assert settings.file_path == tmp_path / "graphmem" / "memory.jsonl" and settings.tier == "global"


def test_protocol_and_skill(tmp_path):
    done = run("--protocol")
    text = (ROOT / "AGENT-PROTOCOL.md").read_text(encoding="utf-8")
    assert done.returncode == 0 and done.stdout.decode() == text
    done = run("--skill", str(tmp_path / "skills"))
    skill = (tmp_path / "skills" / "graphmem" / "SKILL.md").read_text(encoding="utf-8")
    assert done.returncode == 0 and skill.startswith("---\nname: graphmem\ndescription: ")
    assert skill.endswith(text)


def config_entry(client: str, text: str) -> tuple[list[str], dict[str, str]]:
    """(command, env block) of graphmem's entry in a --config output, read in the client's own format."""
    if client == "codex":
        entry = tomllib.loads(text)["mcp_servers"]["graphmem"]
        return [entry["command"], *entry["args"]], entry.get("env", {})
    key = {"vscode": "servers", "zed": "context_servers", "opencode": "mcp"}.get(client, "mcpServers")
    entry = json.loads(text)[key]["graphmem"]
    if client == "opencode":
        return entry["command"], entry.get("environment", {})
    return [entry["command"], *entry["args"]], entry.get("env", {})


@pytest.mark.parametrize("client", ms.CLIENTS)
def test_config_for_every_client_parses_in_its_own_format(client):
    done = run("--config", client)
    assert done.returncode == 0, done.stderr
    command, env = config_entry(client, done.stdout.decode())
    assert command == [sys.executable, str(SERVER)] and env == {}
    assert "paste into" in done.stderr.decode() and "temporary cache" not in done.stderr.decode()
    # the printed command really starts the server
    reply = subprocess.run(command, input=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', capture_output=True,
                           timeout=20, env={"PATH": os.environ["PATH"], "MEMORY_FILE_PATH": "/nonexistent-dir/x.jsonl"})
    assert json.loads(reply.stdout)["result"] == {}


@pytest.mark.parametrize("client", ms.CLIENTS)
def test_config_copies_the_memory_settings_set_here_into_the_clients_env_block(client, tmp_path):
    env = {"MEMORY_OBS_MAX": "20", "MEMORY_FILE_PATH": "rel/m.jsonl", "MEMORY_PRICE_MODEL": 'gpt "5" é',
           "MEMORY_SEARCH_LIMIT": "  ", "MEMORY_NOT_A_SETTING": "x"}
    done = run("--config", client, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _, copied = config_entry(client, done.stdout.decode())
    # set ones only, unknown names left out, a relative path made absolute (the client starts elsewhere)
    assert copied == {"MEMORY_OBS_MAX": "20", "MEMORY_FILE_PATH": str(tmp_path / "rel" / "m.jsonl"),
                      "MEMORY_PRICE_MODEL": 'gpt "5" é'}
    assert "MEMORY_FILE_PATH, MEMORY_OBS_MAX, MEMORY_PRICE_MODEL" in done.stderr.decode()


@pytest.mark.parametrize("client", ["claude-code", "codex", "vscode"])
def test_config_copies_the_embeddings_settings_but_never_the_key(client, tmp_path):
    secret = "sk-embed-" + "k" * 24
    env = {"MEMORY_EMBEDDINGS_URL": "http://localhost:11434/v1", "MEMORY_EMBEDDINGS_MODEL": "nomic-embed-text",
           "MEMORY_EMBEDDINGS_KEY": secret}
    done = run("--config", client, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _, copied = config_entry(client, done.stdout.decode())
    assert copied == {"MEMORY_EMBEDDINGS_URL": "http://localhost:11434/v1", "MEMORY_EMBEDDINGS_MODEL": "nomic-embed-text"}
    assert secret.encode() not in done.stdout + done.stderr
    assert b"MEMORY_EMBEDDINGS_KEY is not copied" in done.stderr
    done = run("--config", client, env={**env, "MEMORY_EMBEDDINGS_KEY": "", "MEMORY_EMBEDDINGS_KEY_ENV": "EMBED_KEY",
                                        "EMBED_KEY": secret}, cwd=tmp_path)
    _, copied = config_entry(client, done.stdout.decode())
    assert copied["MEMORY_EMBEDDINGS_KEY_ENV"] == "EMBED_KEY" and secret.encode() not in done.stdout


def test_config_refuses_a_bad_setting_instead_of_copying_it():
    done = run("--config", "cursor", env={"MEMORY_OBS_MAX": "lots"})
    assert done.returncode == 2 and b"MEMORY_OBS_MAX" in done.stderr and done.stdout == b""


def test_config_names_the_installed_command_only_when_it_runs_this_file(tmp_path, monkeypatch):
    lib, scripts, elsewhere, user_bin = (tmp_path / d for d in ("lib", "scripts", "elsewhere", "bin"))
    for folder in (lib, scripts, elsewhere, user_bin):
        folder.mkdir()
    script = scripts / ms.GRAPHMEM_SCRIPT
    script.write_text("#!/bin/sh\n")
    (user_bin / ms.GRAPHMEM_SCRIPT).symlink_to(script)  # pipx's ~/.local/bin link into its venv
    (elsewhere / ms.GRAPHMEM_SCRIPT).write_text("#!/bin/sh\n")  # another install's graphmem
    monkeypatch.setattr(ms, "environment_dirs", lambda: ({lib}, {scripts}))
    on_path = {}
    monkeypatch.setattr(ms.shutil, "which", lambda name: on_path.get(name))
    installed = lib / "memory_server.py"
    on_path["graphmem"] = str(user_bin / ms.GRAPHMEM_SCRIPT)
    assert ms.installed_command(installed) == str(user_bin / ms.GRAPHMEM_SCRIPT)  # the link, not its target
    on_path["graphmem"] = str(elsewhere / ms.GRAPHMEM_SCRIPT)
    assert ms.installed_command(installed) == str(script)  # PATH's is another server: this environment's own
    assert ms.installed_command(tmp_path / "checkout" / "memory_server.py") is None  # a checkout: python + file
    script.unlink()
    assert ms.installed_command(installed) is None


def pipx_like_venv(folder) -> str:
    """A venv where pipx keeps one (with its metadata file); returns its Python."""
    import venv
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(folder)
    (folder / "pipx_metadata.json").write_text("{}")
    return str(folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))


def test_temporary_environments_are_told_apart_from_installs(tmp_path):
    def venv_at(*parts, metadata=True):
        folder = tmp_path.joinpath(*parts)
        folder.mkdir(parents=True)
        if metadata:
            (folder / "pipx_metadata.json").write_text("{}")
        return folder
    assert ms.temporary_environment(venv_at(".cache", "pipx", "88776e8afc611ed"))  # pipx 1.3+ on Linux
    assert ms.temporary_environment(venv_at("Library", "Caches", "pipx", "abc"))  # macOS
    assert ms.temporary_environment(venv_at(".local", "pipx", ".cache", "abc"))  # pipx < 1.3, Debian's
    assert ms.temporary_environment(venv_at("opt", "tools", ".cache", "abc"))  # PIPX_HOME=/opt/tools
    assert ms.temporary_environment(venv_at(".cache", "uv", "archive-v0", "xyz", metadata=False))  # uvx
    assert not ms.temporary_environment(venv_at(".local", "share", "pipx", "venvs", "graphmem"))  # pipx install
    assert not ms.temporary_environment(venv_at("project", ".venv", metadata=False))


def test_config_from_a_pipx_run_cache_warns_and_suggests_pipx_install(tmp_path):
    python = pipx_like_venv(tmp_path / ".cache" / "pipx" / "0123abcd")
    done = subprocess.run([python, str(SERVER), "--config", "claude-code"], capture_output=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    err = done.stderr.decode()
    assert done.returncode == 0 and json.loads(done.stdout)["mcpServers"]["graphmem"]["command"] == python
    assert "warning: this runs from a temporary cache" in err and "pipx install" in err
    assert "graphmem --config claude-code" in err


def test_help_lists_every_setting_with_the_default_settings_gives_it():
    done = run("--help")
    assert done.returncode == 0
    lines = {line.split()[0]: line for line in done.stdout.decode().splitlines() if line.startswith("  MEMORY_")}
    defaults = {f.name: f.default for f in ms.dataclasses.fields(ms.Settings)}
    for name, field, meaning in ms.SETTINGS_TABLE:
        assert meaning in lines[name]
        if defaults[field] not in (None, ms.dataclasses.MISSING):
            assert lines[name].endswith(f"; default {defaults[field] if defaults[field] != '' else 'unset'}")
    assert lines["MEMORY_FILE_PATH"].endswith("/.local/share/graphmem/memory.jsonl (per-user data dir)") or os.name == "nt"
    assert len(lines) == len(ms.SETTINGS_TABLE)


def test_settings_table_is_exactly_what_settings_reads(tmp_path):
    import inspect
    import re
    source = inspect.getsource(ms.Settings.from_env) + inspect.getsource(ms._embedding_settings)
    read = set(re.findall(r"MEMORY_[A-Z_]+", source))
    # the key itself is read but never listed or copied into a client's config (a secret)
    assert read - {"MEMORY_EMBEDDINGS_KEY"} == {name for name, _, _ in ms.SETTINGS_TABLE}
    base = ms.Settings.from_env({})
    embeddings = {"MEMORY_EMBEDDINGS_URL": "http://127.0.0.1:9/v1", "MEMORY_EMBEDDINGS_MODEL": "m",
                  "MEMORY_EMBEDDINGS_KEY_ENV": "EMBED_KEY", "EMBED_KEY": "k"}
    with_embeddings = ms.Settings.from_env(embeddings)  # these three only make sense together
    for name, field, _ in ms.SETTINGS_TABLE:  # each variable sets the field the table says
        if name in embeddings:
            assert getattr(with_embeddings, field) == embeddings[name], name
            continue
        default = getattr(base, field)
        value = {int: lambda: default + 1, float: lambda: default / 2, str: lambda: default + "-x"}.get(
            type(default), lambda: tmp_path / "x.jsonl")()
        assert getattr(ms.Settings.from_env({name: str(value)}), field) == value, name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in readme for name in read)


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


def test_in_a_terminal_the_server_says_what_it_waits_for_on_stderr_and_stops_on_ctrl_d(tmp_path):
    proc, master = start_in_a_terminal(tmp_path)
    try:
        err = read_until(proc.stderr, b"stop:")
        os.write(master, b"\x04")  # Ctrl-D on an empty line: end of input
        assert proc.wait(timeout=20) == 0
    finally:
        os.close(master)
        proc.kill()
    text = (err + proc.stderr.read()).decode()
    assert "waits for an MCP client" in text and "--config CLIENT" in text and "claude-code" in text
    assert "--ui" in text and "Ctrl-D" in text and "Ctrl-C" in text
    assert proc.stdout.read() == b""  # stdout is the protocol: nothing but replies, ever


def test_ctrl_c_in_a_terminal_stops_without_a_traceback(tmp_path):
    import signal
    proc, master = start_in_a_terminal(tmp_path)
    try:
        read_until(proc.stderr, b"stop:")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
    finally:
        os.close(master)
        proc.kill()
    assert b"Traceback" not in proc.stderr.read() and proc.stdout.read() == b""


def test_without_a_terminal_no_hint_is_printed(tmp_path):
    done = run(env={"MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}, input=b"")
    assert done.returncode == 0 and b"waits for an MCP client" not in done.stderr and done.stdout == b""


def start_in_a_terminal(tmp_path):
    """The server with a pseudo-terminal as stdin (as typed in a shell) and pipes for stdout and stderr."""
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}
    import signal
    # as a shell starts it in the foreground: SIGINT at its default. A background job (`cmd &` without job
    # control) inherits SIGINT ignored, and Python then keeps ignoring it: Ctrl-C could never stop the server.
    proc = subprocess.Popen([sys.executable, str(SERVER)], stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(slave)
    return proc, master


def read_until(stream, marker: bytes, timeout: float = 20.0) -> bytes:
    """Bytes from a pipe until marker shows up (or the timeout passes)."""
    import select
    seen, deadline = b"", time.monotonic() + timeout
    while marker not in seen and time.monotonic() < deadline:
        if select.select([stream], [], [], 0.2)[0]:
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            seen += chunk
    assert marker in seen, seen
    return seen
