"""graphmem's store (sections 2-3 of memory_server.py): locking, crash safety, atomic writes,
cache freshness, backups, unreadable lines, unknown fields, read-only reads and the archive.

Concurrency and crash tests use real subprocesses (`python -c ...` importing memory_server).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import random
import signal
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

BIG_CAP = "100000"  # MEMORY_OBS_MAX high enough that nothing is ever archived


# ───────────────────────────────────────────────────────────── helpers

def word(seed: str) -> str:
    """A 7-letter pseudo-random word: facts built from these never look alike (no duplicate/supersede)."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(chr(97 + b % 26) for b in digest[:7])


def fact(*parts: object) -> str:
    key = "-".join(map(str, parts))
    return " ".join(word(f"{key}/{k}") for k in range(3))


def make_memory(path: Path, **env: str) -> ms.Memory:
    settings = ms.Settings.from_env({"MEMORY_FILE_PATH": str(path), **{k: str(v) for k, v in env.items()}})
    return ms.Memory(settings, client="t")


def write_graph(path: Path, objs: list[dict]) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "\n".join(json.dumps(o, ensure_ascii=False, separators=(",", ":")) for o in objs).encode("utf-8")
    path.write_bytes(data)
    return data


def strict_lines(data: bytes) -> list[dict]:
    """Every line of a graphmem-written file is a complete JSON object (no blank or partial lines)."""
    if not data:
        return []
    out = []
    for number, line in enumerate(data.decode("utf-8").split("\n"), start=1):
        assert line.strip(), f"blank line {number} in written file"
        obj = json.loads(line)
        assert isinstance(obj, dict), f"line {number} is not an object: {line[:80]!r}"
        out.append(obj)
    return out


def entity_obs(data: bytes, name: str) -> list[str]:
    for obj in strict_lines(data):
        if obj.get("type") == "entity" and obj.get("name") == name:
            return obj["observations"]
    raise AssertionError(f"entity {name!r} not in file")


def ok(result: tuple[str, bool]) -> str:
    text, is_error = result
    assert not is_error, text
    return text


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# Child-process prelude: import the server from the repo and define the same fact() as above.
PRELUDE = f"""
import sys, os, json, time, hashlib
sys.path.insert(0, {str(ROOT)!r})
import memory_server as ms
def word(seed):
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(chr(97 + b % 26) for b in digest[:7])
def fact(*parts):
    key = "-".join(map(str, parts))
    return " ".join(word(f"{{key}}/{{k}}") for k in range(3))
"""


def spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PRELUDE + code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), text=True)


# ───────────────────────────────────────────────────────────── locking with real processes

WORKER = """
w, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": path, "MEMORY_OBS_MAX": "100000"}), client=f"w{w}")
print("ready", flush=True)
sys.stdin.readline()  # barrier: every worker starts at once
problems = []
for i in range(n):
    target = "Shared" if i % 8 == 0 else f"W{w}-{i % 10}"
    text, err = mem.call_tool("add_observations", {"observations": [{"entityName": target, "contents": [fact(w, i)]}]})
    if err or "+1" not in text:
        problems.append(text)
print(json.dumps(problems), flush=True)
"""


def test_concurrent_writer_processes_lose_no_fact(tmp_path):
    path = tmp_path / "memory.jsonl"
    workers, per_worker = 4, 200
    mem = make_memory(path, MEMORY_OBS_MAX=BIG_CAP)
    # Facts spread over a shared entity and ten per worker (compare_facts is O(facts on the entity) per add).
    ok(mem.call_tool("create_entities", {"entities": [{"name": "Shared", "entityType": "t", "observations": []}] +
                                         [{"name": f"W{w}-{k}", "entityType": "t", "observations": []}
                                          for w in range(workers) for k in range(10)]}))
    procs = [spawn(WORKER, str(w), str(per_worker), str(path)) for w in range(workers)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:  # release them together
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == [], out
    data = path.read_bytes()
    lines = strict_lines(data)
    stored = {(o["name"], t) for o in lines if o["type"] == "entity" for t in o["observations"]}
    expected = {("Shared" if i % 8 == 0 else f"W{w}-{i % 10}", fact(w, i))
                for w in range(workers) for i in range(per_worker)}
    assert len(expected) == workers * per_worker
    assert stored == expected
    assert sum(len(o["observations"]) for o in lines if o["type"] == "entity") == workers * per_worker  # no duplicates
    assert not (tmp_path / "memory.jsonl.lock").exists()
    assert not list(tmp_path.glob("memory.jsonl.lock*")), "lock leftovers"
    assert not list(tmp_path.glob("*.tmp")), "temp files left behind"
    assert not (tmp_path / "archive").exists()
    # A fresh reader agrees with the file.
    assert make_memory(path).store.read().fact_count() == workers * per_worker


# ───────────────────────────────────────────────────────────── crash safety

CRASH_WRITER = """
run, path = int(sys.argv[1]), sys.argv[2]
mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": path, "MEMORY_OBS_MAX": "100000"}), client="crash")
print("ready", flush=True)
i = 0
while True:
    text, err = mem.call_tool("add_observations", {"observations": [{"entityName": "Crash", "contents": [fact("crash", run, i)]}]})
    if err:
        print("ERR " + text, flush=True)
        sys.exit(3)
    print(i, flush=True)
    i += 1
"""


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL is POSIX-only")
def test_sigkilled_writer_leaves_a_parseable_prefix_and_no_blocking_lock(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path, MEMORY_OBS_MAX=BIG_CAP)
    ok(mem.call_tool("create_entities", {"entities": [{"name": "Crash", "entityType": "t", "observations": []},
                                                      {"name": "Check", "entityType": "t", "observations": []}]}))
    rng = random.Random(20260301)
    expected: list[str] = []
    left_locked = 0
    for run in range(15):
        proc = spawn(CRASH_WRITER, str(run), str(path))
        try:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
            time.sleep(rng.choice([0.0, 0.005, 0.02]) if run % 3 == 0 else rng.uniform(0.01, 0.25))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)  # reaped: its pid is really dead now
            out = proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert "ERR" not in out, out
        acked = sum(1 for line in out.splitlines() if line.strip().isdigit())

        data = path.read_bytes()
        observations = entity_obs(data, "Crash")  # every line parses (strict_lines)
        assert observations[:len(expected)] == expected, f"run {run}: earlier facts lost or reordered"
        new = observations[len(expected):]
        m = len(new)
        assert new == [fact("crash", run, i) for i in range(m)], f"run {run}: not a prefix of the writes"
        assert acked <= m <= acked + 1, f"run {run}: {acked} acknowledged writes but {m} in the file"
        expected += new

        # The next writer is not blocked by the dead writer's lock.
        left_locked += (tmp_path / "memory.jsonl.lock").exists()
        start = time.monotonic()
        ok(mem.call_tool("add_observations", {"observations": [{"entityName": "Check", "contents": [fact("check", run)]}]}))
        assert time.monotonic() - start < mem.settings.lock_timeout
        assert not (tmp_path / "memory.jsonl.lock").exists()

    data = path.read_bytes()
    assert entity_obs(data, "Crash") == expected
    assert entity_obs(data, "Check") == [fact("check", r) for r in range(15)]
    assert not list(tmp_path.glob("memory.jsonl.lock*"))
    assert left_locked >= 1, "no kill landed while the writer held the lock: the stale-lock path went untested"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.skipif(os.name == "nt", reason="pid liveness check is POSIX-only")
def test_lock_of_a_dead_process_is_broken_at_once(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path)
    ok(mem.call_tool("create_entities", {"entities": [{"name": "A", "entityType": "t", "observations": []}]}))
    lock = tmp_path / "memory.jsonl.lock"
    import socket
    lock.write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname(), "time": time.time(), "token": "x"}))
    start = time.monotonic()
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": ["after a dead writer"]}]}))
    assert time.monotonic() - start < 2.0
    assert not lock.exists()
    assert entity_obs(path.read_bytes(), "A") == ["after a dead writer"]


def test_empty_lock_left_by_a_writer_that_died_before_writing_it_is_broken(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path)
    ok(mem.call_tool("create_entities", {"entities": [{"name": "A", "entityType": "t", "observations": []}]}))
    lock = tmp_path / "memory.jsonl.lock"
    lock.write_bytes(b"")
    old = time.time() - 5
    os.utime(lock, (old, old))
    start = time.monotonic()
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": ["after an empty lock"]}]}))
    assert time.monotonic() - start < mem.settings.lock_timeout
    assert not lock.exists()


def test_live_lock_times_out_with_a_clear_error_and_changes_nothing(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path)
    ok(mem.call_tool("create_entities", {"entities": [{"name": "A", "entityType": "t", "observations": ["one"]}]}))
    before = path.read_bytes()
    import socket
    lock = tmp_path / "memory.jsonl.lock"
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(), "token": "other"}))
    mem.settings = mem.store.settings = dataclasses.replace(mem.settings, lock_timeout=0.5)
    start = time.monotonic()
    text, is_error = mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": ["two"]}]})
    elapsed = time.monotonic() - start
    assert is_error and "locked" in text, text
    assert 0.4 < elapsed < 5
    assert path.read_bytes() == before
    assert lock.exists(), "a live writer's lock must not be broken"
    lock.unlink()
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": ["two"]}]}))


# ───────────────────────────────────────────────────────────── atomic write: readers never see half a file

READER = """
path, stop, minimum = sys.argv[1], sys.argv[2], int(sys.argv[3])
reads = bad = 0
sizes = set()
problems = []
print("ready", flush=True)
while not os.path.exists(stop):
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        bad += 1
        problems.append("missing")
        continue
    reads += 1
    entities = 0
    good = True
    for line in data.split(b"\\n"):
        try:
            obj = json.loads(line)
        except ValueError:
            good = False
            break
        entities += obj.get("type") == "entity"
    if not good or entities < minimum:
        bad += 1
        problems.append(repr(data[-60:]))
    sizes.add(len(data))
print(json.dumps({"reads": reads, "bad": bad, "sizes": len(sizes), "problems": problems[:3]}), flush=True)
"""


def test_readers_in_another_process_never_see_a_half_written_file(tmp_path):
    path = tmp_path / "memory.jsonl"
    seed = [{"type": "entity", "name": f"E{n}", "entityType": "t",
             "observations": [fact("seed", n, k) + " " + "padding " * 20 for k in range(10)]} for n in range(60)]
    write_graph(path, seed)
    assert path.stat().st_size > 100_000  # big enough that a non-atomic write would be seen half done
    stop = tmp_path / "stop"
    reader = spawn(READER, str(path), str(stop), str(len(seed)))
    try:
        assert reader.stdout.readline().strip() == "ready", reader.stderr.read()
        mem = make_memory(path, MEMORY_OBS_MAX=BIG_CAP)
        for i in range(40):
            ok(mem.call_tool("add_observations", {"observations": [{"entityName": f"E{i % 60}", "contents": [fact("w", i)]}]}))
        stop.write_text("stop")
        out, err = reader.communicate(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    report = json.loads(out.strip().splitlines()[-1])
    assert report["bad"] == 0, report
    assert report["reads"] >= 20, report
    assert report["sizes"] >= 5, report  # the reader really saw the file change under it


# ───────────────────────────────────────────────────────────── the running server sees other processes' writes

def test_running_memory_notices_another_process_write(tmp_path):
    path = tmp_path / "memory.jsonl"
    a = make_memory(path)
    ok(a.call_tool("create_entities", {"entities": [{"name": "Kitchen", "entityType": "room", "observations": ["has a window"]}]}))
    text = ok(a.call_tool("search_nodes", {"query": "zebra"}))
    assert "No entities match" in text
    ok(a.call_tool("read_graph", {}))  # A holds a cached graph now

    writer = subprocess.run([sys.executable, "-c", PRELUDE + """
mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": sys.argv[1]}), client="B")
text, err = mem.call_tool("add_observations", {"observations": [{"entityName": "Kitchen", "contents": ["zebra striped rug"]}]})
assert not err, text
text, err = mem.call_tool("create_entities", {"entities": [{"name": "Zebra", "entityType": "animal", "observations": []}]})
assert not err, text
""", str(path)], env=child_env(), capture_output=True, text=True, timeout=60)
    assert writer.returncode == 0, writer.stderr

    text = ok(a.call_tool("search_nodes", {"query": "zebra"}))
    assert "Kitchen" in text and "Zebra" in text
    assert "Kitchen (2)" in ok(a.call_tool("read_graph", {}))
    # And A's next write keeps B's changes (it re-reads under the lock).
    ok(a.call_tool("add_observations", {"observations": [{"entityName": "Kitchen", "contents": ["tiled floor"]}]}))
    assert entity_obs(path.read_bytes(), "Kitchen") == ["has a window", "zebra striped rug", "tiled floor"]


def test_hand_edit_of_the_file_shows_up_in_the_next_read(tmp_path):
    path = tmp_path / "memory.jsonl"
    a = make_memory(path)
    ok(a.call_tool("create_entities", {"entities": [{"name": "Car", "entityType": "thing", "observations": ["colour red"]}]}))
    assert "Car (1)" in ok(a.call_tool("read_graph", {}))
    data = path.read_bytes()
    time.sleep(0.02)
    path.write_bytes(data.replace(b'"colour red"', b'"colour red","wheels four"'))
    text = ok(a.call_tool("open_nodes", {"names": ["Car"]}))
    assert "wheels four" in text


# ───────────────────────────────────────────────────────────── daily backups

def _utc_today() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")


def test_daily_backup_holds_the_content_before_the_days_first_write(tmp_path):
    path = tmp_path / "memory.jsonl"
    original = write_graph(path, [{"type": "entity", "name": "A", "entityType": "t", "observations": ["original fact"]}])
    mem = make_memory(path)
    day_before = _utc_today()
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": [fact("first write")]}]}))
    day_after = _utc_today()
    candidates = {tmp_path / "backups" / f"memory-{d}.jsonl" for d in (day_before, day_after)}
    backups = [p for p in candidates if p.exists()]
    assert len(backups) == 1, sorted((tmp_path / "backups").iterdir())
    assert backups[0].read_bytes() == original
    # The day's later writes leave the day's backup alone.
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": [fact("second write")]}]}))
    if _utc_today() == day_after:
        assert backups[0].read_bytes() == original
        assert len(list((tmp_path / "backups").iterdir())) == 1


def test_first_write_to_a_new_file_needs_no_backup(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path)
    ok(mem.call_tool("create_entities", {"entities": [{"name": "A", "entityType": "t", "observations": []}]}))
    assert path.exists()
    assert not (tmp_path / "backups").exists() or not any((tmp_path / "backups").iterdir())


def test_backup_retention_keeps_newest_daily_files_and_leaves_other_files_alone(tmp_path):
    path = tmp_path / "memory.jsonl"
    write_graph(path, [{"type": "entity", "name": "A", "entityType": "t", "observations": ["x fact"]}])
    backups = tmp_path / "backups"
    backups.mkdir()
    for day in range(1, 10):
        (backups / f"memory-2020-01-0{day}.jsonl").write_text(f"old {day}")
    others = {
        "memory-2020-01-01-120000-pre-compact.jsonl": "manual backup",
        "notes.txt": "mine",
        "other-2019-12-31.jsonl": "another graph",
        "memory-2019-12-31.jsonl.bak": "not a daily",
        "memory-2019-12-31.json": "wrong suffix",
    }
    for name, text in others.items():
        (backups / name).write_text(text)
    (backups / "sub").mkdir()
    (backups / "sub" / "memory-2018-01-01.jsonl").write_text("nested")

    mem = make_memory(path, MEMORY_BACKUPS_KEPT="3")
    day_before = _utc_today()
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": ["y fact"]}]}))
    today = day_before if (backups / f"memory-{day_before}.jsonl").exists() else _utc_today()

    daily = sorted(p.name for p in backups.iterdir() if p.is_file() and p.name not in others)
    assert daily == ["memory-2020-01-08.jsonl", "memory-2020-01-09.jsonl", f"memory-{today}.jsonl"]
    for name, text in others.items():
        assert (backups / name).read_text() == text
    assert (backups / "sub" / "memory-2018-01-01.jsonl").read_text() == "nested"


def test_backups_kept_zero_makes_no_backups(tmp_path):
    path = tmp_path / "memory.jsonl"
    write_graph(path, [{"type": "entity", "name": "A", "entityType": "t", "observations": []}])
    mem = make_memory(path, MEMORY_BACKUPS_KEPT="0")
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": ["y fact"]}]}))
    assert not (tmp_path / "backups").exists()


# ───────────────────────────────────────────────────────────── unreadable lines

GARBAGE = b"this is not json {"
BAD_UTF8 = b'{"type":"entity","name":"\xff\xfe bad \xc3\x28","entityType":"t","observations":[]}'
ARRAY = b'["an","array","line"]'


def test_unreadable_lines_are_reported_kept_by_reads_and_set_aside_by_the_next_write(tmp_path):
    path = tmp_path / "memory.jsonl"
    good_a = b'{"type":"entity","name":"A","entityType":"t","observations":["alpha fact"]}'
    good_b = b'{"type":"entity","name":"B","entityType":"t","observations":["beta fact"]}'
    rel = b'{"type":"relation","from":"A","to":"B","relationType":"knows"}'
    original = b"\n".join([good_a, GARBAGE, rel, BAD_UTF8, good_b, ARRAY])
    path.write_bytes(original)
    old = time.time() - 100
    os.utime(path, (old, old))
    mtime = path.stat().st_mtime_ns

    mem = make_memory(path)
    text = ok(mem.call_tool("read_graph", {}))
    assert "2 entities, 1 relations, 2 facts" in text
    assert "3 unreadable line(s)" in text and "memory.jsonl.unreadable" in text
    assert "3 unreadable" in ok(mem.call_tool("search_nodes", {"query": "alpha"}))
    assert "alpha fact" in ok(mem.call_tool("open_nodes", {"names": ["A"]}))
    ok(mem.call_tool("recall", {"query": "beta"}))
    ok(mem.call_tool("archived_observations", {"entityName": "A"}))
    assert path.read_bytes() == original  # reads never rewrite
    assert path.stat().st_mtime_ns == mtime
    assert not (tmp_path / "memory.jsonl.unreadable").exists()

    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": ["gamma fact"]}]}))
    aside = (tmp_path / "memory.jsonl.unreadable").read_bytes()
    for raw in (GARBAGE, BAD_UTF8, ARRAY):
        assert raw in aside, f"{raw!r} not preserved in the .unreadable file"
    data = path.read_bytes()
    objs = strict_lines(data)
    assert objs == [
        {"type": "entity", "name": "A", "entityType": "t", "observations": ["alpha fact", "gamma fact"]},
        {"type": "entity", "name": "B", "entityType": "t", "observations": ["beta fact"]},
        {"type": "relation", "from": "A", "to": "B", "relationType": "knows"},
    ]
    text = ok(mem.call_tool("read_graph", {}))
    assert "unreadable" not in text
    # A second write does not set the same lines aside twice.
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "B", "contents": ["delta fact"]}]}))
    assert (tmp_path / "memory.jsonl.unreadable").read_bytes() == aside


def test_unreadable_lines_do_not_block_a_failed_write(tmp_path):
    """An erroring write (unknown entity) must not rewrite the file either."""
    path = tmp_path / "memory.jsonl"
    original = b"\n".join([b'{"type":"entity","name":"A","entityType":"t","observations":[]}', GARBAGE])
    path.write_bytes(original)
    mem = make_memory(path)
    text, is_error = mem.call_tool("add_observations", {"observations": [{"entityName": "Nobody", "contents": ["x y z"]}]})
    assert is_error and "Nobody" in text
    assert path.read_bytes() == original
    assert not (tmp_path / "memory.jsonl.unreadable").exists()


# ───────────────────────────────────────────────────────────── unknown fields and line types

def test_unknown_fields_and_unknown_line_types_survive_writes(tmp_path):
    path = tmp_path / "memory.jsonl"
    entity_a = {"type": "entity", "name": "A", "entityType": "t", "observations": ["alpha fact"],
                "createdAt": "2024-01-01", "meta": {"tags": ["x", "ü"], "n": 1, "ok": True, "nothing": None}}
    entity_b = {"type": "entity", "name": "B", "entityType": "t", "observations": [], "importance": 0.75}
    relation = {"type": "relation", "from": "A", "to": "B", "relationType": "uses", "weight": 0.5, "since": "2024"}
    note = {"type": "note", "text": "keep me ü 😀", "n": [1, 2, {"deep": "yes"}]}
    untyped = {"kind": "no type at all"}
    write_graph(path, [entity_a, note, relation, entity_b, untyped])
    note_line = json.dumps(note, ensure_ascii=False, separators=(",", ":"))
    untyped_line = json.dumps(untyped, ensure_ascii=False, separators=(",", ":"))

    mem = make_memory(path)
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "A", "contents": ["gamma fact"]}]}))
    data = path.read_bytes()
    objs = strict_lines(data)
    by_name = {o["name"]: o for o in objs if o.get("type") == "entity"}
    assert by_name["A"] == {**entity_a, "observations": ["alpha fact", "gamma fact"]}
    assert by_name["B"] == entity_b
    assert [o for o in objs if o.get("type") == "relation"] == [relation]
    text_lines = data.decode("utf-8").split("\n")
    assert note_line in text_lines and untyped_line in text_lines
    assert len(objs) == 5

    ok(mem.call_tool("rename_entity", {"name": "A", "newName": "A2"}))
    ok(mem.call_tool("create_relations", {"relations": [{"from": "B", "to": "A2", "relationType": "feeds"}]}))
    objs = strict_lines(path.read_bytes())
    a2 = next(o for o in objs if o.get("name") == "A2")
    assert a2["createdAt"] == "2024-01-01" and a2["meta"] == entity_a["meta"]
    rel = next(o for o in objs if o.get("relationType") == "uses")
    assert rel == {**relation, "from": "A2"}
    assert note in objs and untyped in objs


def test_parse_keeps_entities_then_relations_then_other_lines():
    data = (b'{"type":"relation","from":"A","to":"B","relationType":"r"}\n'
            b'{"type":"x","v":1}\n'
            b'{"type":"entity","name":"A","entityType":"t","observations":[]}\r\n'
            b'\n   \n'
            b'{"type":"entity","name":"B","entityType":"t","observations":["o"]}')
    graph = ms.parse_graph_bytes(data)
    assert [e.name for e in graph.entities] == ["A", "B"]
    assert graph.unreadable == []
    assert ms.serialise_graph(graph) == (
        '{"type":"entity","name":"A","entityType":"t","observations":[]}\n'
        '{"type":"entity","name":"B","entityType":"t","observations":["o"]}\n'
        '{"type":"relation","from":"A","to":"B","relationType":"r"}\n'
        '{"type":"x","v":1}')


# ───────────────────────────────────────────────────────────── reads never write

def test_reads_on_a_missing_file_create_nothing(tmp_path):
    folder = tmp_path / "data"
    path = folder / "memory.jsonl"
    mem = make_memory(path)
    text = ok(mem.call_tool("read_graph", {}))
    assert text.startswith("0 entities, 0 relations, 0 facts")
    ok(mem.call_tool("search_nodes", {"query": "anything"}))
    ok(mem.call_tool("open_nodes", {"names": ["Nobody"]}))
    mem.call_tool("recall", {"query": "anything at all"})
    ok(mem.call_tool("archived_observations", {"entityName": "Nobody"}))
    # Writes that change nothing do not create the file either.
    ok(mem.call_tool("delete_entities", {"entityNames": ["Nobody"]}))
    ok(mem.call_tool("delete_relations", {"relations": [{"from": "a", "to": "b", "relationType": "c"}]}))
    assert not path.exists()
    names = {p.name for p in folder.iterdir()} if folder.exists() else set()
    assert not names & {"memory.jsonl", "memory.jsonl.lock", "memory.jsonl.unreadable", "backups", "archive"}, names
    assert not [n for n in names if n.endswith(".tmp")], names


def test_reads_of_an_existing_file_leave_it_byte_identical(tmp_path):
    path = tmp_path / "memory.jsonl"
    original = write_graph(path, [{"type": "entity", "name": "A", "entityType": "t", "observations": ["alpha fact"]},
                                  {"type": "relation", "from": "A", "to": "A", "relationType": "self"}]) + b"\n"
    path.write_bytes(original)  # a trailing newline (as other tools write) is not "fixed" by a read
    old = time.time() - 100
    os.utime(path, (old, old))
    mtime = path.stat().st_mtime_ns
    mem = make_memory(path)
    for name, args in [("read_graph", {}), ("search_nodes", {"query": "alpha"}), ("open_nodes", {"names": ["A"]}),
                       ("recall", {"query": "alpha"}), ("archived_observations", {"entityName": "A"})]:
        ok(mem.call_tool(name, args))
    assert path.read_bytes() == original
    assert path.stat().st_mtime_ns == mtime
    assert not (tmp_path / "backups").exists()


# ───────────────────────────────────────────────────────────── archive file names

HOSTILE_NAMES = [
    "Alice", "alice", "ALICE", "a/b", "a\\b", "/etc/passwd", "../../etc/passwd", "..", ".", "...", ".hidden",
    "name.with.dots", "CON", "con", "Con", "con.txt", "NUL", "nul", "aux", "prn.log", "com1", "COM9", "lpt1",
    "lpt9.md", "", " ", "  ", "_", "__", "~", "-", "\t", "\n", "a b", "Ünïcødé", "日本語の名前", "😀", "👩‍💻 dev",
    "a\x00b", "semi;colon", "q?*:|<>\"", "trailing.", "trailing ", "x" * 179, "x" * 180, "x" * 181,
    "_41lice", "_5f", "%2e%2e", "a~b", "lone \ud800 surrogate",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=lambda n: repr(n)[:40])
def test_entity_file_names_are_safe_and_round_trip(name):
    stem = ms.encode_entity_filename(name)
    assert stem and set(stem) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_~"), stem
    assert stem == stem.lower()  # case-insensitive disks cannot merge two names
    assert len((stem + ".md").encode()) <= 255
    assert not stem.startswith(".") and stem not in (".", "..")
    base = stem.split(".")[0].rstrip(" .")
    assert base.lower() not in ms.WINDOWS_RESERVED
    if "~" not in stem:
        assert ms.decode_entity_filename(stem) == name


def test_distinct_names_never_share_an_archive_file():
    names = HOSTILE_NAMES + ["y" * 1000, "y" * 1001, "y" * 999 + "z", "😀" * 100, "😀" * 101, "é" * 300]
    stems = [ms.encode_entity_filename(n).lower() for n in names]
    assert len(set(stems)) == len(set(names))
    assert ms.encode_entity_filename("Alice").lower() != ms.encode_entity_filename("alice").lower()


@pytest.mark.parametrize("name", ["z" * 1000, "😀" * 200, "é" * 500, "../" * 300, "Ä/" * 250])
def test_very_long_names_stay_under_255_bytes(name):
    stem = ms.encode_entity_filename(name)
    assert len((stem + ".md").encode()) < 255
    assert ms.decode_entity_filename(stem) is None  # hashed: the heading inside the file has the name


def test_decode_of_stems_it_never_produced_does_not_raise():
    """Files a person drops into archive/ (my_notes.md, x_zz.md) must not crash listing the archive."""
    for stem in ["my_notes", "x_zz", "_ff", "_", "README", "notes_", "_4", "a_e6"]:
        try:
            result = ms.decode_entity_filename(stem)
        except Exception as err:  # noqa: BLE001
            pytest.fail(f"decode_entity_filename({stem!r}) raised {err!r}")
        assert result is None or isinstance(result, str)


def test_archive_entity_name_of_a_foreign_file_does_not_raise(tmp_path):
    foreign = tmp_path / "my_notes.md"
    foreign.write_text("just notes\n")
    try:
        name = ms.archive_entity_name(foreign)
    except Exception as err:  # noqa: BLE001
        pytest.fail(f"archive_entity_name raised {err!r}")
    assert name is None, f"a file graphmem never wrote names no entity, got {name!r}"
    own = tmp_path / (ms.encode_entity_filename("Alice") + ".md")
    own.write_text('<!-- graphmem archive; entity: "Alice" -->\n')
    assert ms.archive_entity_name(own) == "Alice"


@pytest.mark.parametrize("name", ["../x", "../../etc/passwd", "a/b", ".", "..", "CON", "con.txt", "NUL",
                                  "Alice", "alice", "😀 emoji", "x" * 200, "_"],
                         ids=lambda n: repr(n)[:30])
def test_overflow_archive_lands_inside_archive_folder(tmp_path, name):
    path = tmp_path / "g" / "memory.jsonl"
    mem = make_memory(path, MEMORY_OBS_MAX="1")
    ok(mem.call_tool("create_entities", {"entities": [{"name": name, "entityType": "t",
                                                       "observations": ["2024-01-01: first event alpha"]}]}))
    text = ok(mem.call_tool("add_observations", {"observations": [{"entityName": name,
                                                                    "contents": ["2024-02-01: second event beta"]}]}))
    assert "archived" in text
    archive = tmp_path / "g" / "archive"
    files = [p for p in archive.iterdir()]
    assert len(files) == 1, files
    assert files[0].resolve().parent == archive.resolve()
    assert files[0] == mem.store.archive_path(name)
    assert ms.archive_entity_name(files[0]) == name
    assert files[0].suffix == ".md"
    # nothing escaped the graph folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]
    listing = ok(mem.call_tool("archived_observations", {"entityName": name}))
    assert "2024-01-01: first event alpha" in listing


def test_alice_and_alice_lowercase_keep_separate_archives(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path, MEMORY_OBS_MAX="1")
    for name in ("Alice", "alice"):
        ok(mem.call_tool("create_entities", {"entities": [{"name": name, "entityType": "p",
                                                           "observations": [f"2024-01-01: {name} {fact(name, 1)}"]}]}))
        ok(mem.call_tool("add_observations", {"observations": [{"entityName": name,
                                                                "contents": [f"2024-02-01: {fact(name, 2)}"]}]}))
    files = sorted(p.name.lower() for p in (tmp_path / "archive").iterdir())
    assert len(files) == 2 and len(set(files)) == 2
    assert fact("Alice", 1) in ok(mem.call_tool("archived_observations", {"entityName": "Alice"}))
    assert fact("Alice", 1) not in ok(mem.call_tool("archived_observations", {"entityName": "alice"}))


# ───────────────────────────────────────────────────────────── cap overflow, list, restore, rename

def test_cap_overflow_archives_oldest_dated_facts_never_undated(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path, MEMORY_OBS_MAX="4")
    u1, u2 = "is the billing service", "owned by team orange"
    d1, d2, d3, d4 = ("2024-01-05: migrated queue storage", "2024-03-10: rotated signing certificates",
                      "2024-06-20: upgraded python runtime", "2024-02-02: enabled request tracing")
    ok(mem.call_tool("create_entities", {"entities": [{"name": "Billing", "entityType": "service",
                                                       "observations": [u1, d2, u2, d3]}]}))
    assert not (tmp_path / "archive").exists()  # at the cap, nothing moves
    text = ok(mem.call_tool("add_observations", {"observations": [{"entityName": "Billing", "contents": [d4]}]}))
    assert "1 oldest dated archived" in text
    # Over the cap by one: the oldest DATED fact by date (d2) goes; undated u1 (older by position) stays.
    assert entity_obs(path.read_bytes(), "Billing") == [u1, u2, d3, d4]
    archive_file = mem.store.archive_path("Billing")
    assert archive_file.parent == tmp_path / "archive"
    assert d2 in archive_file.read_text(encoding="utf-8")

    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "Billing", "contents": [d1]}]}))
    # The new fact is kept even though its date is oldest; d4 (older than d3) made room.
    assert entity_obs(path.read_bytes(), "Billing") == [u1, u2, d3, d1]
    assert [f.text for f in mem.store.read_archive("Billing")] == [d2, d4]

    listing = ok(mem.call_tool("archived_observations", {"entityName": "Billing"}))
    assert "2 of 2 archived facts" in listing and d2 in listing and d4 in listing
    assert "(2 archived)" in ok(mem.call_tool("open_nodes", {"names": ["Billing"]}))
    filtered = ok(mem.call_tool("archived_observations", {"entityName": "Billing", "query": "certificates"}))
    assert d2 in filtered and d4 not in filtered

    text = ok(mem.call_tool("archived_observations", {"entityName": "Billing", "restore": [d2]}))
    assert "Restored 1" in text
    # Restoring went over the cap: the oldest other dated fact (d1) made room, never the restored one.
    assert entity_obs(path.read_bytes(), "Billing") == [u1, u2, d3, d2]
    assert sorted(f.text for f in mem.store.read_archive("Billing")) == sorted([d4, d1])

    text, is_error = mem.call_tool("archived_observations", {"entityName": "Billing", "restore": ["never archived"]})
    assert is_error and "not in the archive" in text


def test_undated_facts_are_never_archived_even_far_over_cap(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path, MEMORY_OBS_MAX="2")
    facts = [fact("undated", i) for i in range(6)]
    ok(mem.call_tool("create_entities", {"entities": [{"name": "U", "entityType": "t", "observations": facts[:2]}]}))
    for f in facts[2:]:
        text = ok(mem.call_tool("add_observations", {"observations": [{"entityName": "U", "contents": [f]}]}))
        assert "over cap" in text
    assert entity_obs(path.read_bytes(), "U") == facts
    assert not (tmp_path / "archive").exists()


def test_rename_keeps_facts_relations_and_archive(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path, MEMORY_OBS_MAX="2")
    ok(mem.call_tool("create_entities", {"entities": [
        {"name": "Old/Name", "entityType": "service", "observations": ["2023-01-01: launched beta program",
                                                                     "runs in frankfurt"]},
        {"name": "Other", "entityType": "team", "observations": []}]}))
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "Old/Name",
                                                            "contents": ["2024-05-05: moved to kubernetes"]}]}))
    ok(mem.call_tool("create_relations", {"relations": [{"from": "Other", "to": "Old/Name", "relationType": "owns"},
                                                        {"from": "Old/Name", "to": "Other", "relationType": "pages"},
                                                        {"from": "Old/Name", "to": "Old/Name", "relationType": "self"}]}))
    old_archive = mem.store.archive_path("Old/Name")
    assert old_archive.exists()

    text = ok(mem.call_tool("rename_entity", {"name": "Old/Name", "newName": "New Name ü"}))
    assert "Renamed" in text
    objs = strict_lines(path.read_bytes())
    names = [o["name"] for o in objs if o["type"] == "entity"]
    assert "Old/Name" not in names and "New Name ü" in names
    assert entity_obs(path.read_bytes(), "New Name ü") == ["runs in frankfurt", "2024-05-05: moved to kubernetes"]
    rels = {(o["from"], o["to"], o["relationType"]) for o in objs if o["type"] == "relation"}
    assert rels == {("Other", "New Name ü", "owns"), ("New Name ü", "Other", "pages"),
                    ("New Name ü", "New Name ü", "self")}
    assert not old_archive.exists()
    new_archive = mem.store.archive_path("New Name ü")
    assert new_archive.exists() and ms.archive_entity_name(new_archive) == "New Name ü"
    assert "2023-01-01: launched beta program" in ok(mem.call_tool("archived_observations", {"entityName": "New Name ü"}))
    assert "No archived facts" in ok(mem.call_tool("archived_observations", {"entityName": "Old/Name"}))

    text, is_error = mem.call_tool("rename_entity", {"name": "New Name ü", "newName": "Other"})
    assert is_error and "already exists" in text


def test_archived_fact_with_a_lone_surrogate_lists_and_restores(tmp_path):
    """The reference stores lone surrogates (as \\ud800); archiving such a fact must not break the archive."""
    path = tmp_path / "memory.jsonl"
    odd = "2020-01-01: lone \ud800 surrogate here"
    path.write_text('{"type":"entity","name":"S","entityType":"t","observations":["2020-01-01: lone \\ud800 surrogate here"]}',
                    encoding="utf-8")
    mem = make_memory(path, MEMORY_OBS_MAX="1")
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "S", "contents": ["2021-06-01: newer event"]}]}))
    assert entity_obs(path.read_bytes(), "S") == ["2021-06-01: newer event"]
    listing = ok(mem.call_tool("archived_observations", {"entityName": "S"}))
    assert "lone" in listing
    assert "(1 archived)" in ok(mem.call_tool("open_nodes", {"names": ["S"]}))
    ok(mem.call_tool("archived_observations", {"entityName": "S", "restore": [odd]}))
    assert odd in entity_obs(path.read_bytes(), "S")


@pytest.mark.parametrize("odd", [
    "2024-01-01: carriage\rreturn inside",
    "2024-01-01: windows\r\nline end",
    "2024-01-01: two\nlines\n- that look like\n## a heading",
    "2024-01-01:   leading and trailing spaces  ",
    "2024-01-01: tab\tand U+2028\u2028and U+0085\x85 end",
], ids=["cr", "crlf", "markdown-ish", "spaces", "separators"])
def test_archived_fact_text_round_trips_exactly(tmp_path, odd):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path, MEMORY_OBS_MAX="1")
    ok(mem.call_tool("create_entities", {"entities": [{"name": "R", "entityType": "t", "observations": [odd]}]}))
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": "R", "contents": ["2025-01-01: newer fact"]}]}))
    assert [f.text for f in mem.store.read_archive("R")] == [odd]
    ok(mem.call_tool("archived_observations", {"entityName": "R", "restore": [odd]}))
    assert odd in entity_obs(path.read_bytes(), "R")


def test_entity_name_with_newlines_does_not_inject_archived_facts(tmp_path):
    path = tmp_path / "memory.jsonl"
    mem = make_memory(path, MEMORY_OBS_MAX="1")
    name = "Evil\n- injected fact\n## why · when\n- another"
    ok(mem.call_tool("create_entities", {"entities": [{"name": name, "entityType": "t",
                                                       "observations": ["2024-01-01: real old fact"]}]}))
    ok(mem.call_tool("add_observations", {"observations": [{"entityName": name, "contents": ["2025-01-01: newer fact"]}]}))
    assert [f.text for f in mem.store.read_archive(name)] == ["2024-01-01: real old fact"]
    assert ms.archive_entity_name(mem.store.archive_path(name)) == name
    text, is_error = mem.call_tool("archived_observations", {"entityName": name, "restore": ["injected fact"]})
    assert is_error and "not in the archive" in text
    assert entity_obs(path.read_bytes(), name) == ["2025-01-01: newer fact"]


def test_temp_files_of_a_killed_writer_are_cleaned_by_the_next_write(tmp_path):
    import memory_server as ms_
    path = tmp_path / "memory.jsonl"
    mem = ms_.Memory(ms_.Settings.from_env({"MEMORY_FILE_PATH": str(path)}))
    mem.call_tool("create_entities", {"entities": [{"name": "a", "entityType": "t", "observations": ["one"]}]})
    leftover = tmp_path / "memory.jsonl.abc123.tmp"  # what a SIGKILL between write and rename leaves
    leftover.write_text("half a graph")
    mem.call_tool("add_observations", {"observations": [{"entityName": "a", "contents": ["two"]}]})
    assert not leftover.exists()
    assert json.loads(path.read_text())["observations"] == ["one", "two"]


def test_a_byte_order_mark_does_not_make_the_first_line_unreadable(tmp_path):
    import memory_server as ms_
    path = tmp_path / "memory.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"type":"entity","name":"a","entityType":"t","observations":["x"]}')
    mem = ms_.Memory(ms_.Settings.from_env({"MEMORY_FILE_PATH": str(path)}))
    text, _ = mem.call_tool("read_graph", {})
    assert "a (1)" in text and "unreadable" not in text
    mem.call_tool("add_observations", {"observations": [{"entityName": "a", "contents": ["y"]}]})
    assert path.read_bytes().startswith(b'{"type":"entity"') and not (tmp_path / "memory.jsonl.unreadable").exists()


def test_a_refused_change_leaves_no_trace_in_the_running_server(tmp_path):
    """Writes share unchanged entities with the cache: a change that fails half-way must be rolled back in memory."""
    import memory_server as ms_
    path = tmp_path / "memory.jsonl"
    mem = ms_.Memory(ms_.Settings.from_env({"MEMORY_FILE_PATH": str(path)}))
    mem.call_tool("create_entities", {"entities": [{"name": "svc", "entityType": "t", "observations": ["listens on 9000", "owned by ops"]}]})
    mem.call_tool("create_relations", {"relations": [{"from": "svc", "to": "svc", "relationType": "calls"}]})
    before = path.read_bytes()
    try:
        mem.edit_fact("svc", "listens on 9000", "x" * 400)  # removes the old fact, then refuses the new one
    except ms_.ToolError as err:
        assert "refused" in str(err)
    else:
        raise AssertionError("edit should be refused")
    assert path.read_bytes() == before
    text, _ = mem.call_tool("open_nodes", {"names": ["svc"]})
    assert "listens on 9000" in text and "owned by ops" in text
    mem.call_tool("add_observations", {"observations": [{"entityName": "svc", "contents": ["new fact"]}]})
    assert json.loads(path.read_text().split("\n")[0])["observations"] == ["listens on 9000", "owned by ops", "new fact"]


def test_two_graphs_in_one_folder_keep_separate_archives(tmp_path):
    import memory_server as ms_
    mems = [ms_.Memory(ms_.Settings.from_env({"MEMORY_FILE_PATH": str(tmp_path / name), "MEMORY_OBS_MAX": "1"}))
            for name in ("memory.jsonl", "work.jsonl")]
    for i, mem in enumerate(mems):
        mem.call_tool("create_entities", {"entities": [{"name": "svc", "entityType": "t",
                                                        "observations": [f"2026-01-01: graph {i} old"]}]})
        mem.call_tool("add_observations", {"observations": [{"entityName": "svc", "contents": [f"2026-02-01: graph {i} new"]}]})
    assert mems[0].store.archive_path("svc").parent.name == "archive"
    assert mems[1].store.archive_path("svc").parent.name == "archive-work"
    assert [f.text for f in mems[0].store.read_archive("svc")] == ["2026-01-01: graph 0 old"]
    assert [f.text for f in mems[1].store.read_archive("svc")] == ["2026-01-01: graph 1 old"]


def test_calls_keep_the_collector_off_the_graph_but_cyclic_garbage_is_still_swept(tmp_path, monkeypatch):
    """After a call of the MCP loop, what is alive is frozen (the collector no longer walks the big graph on every call); a
    full sweep every HEAP_SWEEP_EVERY calls still frees cyclic garbage frozen in between."""
    import gc
    import weakref
    import memory_server as ms
    from conftest import make_memory
    mem = make_memory(tmp_path, [("Api", "service", ["runs on port 8080"])])
    server = ms.McpServer(mem.settings)  # the MCP loop manages the heap around each call
    server.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})

    def call(_mem, tool, args):
        answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": {"name": tool, "arguments": args}})
        assert not answer["result"]["isError"], answer
    monkeypatch.setattr(ms, "HEAP_SWEEP_EVERY", 4)
    monkeypatch.setattr(ms, "_calls_since_sweep", 0)

    class Node:
        pass
    gc.disable()  # no collection may take the cycle before the first call freezes it
    cycle = Node()
    cycle.me = cycle
    gone = weakref.ref(cycle)
    del cycle
    try:
        call(mem, "read_graph", {})
        gc.enable()
        assert gc.get_freeze_count() > 0
        for _ in range(2):
            call(mem, "search_nodes", {"query": "api"})
        assert gone() is not None  # frozen: not collected yet
        call(mem, "open_nodes", {"names": ["Api"]})  # the 4th call sweeps
        assert gone() is None
    finally:
        gc.enable()
        gc.unfreeze()
