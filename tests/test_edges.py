"""The store at its edges: paused and killed writers, lost locks, failing disks, symlinks, a busy, read-only
or damaged memory.db, two graphs in one folder, compact outside the lock. Real processes and real signals."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, SERVER, StdioServer, write_graph

import memory_server as ms

posix_only = pytest.mark.skipif(os.name != "posix", reason="signals and rlimits are POSIX")


# ── helpers ──
def facts_of(path: Path, name: str) -> list[str]:
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item.get("type") == "entity" and item["name"] == name:
            return item["observations"]
    return []


def memory(path: Path, lock_timeout: float = 10.0, **env: str) -> ms.Memory:
    settings = ms.Settings.from_env({"MEMORY_FILE_PATH": str(path), **env})
    return ms.Memory(dataclasses.replace(settings, lock_timeout=lock_timeout), client="test")


PAUSING_WRITER = textwrap.dedent("""
    import json, os, signal, sys
    sys.path.insert(0, sys.argv[1])
    import memory_server as ms
    real, paused = ms.GraphStore._write_atomic, []
    def pause_once(self, data, before_replace=lambda: None):
        if not paused:  # stop ourselves holding the lock, the new file written, right before the replace
            paused.append(1)
            print("paused", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        return real(self, data, before_replace)
    ms.GraphStore._write_atomic = pause_once
    mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": sys.argv[2]}), client="paused")
    print(json.dumps(mem.call_tool("add_observations",
                                   {"observations": [{"entityName": "svc", "contents": [sys.argv[3]]}]})), flush=True)
""")


def start_paused_writer(path: Path, fact: str) -> subprocess.Popen:
    """A real writer process that stops itself (SIGSTOP) while it holds the lock, just before its replace."""
    proc = subprocess.Popen([sys.executable, "-c", PAUSING_WRITER, str(ROOT), str(path), fact],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "paused"
    deadline = time.time() + 10
    while Path(f"/proc/{proc.pid}/stat").exists() and Path(f"/proc/{proc.pid}/stat").read_text().split(")")[1].split()[0] != "T":
        assert time.time() < deadline
        time.sleep(0.01)
    return proc


def finish(proc: subprocess.Popen) -> tuple[str, bool]:
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=30)
    return json.loads(out.strip().splitlines()[-1])


def age_lock(lock: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(lock, (then, then))


# ── 1. a live writer's lock is never broken for its age; the owner re-checks before it replaces ──
@posix_only
def test_a_paused_lock_holder_is_never_overtaken_however_old_its_lock(tmp_path):
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("svc", "service", ["listens on 8080"])])
    writer = start_paused_writer(path, "fact from the paused writer")
    try:
        lock = path.with_name("memory.jsonl.lock")
        age_lock(lock, 3600)  # an hour old: a laptop that slept, a debugger, SIGSTOP
        other = memory(path, lock_timeout=1.5)
        text, is_error = other.call_tool("add_observations", {"observations": [
            {"entityName": "svc", "contents": ["fact from a second session"]}]})
        assert is_error and "locked by another writer" in text and f"pid {writer.pid}" in text, text
        assert lock.exists()
    finally:
        text, is_error = finish(writer)
    assert not is_error, text
    assert facts_of(path, "svc") == ["listens on 8080", "fact from the paused writer"]
    text, is_error = other.call_tool("add_observations", {"observations": [
        {"entityName": "svc", "contents": ["fact from a second session"]}]})
    assert not is_error, text
    assert facts_of(path, "svc") == ["listens on 8080", "fact from the paused writer", "fact from a second session"]


@posix_only
def test_a_writer_whose_lock_was_lost_re_reads_and_re_applies_instead_of_erasing(tmp_path, capfd):
    """Whatever broke its lock (another machine's waiter, a person deleting it), the paused writer must not
    replace the file with the graph it read before: it notices, re-reads and applies its change again."""
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("svc", "service", ["listens on 8080"])])
    writer = start_paused_writer(path, "fact from the paused writer")
    path.with_name("memory.jsonl.lock").unlink()  # the lock is lost while its owner is stopped
    other = memory(path)
    text, is_error = other.call_tool("add_observations", {"observations": [
        {"entityName": "svc", "contents": ["written meanwhile"]}]})
    assert not is_error, text
    text, is_error = finish(writer)
    assert not is_error, text
    assert facts_of(path, "svc") == ["listens on 8080", "written meanwhile", "fact from the paused writer"]


def test_a_file_changed_by_another_program_under_the_lock_is_re_read(tmp_path, monkeypatch):
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("svc", "service", ["listens on 8080"])])
    mem = memory(path)
    real, edited = ms.GraphStore._write_atomic, []

    def hand_edit_first(self, data, before_replace=lambda: None):
        if not edited:  # an editor that ignores the lock saves right now
            edited.append(1)
            write_graph(path, [("svc", "service", ["listens on 8080", "added in an editor"])])
        return real(self, data, before_replace)
    monkeypatch.setattr(ms.GraphStore, "_write_atomic", hand_edit_first)
    text, is_error = mem.call_tool("add_observations", {"observations": [{"entityName": "svc", "contents": ["mine"]}]})
    assert not is_error, text
    assert facts_of(path, "svc") == ["listens on 8080", "added in an editor", "mine"]


def test_a_dead_owners_lock_with_a_reused_pid_is_broken(tmp_path):
    if not Path(f"/proc/{os.getpid()}/stat").exists():
        pytest.skip("process start times come from /proc")
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("svc", "service", [])])
    lock = path.with_name("memory.jsonl.lock")
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "token": "x", "started": "1"}))
    text, is_error = memory(path, lock_timeout=2).call_tool(
        "add_observations", {"observations": [{"entityName": "svc", "contents": ["after a reboot"]}]})
    assert not is_error, text


def test_another_machines_lock_with_a_future_time_says_whose_and_is_broken_after_the_bound(tmp_path, monkeypatch, capfd):
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("svc", "service", [])])
    lock = path.with_name("memory.jsonl.lock")
    lock.write_text(json.dumps({"pid": 4242, "host": "laptop-elsewhere", "token": "far", "time": time.time() + 3600}))
    future = time.time() + 3600  # that machine's clock runs an hour ahead
    os.utime(lock, (future, future))
    mem = memory(path, lock_timeout=1.0)
    args = {"observations": [{"entityName": "svc", "contents": ["from this machine"]}]}
    text, is_error = mem.call_tool("add_observations", args)
    assert is_error and "pid 4242 on laptop-elsewhere" in text and "60 s" in text, text
    monkeypatch.setattr(ms, "FOREIGN_LOCK_SILENT_SECONDS", 1.5)
    text, is_error = mem.call_tool("add_observations", args)
    assert not is_error, text
    assert "broke the lock" in capfd.readouterr().err


def test_another_machines_lock_that_keeps_beating_is_not_broken(tmp_path, monkeypatch):
    import threading
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("svc", "service", [])])
    lock = path.with_name("memory.jsonl.lock")
    lock.write_text(json.dumps({"pid": 4242, "host": "laptop-elsewhere", "token": "far"}))
    monkeypatch.setattr(ms, "FOREIGN_LOCK_SILENT_SECONDS", 0.5)
    stop = threading.Event()

    def beat():  # its clock is an hour behind ours, but its heartbeat goes on
        while not stop.wait(0.1):
            then = time.time() - 3600
            with contextlib.suppress(OSError):
                os.utime(lock, (then, then))
    threading.Thread(target=beat, daemon=True).start()
    try:
        text, is_error = memory(path, lock_timeout=2.0).call_tool(
            "add_observations", {"observations": [{"entityName": "svc", "contents": ["x"]}]})
    finally:
        stop.set()
    assert is_error and "laptop-elsewhere" in text, text
    assert json.loads(lock.read_text())["token"] == "far"


def test_an_unwritable_folder_is_a_clear_error_not_a_lock_wait(tmp_path, monkeypatch):
    path = tmp_path / "memory.jsonl"
    write_graph(path, [("svc", "service", [])])
    mem = memory(path)

    def denied(*_a, **_k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(ms.os, "open", denied)
    started = time.monotonic()
    text, is_error = mem.call_tool("add_observations", {"observations": [{"entityName": "svc", "contents": ["x"]}]})
    assert is_error and "read-only" in text and time.monotonic() - started < 2, text


# ── 2. nothing slow inside the lock: compact plans and probes first; --dry-run takes no lock ──
def compact_graph(path: Path) -> None:
    write_graph(path, [(f"svc{i}", "service", [f"2026-01-{d:02d}: deploy {i} step {d}" for d in range(1, 8)])
                       for i in range(6)])


def test_compact_runs_its_probes_without_the_lock(tmp_path, monkeypatch):
    path = tmp_path / "memory.jsonl"
    compact_graph(path)
    mem = memory(path, MEMORY_OBS_MAX="3")
    mem.meta.add_probe("deploy step", "svc1", "", "manual")
    held_during_probes = []
    real = ms.run_probes

    def watching(*args, **kwargs):
        held_during_probes.append(mem.store.lock_path.exists())
        return real(*args, **kwargs)
    monkeypatch.setattr(ms, "run_probes", watching)
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0 and "archived 24 fact(s)" in text, text
    assert held_during_probes == [False, False]


def test_compact_plans_again_when_a_write_lands_while_it_plans(tmp_path, monkeypatch):
    path = tmp_path / "memory.jsonl"
    compact_graph(path)
    mem = memory(path, MEMORY_OBS_MAX="3")
    mem.meta.add_probe("deploy step", "svc1", "", "manual")
    real, writes = ms.run_probes, []

    def concurrent_write(*args, **kwargs):
        if not writes:  # another session writes while compact runs its probes
            writes.append(memory(path, MEMORY_OBS_MAX="100").call_tool("add_observations", {"observations": [
                {"entityName": "svc0", "contents": ["written while compact planned"]}]}))
        return real(*args, **kwargs)
    monkeypatch.setattr(ms, "run_probes", concurrent_write)
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0, text
    assert not writes[0][1], writes
    assert "written while compact planned" in facts_of(path, "svc0")
    assert len(facts_of(path, "svc0")) == 3 and len(facts_of(path, "svc1")) == 3  # re-planned on the new file


def test_compact_dry_run_takes_no_lock(tmp_path):
    path = tmp_path / "memory.jsonl"
    compact_graph(path)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        sys.path.insert(0, sys.argv[1])
        import memory_server as ms
        store = ms.GraphStore(ms.Settings.from_env({"MEMORY_FILE_PATH": sys.argv[2]}))
        with store.lock():
            print("locked", flush=True)
            time.sleep(60)
    """), str(ROOT), str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        out = subprocess.run([sys.executable, str(SERVER), "--compact", "--dry-run"], capture_output=True, text=True,
                             env={**os.environ, "MEMORY_FILE_PATH": str(path), "MEMORY_OBS_MAX": "3"}, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "dry run: nothing changed" in out.stdout and time.monotonic() - started < 8
    finally:
        holder.kill()
        holder.wait()


# ── 3. moves between graph and archive can only duplicate, never lose ──
def limited(limit: int):
    """preexec_fn: writes past `limit` bytes fail (EFBIG), as on a full disk or over a quota."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def padded_graph(path: Path, facts: list[str]) -> None:
    """A graph of ~120 KB, so memory.db (tens of KB) still fits under a limit just above the graph's size."""
    filler = [(f"filler-{i}", "note", [f"filler fact {i} " + "x" * 100]) for i in range(1000)]
    write_graph(path, [("svc", "service", facts)] + filler)


@posix_only
def test_a_restore_whose_graph_write_fails_keeps_the_fact_in_the_archive(tmp_path):
    path = tmp_path / "memory.jsonl"
    padded_graph(path, ["2026-01-01: first", "2026-01-02: second"])
    mem = memory(path, MEMORY_OBS_MAX="1")
    mem.call_tool("add_observations", {"observations": [{"entityName": "svc", "contents": ["2026-01-03: third"]}]})
    archived = [f.text for f in mem.store.read_archive("svc")]
    assert archived == ["2026-01-01: first", "2026-01-02: second"]
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import json, sys
            sys.path.insert(0, sys.argv[1])
            import memory_server as ms
            mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": sys.argv[2], "MEMORY_OBS_MAX": "5"}))
            print(json.dumps(mem.call_tool("archived_observations",
                                           {"entityName": "svc", "restore": ["2026-01-01: first"]})))
        """), str(ROOT), str(path)],
        capture_output=True, text=True, preexec_fn=limited(path.stat().st_size + 8), timeout=60)
    text, is_error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert is_error and text.startswith("Not saved"), text
    assert facts_of(path, "svc") == ["2026-01-03: third"]
    assert [f.text for f in mem.store.read_archive("svc")] == archived


@posix_only
def test_a_rename_whose_graph_write_fails_leaves_archive_and_pins_with_the_old_name(tmp_path):
    path = tmp_path / "memory.jsonl"
    padded_graph(path, ["2026-01-01: first", "2026-01-02: second", "identity fact"])
    mem = memory(path, MEMORY_OBS_MAX="2")
    mem.call_tool("add_observations", {"observations": [{"entityName": "svc", "contents": ["2026-01-03: third"]}]})
    mem.call_tool("mark_fact", {"entityName": "svc", "observation": "identity fact", "action": "pin"})
    archive_before = mem.store.archive_path("svc").read_bytes()
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import json, sys
            sys.path.insert(0, sys.argv[1])
            import memory_server as ms
            mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": sys.argv[2], "MEMORY_OBS_MAX": "2"}))
            print(json.dumps(mem.call_tool("rename_entity", {"name": "svc", "newName": "service-with-a-longer-name"})))
        """), str(ROOT), str(path)],
        capture_output=True, text=True, preexec_fn=limited(path.stat().st_size + 4), timeout=60)
    text, is_error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert is_error and text.startswith("Not saved"), text
    fresh = memory(path, MEMORY_OBS_MAX="2")
    fresh.fresh_graph()
    assert facts_of(path, "svc") and not facts_of(path, "service-with-a-longer-name")
    assert mem.store.archive_path("svc").read_bytes() == archive_before
    assert not fresh.store.archive_path("service-with-a-longer-name").exists()
    assert fresh.meta.state("svc", "identity fact").pinned


@posix_only
def test_a_compact_killed_between_archive_and_graph_archives_nothing_twice_when_rerun(tmp_path):
    path = tmp_path / "memory.jsonl"
    compact_graph(path)
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import os, signal, sys
        sys.path.insert(0, sys.argv[1])
        import memory_server as ms
        def die(self, data, before_replace=lambda: None):
            os.kill(os.getpid(), signal.SIGKILL)  # the archive is written, the graph not yet
        ms.GraphStore._write_atomic = die
        mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": sys.argv[2], "MEMORY_OBS_MAX": "3"}))
        ms.compact(mem, dry_run=False)
    """), str(ROOT), str(path)], capture_output=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    mem = memory(path, MEMORY_OBS_MAX="3")
    assert len(mem.store.read_archive("svc0")) == 4 and len(facts_of(path, "svc0")) == 7  # a duplicate, no loss
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0, text
    archived = [f.text for f in mem.store.read_archive("svc0")]
    assert len(archived) == len(set(archived)) == 4 and len(facts_of(path, "svc0")) == 3


# ── 4. symlinks ──
@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="symlinks need privileges on Windows")
def test_a_symlinked_graph_stays_a_symlink_and_its_side_files_sit_beside_the_target(tmp_path):
    real_dir, link_dir = tmp_path / "synced", tmp_path / "dotfiles"
    real_dir.mkdir()
    link_dir.mkdir()
    target = real_dir / "memory.jsonl"
    write_graph(target, [("svc", "service", ["2026-01-01: a", "2026-01-02: b"])])
    link = link_dir / "memory.jsonl"
    link.symlink_to(target)
    server = StdioServer(link, {"MEMORY_OBS_MAX": "2"})
    try:
        server.initialize()
        text, is_error = server.call("add_observations", {"observations": [{"entityName": "svc", "contents": ["2026-01-03: c"]}]})
        assert not is_error, text
    finally:
        server.close()
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert facts_of(target, "svc") == ["2026-01-02: b", "2026-01-03: c"]
    assert (real_dir / "archive").is_dir() and (real_dir / "memory.db").exists() and (real_dir / "backups").is_dir()
    assert sorted(p.name for p in link_dir.iterdir()) == ["memory.jsonl"]


# ── 5. memory.db is best-effort; the graph is not ──
@contextlib.contextmanager
def serving(path: Path):
    """A real server over stdio on a one-entity graph, initialised and warmed by one search."""
    write_graph(path, [("svc", "service", ["listens on 8080"])])
    server = StdioServer(path)
    try:
        server.initialize()
        assert not server.call("search_nodes", {"query": "listens"})[1]
        yield server
    finally:
        server.close()


def add(server: StdioServer, fact: str) -> tuple[str, bool]:
    return server.call("add_observations", {"observations": [{"entityName": "svc", "contents": [fact]}]})


def test_a_memory_db_held_by_another_process_never_fails_a_read_or_a_saved_write(tmp_path):
    path = tmp_path / "memory.jsonl"
    with serving(path) as server:
        holder = sqlite3.connect(tmp_path / "memory.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        text, is_error = server.call("search_nodes", {"query": "listens"})
        assert not is_error and "listens on 8080" in text and "memory.db is busy" in text, text
        text, is_error = add(server, "saved anyway")
        assert not is_error and "memory.db is busy" in text, text
        assert time.monotonic() - started < 8
        assert facts_of(path, "svc") == ["listens on 8080", "saved anyway"]
        holder.execute("ROLLBACK")
        holder.close()
        text, is_error = server.call("recall", {"query": "saved anyway"})
        assert not is_error and "saved anyway" in text and "Note:" not in text, text


@posix_only
def test_a_truncated_shm_of_an_old_wal_database_does_not_kill_the_server(tmp_path):
    old = sqlite3.connect(tmp_path / "memory.db", isolation_level=None)
    old.execute("PRAGMA journal_mode=WAL")  # as earlier versions left it
    old.execute("CREATE TABLE IF NOT EXISTS t(x)")
    old.close()
    with serving(tmp_path / "memory.jsonl") as server:
        (tmp_path / "memory.db-shm").write_bytes(b"")  # truncated by a sync tool or a clean-up script
        text, is_error = add(server, "still up")
        assert not is_error, text
        assert server.proc.poll() is None
    mode = sqlite3.connect(tmp_path / "memory.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "delete"


def test_a_memory_db_overwritten_with_garbage_while_running_never_fails_a_call(tmp_path):
    path = tmp_path / "memory.jsonl"
    with serving(path) as server:
        (tmp_path / "memory.db").write_bytes(b"not a database at all " * 500)
        text, is_error = server.call("search_nodes", {"query": "listens"})
        assert not is_error and "listens on 8080" in text, text
        text, is_error = add(server, "kept")
        assert not is_error and "memory.db" in text, text
        assert facts_of(path, "svc") == ["listens on 8080", "kept"]


def read_only_command(folder: Path, command: list[str]) -> list[str]:
    """`command` seeing `folder` read-only: a real read-only mount in a private mount namespace when we are
    root (root ignores permission bits), else the folder's permission bits."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        return command
    import shlex
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("root without mount namespaces: cannot make a read-only folder here")
    d = shlex.quote(str(folder))
    return ["unshare", "-m", "sh", "-c",
            f"mount --make-rprivate / && mount --bind {d} {d} && mount -o remount,ro,bind {d} && exec \"$@\"",
            "sh", *command]


@posix_only
@pytest.mark.parametrize("with_db", [True, False])
def test_a_read_only_folder_answers_reads_and_refuses_writes_clearly(tmp_path, with_db):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "memory.jsonl"
    write_graph(path, [("svc", "service", ["listens on 8080"])])
    if with_db:
        memory(path).call_tool("search_nodes", {"query": "listens"})
    before = path.read_bytes()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "MEMORY_FILE_PATH": str(path)}
    proc = subprocess.Popen(read_only_command(folder, [sys.executable, str(SERVER)]), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(tmp_path))
    requests = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search_nodes", "arguments": {"query": "listens"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add_observations", "arguments": {
            "observations": [{"entityName": "svc", "contents": ["x"]}]}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "open_nodes", "arguments": {"names": ["svc"]}}}]
    try:
        out, err = proc.communicate("".join(json.dumps(r) + "\n" for r in requests).encode(), timeout=60)
    finally:
        os.chmod(folder, 0o755)
    replies = {r["id"]: r for r in map(json.loads, out.decode().splitlines())}
    read = replies[2]["result"]
    assert not read.get("isError") and "listens on 8080" in read["content"][0]["text"], read
    write = replies[3]["result"]
    assert write["isError"] and "Not saved" in write["content"][0]["text"] and "read-only" in write["content"][0]["text"].lower(), write
    assert "listens on 8080" in replies[4]["result"]["content"][0]["text"]
    assert path.read_bytes() == before


# ── 6. two graphs in one folder keep their own side files ──
def test_memory_jsonl_and_memory_json_in_one_folder_keep_their_own_pins_and_archives(tmp_path):
    mems = [memory(tmp_path / name, MEMORY_OBS_MAX="1") for name in ("memory.jsonl", "memory.json")]
    for i, mem in enumerate(mems):
        mem.call_tool("create_entities", {"entities": [{"name": "svc", "entityType": "t", "observations": [f"graph {i}"]}]})
        mem.call_tool("add_observations", {"observations": [{"entityName": "svc", "contents": [f"2026-0{i + 1}-01: event {i}"]}]})
    mems[0].call_tool("mark_fact", {"entityName": "svc", "observation": "graph 0", "action": "pin"})
    again = [memory(tmp_path / name, MEMORY_OBS_MAX="1") for name in ("memory.jsonl", "memory.json")]
    for mem in again:
        mem.fresh_graph()
    assert again[0].meta.state("svc", "graph 0").pinned
    assert again[0].store.meta_path != again[1].store.meta_path
    assert again[0].store.archive_dir != again[1].store.archive_dir
    assert again[1].store.archive_dir.name == "archive-memory.json"
    mems[1].call_tool("search_nodes", {"query": "graph"})
    again[0].meta.reconcile(again[0].store.read(), -1, None)
    assert again[0].meta.state("svc", "graph 0").pinned  # the other graph's reconcile did not wipe it


def test_fact_state_after_our_own_writes_matches_a_full_reconcile(tmp_path):
    """Writes track only the facts they changed (no pass over the whole graph); the result must be what a
    full reconcile gives, in memory and in memory.db."""
    path = tmp_path / "memory.jsonl"
    write_graph(path, [(f"svc{i}", "service", [f"fact {j} of {i}" for j in range(3)]) for i in range(5)])
    mem = memory(path)
    calls = [("add_observations", {"observations": [{"entityName": "svc1", "contents": ["new one", "new two"]}]}),
             ("delete_observations", {"deletions": [{"entityName": "svc2", "observations": ["fact 0 of 2"]}]}),
             ("rename_entity", {"name": "svc3", "newName": "svc-three"}),
             ("delete_entities", {"entityNames": ["svc4"]}),
             ("create_entities", {"entities": [{"name": "db", "entityType": "database", "observations": ["pg 16"]}]})]
    for tool, args in calls:
        text, is_error = mem.call_tool(tool, args)
        assert not is_error, text
        live = {(e.name, o) for e in ms.parse_graph_bytes(path.read_bytes()).entities for o in e.observations}
        assert set(mem.meta.states) == live, tool
        rows = set(mem.meta.conn.execute("SELECT entity, text FROM facts"))
        assert rows == live, tool


def test_compact_changes_nothing_while_memory_db_cannot_be_read(tmp_path):
    """Pins and probes live in memory.db: a compact that cannot read them would be guessing."""
    path = tmp_path / "memory.jsonl"
    compact_graph(path)
    memory(path).call_tool("search_nodes", {"query": "deploy"})
    before = path.read_bytes()
    holder = sqlite3.connect(tmp_path / "memory.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        out = subprocess.run([sys.executable, str(SERVER), "--compact"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "MEMORY_FILE_PATH": str(path), "MEMORY_OBS_MAX": "3"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert out.returncode == 1 and "memory.db could not be read" in out.stdout, out.stdout + out.stderr
    assert path.read_bytes() == before
