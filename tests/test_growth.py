"""Bounded growth of memory.db and backups/ (MetaStore.prune, the per-day ledger, labelled backups).

In process (memory_server.Memory) with the bounds made small, so a few hundred calls cross them; the clock is
moved by replacing memory_server's `time` with a copy whose time() is ours. One test runs the real server over
stdio with a prune that fails.
"""
import random
import sqlite3
import sys
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).absolute().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import memory_server as ms  # noqa: E402
from conftest import StdioServer, call, make_memory  # noqa: E402

DAY = 86400.0
CLIENTS = ("claude-code", "codex", None)


# ---------------------------------------------------------------- helpers
@pytest.fixture
def clock(monkeypatch):
    """memory_server's clock, seconds since the epoch, that a test moves by hand."""
    now = [time.time()]
    fake = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    fake.time = lambda: now[0]
    monkeypatch.setattr(ms, "time", fake)
    return now


@pytest.fixture
def small_bounds(monkeypatch):
    """Bounds a test can cross in a few hundred calls."""
    for name, value in (("PRUNE_EVERY_WRITES", 10), ("HISTORY_MAX_ROWS", 40), ("HISTORY_MIN_ROWS", 8),
                        ("PROBES_AUTO_KEPT", 15), ("PROBES_MANUAL_KEPT", 4)):
        monkeypatch.setattr(ms, name, value)


def rows(mem, table, where="1"):
    return mem.meta.conn.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0]


def use(mem, rng, step):
    """One realistic call: mostly reads (a recall then opening what it showed teaches probes), some writes."""
    entity = f"svc-{rng.randrange(12)}"
    kind = rng.random()
    if kind < 0.35:
        call(mem, "add_observations", {"observations": [{"entityName": entity, "contents": [
            f"2026-01-{1 + step % 28:02d}: change {step} to the {rng.choice(['queue', 'cache', 'deploy'])} setup"]}]})
    elif kind < 0.7:
        call(mem, "recall", {"query": rng.choice(["queue setup", "cache change", "deploy setup"])})
        call(mem, "open_nodes", {"names": [entity]})
    else:
        call(mem, rng.choice(["search_nodes", "recall"]), {"query": rng.choice(["queue", "deploy", "cache"])})


def fresh_memory(tmp_path):
    return make_memory(tmp_path, [(f"svc-{i}", "service", [f"svc-{i} owns the queue and the cache"])
                                  for i in range(12)], MEMORY_OBS_MAX="100000")


def v2_database(path, ledger, history=()):
    """A memory.db as version 2 left it (a ledger row per call), from the schema's first two entries."""
    conn = sqlite3.connect(path)
    for script in ms.SCHEMA[:2]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version=2")
    conn.executemany("INSERT INTO ledger(ts, tool, client, tokens, reference_tokens) VALUES (?,?,?,?,?)", ledger)
    conn.executemany("INSERT INTO history(ts, client, summary, changes) VALUES (?,?,?,?)", history)
    conn.commit()
    conn.close()


def old_report_figures(path):
    """The totals version 2's receipts and report computed from its per-call rows."""
    conn = sqlite3.connect(path)
    figures = {
        "totals": conn.execute("SELECT count(*), sum(tokens), sum(reference_tokens) FROM ledger").fetchone(),
        "series": conn.execute("SELECT date(ts, 'unixepoch') AS day, sum(max(reference_tokens - tokens, 0)) "
                               "FROM ledger GROUP BY day ORDER BY day").fetchall(),
        "per": [conn.execute(f"SELECT {column}, count(*), sum(tokens), sum(reference_tokens) FROM ledger "
                             "GROUP BY 1 ORDER BY sum(reference_tokens) - sum(tokens) DESC").fetchall()
                for column in ("tool", "coalesce(client, '?')")],
    }
    conn.close()
    return figures


# ---------------------------------------------------------------- bounds under use
def test_realistic_use_over_months_keeps_every_table_bounded(tmp_path, clock, small_bounds):
    mem = fresh_memory(tmp_path)
    rng, start = random.Random(3), clock[0]
    days = 150
    steps = 450
    for step in range(steps):
        clock[0] = start + (step * days // steps) * DAY
        mem.client = CLIENTS[step % 3]
        use(mem, rng, step)
        assert rows(mem, "history") <= ms.HISTORY_MAX_ROWS + ms.PRUNE_EVERY_WRITES
        assert rows(mem, "probes") <= ms.PROBES_AUTO_KEPT + ms.PRUNE_EVERY_WRITES
    # the bounds were crossed, not just approached
    assert mem.meta.conn.execute("SELECT max(id) FROM history").fetchone()[0] > 2 * ms.HISTORY_MAX_ROWS
    assert mem.meta.conn.execute("SELECT max(id) FROM probes").fetchone()[0] > 2 * ms.PROBES_AUTO_KEPT
    # one ledger row per day, tool and client at most, and every call counted in it
    assert rows(mem, "ledger_days") <= days * 3 * 3
    assert mem.meta.calls_recorded() == ms.receipts(mem)["calls"] > steps // 2
    oldest = mem.meta.conn.execute("SELECT min(ts) FROM history").fetchone()[0]
    assert oldest >= clock[0] - ms.HISTORY_KEEP_DAYS * DAY - 10 * DAY  # within the age bound (and a prune's lag)


def test_history_past_its_age_goes_but_the_newest_stay_for_undo(tmp_path, clock, small_bounds):
    mem = fresh_memory(tmp_path)
    for step in range(30):
        call(mem, "add_observations", {"observations": [{"entityName": "svc-1", "contents": [f"old fact {step}"]}]})
    clock[0] += (ms.HISTORY_KEEP_DAYS + 1) * DAY
    assert mem.meta.prune()[0] == 30 - ms.HISTORY_MIN_ROWS
    assert rows(mem, "history") == ms.HISTORY_MIN_ROWS
    assert mem.undo() == "Undone: add facts to svc-1."
    assert "old fact 29" not in mem.fresh_graph().get("svc-1").observations
    assert "old fact 28" in mem.fresh_graph().get("svc-1").observations


def test_undo_works_after_pruning_and_walks_back_through_the_newest(tmp_path, small_bounds):
    mem = fresh_memory(tmp_path)
    for step in range(120):  # 12 prunes along the way
        call(mem, "add_observations", {"observations": [{"entityName": "svc-2", "contents": [f"fact number {step}"]}]})
    assert rows(mem, "history") <= ms.HISTORY_MAX_ROWS + ms.PRUNE_EVERY_WRITES
    for step in (119, 118, 117):
        mem.undo()
        assert f"fact number {step}" not in mem.fresh_graph().get("svc-2").observations
    assert "fact number 116" in mem.fresh_graph().get("svc-2").observations


def test_probes_keep_the_newest_learned_and_prefer_manual_ones(tmp_path, small_bounds, monkeypatch):
    monkeypatch.setattr(ms, "PRUNE_EVERY_WRITES", 10**6)  # one prune, by hand, below
    mem = fresh_memory(tmp_path)
    for i in range(ms.PROBES_MANUAL_KEPT):
        mem.meta.add_probe(f"manual {i}", "svc-1", "", "manual")
    for i in range(40):
        mem.meta.add_probe(f"learned {i}", "svc-1", "", "auto")
    assert mem.meta.add_probe("learned 0", "svc-1", "", "auto") is False  # learned again: now the newest
    assert mem.meta.add_probe("learned 1", "svc-1", "", "manual") is False  # a person adds it: now manual
    mem.meta.prune()
    probes = {p[0]: p[3] for p in mem.meta.probes()}
    manual = [q for q, source in probes.items() if source == "manual"]
    assert len(manual) == ms.PROBES_MANUAL_KEPT and "learned 1" in manual and "manual 0" not in manual
    learned = [q for q, source in probes.items() if source == "auto"]
    assert sorted(learned) == sorted(["learned 0"] + [f"learned {i}" for i in range(26, 40)])


def test_prune_runs_on_the_first_write_then_every_nth_not_every_call(tmp_path, small_bounds, monkeypatch):
    mem = fresh_memory(tmp_path)
    pruned = []
    monkeypatch.setattr(ms.MetaStore, "prune", lambda self, now=None: pruned.append(self._writes) or (0, 0))
    for _ in range(25):
        call(mem, "search_nodes", {"query": "queue"})
    assert pruned == [1, 11, 21]


# ---------------------------------------------------------------- the ledger
def test_a_v2_database_migrates_with_the_reports_totals_unchanged(tmp_path):
    rng, now = random.Random(5), time.time()
    ledger = [(now - rng.randrange(40) * DAY - rng.random() * DAY, rng.choice(["read_graph", "recall", "open_nodes"]),
               rng.choice(["claude-code", "codex", None]), rng.randrange(10, 400), rng.randrange(0, 900))
              for _ in range(3000)]  # some calls returned more than the reference would: clamped per call
    v2_database(tmp_path / "memory.db", ledger)
    old = old_report_figures(tmp_path / "memory.db")
    mem = make_memory(tmp_path, [("svc-1", "service", ["a fact"])])
    assert mem.meta.conn.execute("PRAGMA user_version").fetchone()[0] == len(ms.SCHEMA)
    r = ms.receipts(mem)
    assert (r["calls"], r["tokensUsed"], r["tokensReference"]) == old["totals"]
    assert [(d["day"], d["saved"]) for d in r["series"]] == old["series"]
    text = ms.report(mem)
    for per in old["per"]:
        for name, calls, used, ref in per:
            assert f"  {name}: {calls} calls, {used:,} vs {ref:,} tokens" in text
    assert rows(mem, "ledger_days") <= 41 * 3 * 3  # 40 days back from now, a fraction of a day more
    assert mem.meta.conn.execute("SELECT count(*) FROM sqlite_master WHERE name='ledger'").fetchone()[0] == 0


def test_the_ui_version_changes_after_every_call_on_one_days_row(tmp_path):
    mem = fresh_memory(tmp_path)
    seen = {mem.version()}
    for _ in range(5):
        call(mem, "search_nodes", {"query": "queue"})
        seen.add(mem.version())
    assert len(seen) == 6
    assert rows(mem, "ledger_days") == 1


def test_the_first_call_trims_an_old_databases_history(tmp_path):
    old = time.time() - 400 * DAY
    history = [(old + i, "t", f"change {i}", '{"entities": [], "relationsAdded": [], "relationsRemoved": []}')
               for i in range(3000)]
    v2_database(tmp_path / "memory.db", [], history)
    mem = fresh_memory(tmp_path)
    call(mem, "search_nodes", {"query": "queue"})
    assert rows(mem, "history") == ms.HISTORY_MIN_ROWS
    assert [r[3] for r in mem.meta.history(1)] == ["change 2999"]


# ---------------------------------------------------------------- backups
def test_labelled_backups_are_pruned_per_label_like_the_daily_ones(tmp_path):
    facts = [f"2026-01-{d:02d}: event {d}" for d in range(1, 21)]
    mem = make_memory(tmp_path, [("big", "svc", facts)], MEMORY_BACKUPS_KEPT="3")
    backups = tmp_path / "backups"
    backups.mkdir()
    for day in range(1, 8):
        for name in (f"memory-2020-01-0{day}.jsonl", f"memory-2020-01-0{day}-120000-before-compact.jsonl",
                     f"memory-2020-01-0{day}-090000-before-import.jsonl"):
            (backups / name).write_text(name)
    (backups / "notes-2020-01-01-120000-before-compact.txt").write_text("not ours")
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0 and "archived 5 fact(s)" in text
    names = sorted(p.name for p in backups.iterdir())
    compacts = [n for n in names if n.endswith("-before-compact.jsonl")]
    assert len(compacts) == 3 and compacts[:2] == ["memory-2020-01-06-120000-before-compact.jsonl",
                                                   "memory-2020-01-07-120000-before-compact.jsonl"]
    assert [n for n in names if n.endswith("-before-import.jsonl")] == [
        f"memory-2020-01-0{d}-090000-before-import.jsonl" for d in (5, 6, 7)]
    daily = [n for n in names if n.count("-") == 3]
    assert daily[:2] == ["memory-2020-01-06.jsonl", "memory-2020-01-07.jsonl"] and len(daily) == 3  # and today's
    assert "notes-2020-01-01-120000-before-compact.txt" in names


# ---------------------------------------------------------------- a prune that fails
def test_a_failing_prune_is_logged_and_never_fails_a_tool_call(tmp_path):
    """The real server over stdio; memory.db refuses every trim (a trigger another tool left behind)."""
    path = tmp_path / "memory.jsonl"
    history = [(1.0 + i, "t", f"old change {i}", '{"entities": [], "relationsAdded": [], "relationsRemoved": []}')
               for i in range(200)]
    v2_database(tmp_path / "memory.db", [], history)
    conn = sqlite3.connect(tmp_path / "memory.db")
    conn.execute("CREATE TRIGGER keep_all BEFORE DELETE ON history BEGIN SELECT RAISE(ABORT, 'trimming refused'); END")
    conn.commit()
    conn.close()
    server = StdioServer(path)
    try:
        server.initialize()
        text, is_error = server.call("create_entities", {"entities": [{"name": "a", "entityType": "t",
                                                                       "observations": ["fact one"]}]})
        assert not is_error and "a" in text
        text, is_error = server.call("search_nodes", {"query": "fact"})
        assert not is_error and "fact one" in text
    finally:
        server.close()
    assert b"could not trim memory.db (trimming refused)" in b"".join(server.stderr)
    db = sqlite3.connect(tmp_path / "memory.db")
    assert db.execute("SELECT count(*) FROM history").fetchone()[0] == 201  # nothing trimmed, the write recorded
    assert db.execute("SELECT sum(calls) FROM ledger_days").fetchone()[0] == 1
