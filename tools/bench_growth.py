#!/usr/bin/env python3
"""How big memory.db grows: N mixed tool calls spread over D days, now and with an older server.

    python tools/bench_growth.py [--calls 20000] [--days 120] [--baseline REV | --baseline none]

Drives memory_server.Memory in process (the same handlers the stdio server runs) with a fixed random mix of
reads (recall, search_nodes, open_nodes, read_graph, helpful marks that teach probes) and writes (new facts,
entities, relations, deletions) from three clients, on a clock that advances D days over the run. Prints
memory.db's size and row counts after the run, for this working copy and for `--baseline` (a git revision of
memory_server.py, default the last one before the bounds; loaded from `git show`), then what migrating the
baseline's database to this version leaves, and the costs behind the constants (prune, probe re-runs).
Everything lives in a temporary folder. Stdlib only; prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
BASELINE = "4951795"  # the last memory_server.py with a ledger row per call and no pruning
CLIENTS = ("claude-code", "codex", "cursor")
COMMON = ("deploy branch cache queue worker billing invoice login session token refresh schema migration index "
          "replica backup region cluster latency timeout retry webhook payment refund order cart search ranking "
          "feature flag rollout canary alert pager runbook dashboard metric budget release tag changelog api").split()
RARE = [f"{a}{b}{c}" for a in ("ka", "lo", "mi", "nu", "pe", "ro", "si", "tu", "va", "zo")
        for b in ("bel", "dor", "fin", "gar", "hol", "jun", "kes", "lim", "mor", "nat")
        for c in ("a", "e", "i", "o", "u", "an", "en", "is", "or", "us")]  # 1,000 made-up names and terms
MIX = (("recall", 30), ("search_nodes", 20), ("open_nodes", 15), ("read_graph", 2), ("add_observations", 18),
       ("create_entities", 5), ("create_relations", 5), ("mark_fact", 3), ("delete_observations", 2))


class Clock:
    """The time module, with time() moved forward by `offset` seconds: days pass in seconds."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __getattr__(self, name: str):
        return getattr(time, name)

    def time(self) -> float:
        return time.time() + self.offset


def load_server(source: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def baseline_source(rev: str, folder: Path) -> Path | None:
    """memory_server.py as of `rev`, written to folder; None when git cannot show it."""
    try:
        text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:memory_server.py"],
                              capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = folder / "memory_server_baseline.py"
    path.write_bytes(text)
    return path


def phrase(rng: random.Random, n: int) -> str:
    """n words, one in four a common one: a query matches some facts, not all (as in a real project)."""
    return " ".join(rng.choice(COMMON if rng.random() < 0.25 else RARE) for _ in range(n))


def arguments(tool: str, rng: random.Random, names: list[str], day: int, step: int) -> dict:
    """Arguments for one call of `tool`, over entities `names` (which new entities join)."""
    name = rng.choice(names)
    if tool in ("recall", "search_nodes"):
        return {"query": phrase(rng, 2)}
    if tool == "open_nodes":
        return {"names": rng.sample(names, min(2, len(names)))}
    if tool == "read_graph":
        return {}
    if tool == "add_observations":
        dated = f"2026-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}: " if rng.random() < 0.6 else ""
        return {"observations": [{"entityName": name, "contents": [f"{dated}{phrase(rng, 8)} #{step}"]}]}
    if tool == "create_entities":
        names.append(f"svc-{len(names)}")
        return {"entities": [{"name": names[-1], "entityType": rng.choice(("service", "person", "decision")),
                              "observations": [f"{phrase(rng, 8)} #{step}"]}]}
    if tool == "create_relations":
        return {"relations": [{"from": name, "to": rng.choice(names), "relationType": rng.choice(("uses", "owns"))}]}
    return {}  # mark_fact and delete_observations need a fact: chosen from the graph by the caller


def with_a_fact(memory, tool: str, args: dict, rng: random.Random) -> dict:
    """mark_fact (helpful, which teaches a probe) and delete_observations pick a fact the graph holds."""
    entity = rng.choice([e for e in (getattr(memory, "fresh_graph", None) or memory.graph)().entities if e.observations] or [None])
    if entity is None:
        return {}
    text = rng.choice(entity.observations)
    if tool == "mark_fact":
        memory.call_tool("recall", {"query": " ".join(text.split()[:3])})
        return {"entityName": entity.name, "observation": text, "action": "helpful"}
    return {"deletions": [{"entityName": entity.name, "observations": [text]}]}


def drive(ms: ModuleType, folder: Path, calls: int, days: int, seed: int = 7) -> float:
    """Make `calls` mixed tool calls over `days` days; returns the seconds taken."""
    clock, real = Clock(), ms.time
    ms.time = clock
    try:
        settings = ms.Settings.from_env({"MEMORY_FILE_PATH": str(folder / "memory.jsonl")})
        memory = ms.Memory(settings, client=CLIENTS[0])
        rng, names = random.Random(seed), [f"svc-{i}" for i in range(20)]
        memory.call_tool("create_entities", {"entities": [{"name": n, "entityType": "service",
                                                           "observations": [phrase(rng, 8)]} for n in names]})
        tools, weights = zip(*MIX)
        start = time.perf_counter()
        for step in range(calls):
            day = step * days // calls
            clock.offset = (day - days) * 86400.0
            memory.client = CLIENTS[step % len(CLIENTS)]
            tool = rng.choices(tools, weights)[0]
            args = arguments(tool, rng, names, day, step)
            if tool in ("mark_fact", "delete_observations"):
                args = with_a_fact(memory, tool, args, rng)
            if args or tool == "read_graph":
                memory.call_tool(tool, args)
        memory.meta.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        memory.meta.conn.close()
        return time.perf_counter() - start
    finally:
        ms.time = real


def db_figures(db: Path) -> dict:
    """Size (bytes, WAL included) and row counts of a memory.db, any schema version."""
    conn = sqlite3.connect(db)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    history = conn.execute("SELECT coalesce(avg(length(changes)), 0) FROM history").fetchone()[0]
    conn.close()
    size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if not p.name.endswith("-shm"))
    return {"size": size, "rows": rows, "history_row": history}


def show(label: str, figures: dict, seconds: float | None = None) -> None:
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    rows = ", ".join(f"{t} {n:,}" for t, n in figures["rows"].items())
    print(f"{label}: memory.db {figures['size'] / 1e6:.2f} MB{took}; rows: {rows}; "
          f"history row ~{figures['history_row'] / 1e3:.1f} KB")


def migrate(ms: ModuleType, old_folder: Path, folder: Path) -> dict:
    """Copy an older server's graph and memory.db, open it with this server and make one call (the first prune)."""
    shutil.copytree(old_folder, folder)
    memory = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": str(folder / "memory.jsonl")}), client="bench")
    memory.call_tool("search_nodes", {"query": "deploy"})
    memory.meta.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    memory.meta.conn.close()
    return db_figures(folder / "memory.db")


def costs(ms: ModuleType, folder: Path) -> None:
    """What the constants are tuned against: a prune's time, and one probe re-run on the bench's graph."""
    memory = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": str(folder / "memory.jsonl")}), client="bench")
    start = time.perf_counter()
    memory.meta.prune()
    prune_ms = (time.perf_counter() - start) * 1e3
    graph, probes = (getattr(memory, "fresh_graph", None) or memory.graph)(), memory.meta.probes()
    start = time.perf_counter()
    # run_probes takes the Memory since this release (its strength, anchors, flags and embeddings); before, a strength
    ms.run_probes(probes, graph, memory.settings.recall_budget, memory if hasattr(memory, "lifecycle") else memory.strength)
    per_probe = (time.perf_counter() - start) * 1e3 / max(1, len(probes))
    print(f"costs: a prune {prune_ms:.1f} ms; one probe re-run {per_probe:.1f} ms on {graph.fact_count():,} facts "
          f"({len(graph.entities)} entities), so --compact runs {len(probes)} probes twice in "
          f"~{2 * per_probe * len(probes) / 1e3:.1f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--days", type=int, default=120)
    ap.add_argument("--baseline", default=BASELINE, help="git revision of the older server, or 'none'")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="graphmem-growth-") as tmp:
        work = Path(tmp)
        print(f"{args.calls:,} mixed tool calls over {args.days} days, 3 clients")
        ms = load_server(REPO / "memory_server.py", "memory_server")
        seconds = drive(ms, work / "now", args.calls, args.days)
        show("this version", db_figures(work / "now" / "memory.db"), seconds)
        source = None if args.baseline == "none" else baseline_source(args.baseline, work)
        if source is not None:
            old = load_server(source, "memory_server_baseline")
            seconds = drive(old, work / "old", args.calls, args.days)
            show(f"baseline {args.baseline}", db_figures(work / "old" / "memory.db"), seconds)
            show("baseline's db migrated by this version", migrate(ms, work / "old", work / "migrated"))
        elif args.baseline != "none":
            print(f"baseline {args.baseline}: git could not show it; skipped")
        costs(ms, work / "now")
    return 0


if __name__ == "__main__":
    sys.exit(main())
