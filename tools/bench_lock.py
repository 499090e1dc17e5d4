#!/usr/bin/env python3
"""How long graphmem holds the writer lock: the calls that used to hold it longest, and an ordinary write.

    python tools/bench_lock.py [--facts 50000] [--probes 3000] [--baseline REF] [--quick]

Prints figures only (never asserts). Every graph it builds lives in a temporary folder.
Measured, per case, in a fresh process: the wall time of the call and the longest time the
writer lock (memory.jsonl.lock) was held during it, found by timing GraphStore.lock.

Cases:
  compact        --compact on FACTS facts (15 a entity, a cap of 10 so there is a plan)
                 with PROBES guardrail probes
  compact-dry    the same with --dry-run
  relations-300  create_relations with 300 misspelled names on a 5,000-entity graph
  add-2800       one add_observations of 2,800 facts at a 10k-fact graph (MEMORY_OBS_MAX=5000)
  write-10k      one add_observations of one fact at a 10k-fact graph (median of 20)

With --baseline REF (a git ref, e.g. HEAD~5), the same cases run against that commit's
memory_server.py in the same run, side by side (held and wall time of each).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS = ("deploy build cache queue worker api gateway schema index token billing invoice search "
         "alert metric release branch migration backup replica shard tenant region cluster").split()


def make_graph(path: Path, entities: int, facts_each: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    names = [f"svc-{rng.choice(WORDS)}-{i}" for i in range(entities)]
    lines = []
    for name in names:
        facts = [f"2026-0{1 + k % 9}-{10 + k % 18}: {' '.join(rng.sample(WORDS, 6))} #{k}" for k in range(facts_each)]
        lines.append(json.dumps({"type": "entity", "name": name, "entityType": "service", "observations": facts}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return names


CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import memory_server as ms
case, path = sys.argv[2], sys.argv[3]
extra = json.loads(open(sys.argv[4], encoding="utf-8").read())
held = []
real_lock = ms.GraphStore.lock
import contextlib
@contextlib.contextmanager
def timed_lock(self, *a, **k):
    with real_lock(self, *a, **k) as token:
        t = time.perf_counter()
        try:
            yield token
        finally:
            held.append(time.perf_counter() - t)
ms.GraphStore.lock = timed_lock
env = {"MEMORY_FILE_PATH": path, **extra.get("env", {})}
settings = ms.Settings.from_env(env)
mem = ms.Memory(settings, client="bench")
(getattr(mem, "fresh_graph", None) or mem.graph)()
if case.startswith("compact"):
    for i, (q, e) in enumerate(extra["probes"]):
        mem.meta.add_probe(q, e, "", "manual")
    t = time.perf_counter()
    text, code = ms.compact(mem, case == "compact-dry")
    wall = time.perf_counter() - t
elif case == "write-10k":
    names = extra["names"]
    times = []
    for i in range(20):
        t = time.perf_counter()
        mem.call_tool("add_observations", {"observations": [{"entityName": names[i], "contents": [f"bench fact {i} zzz"]}]})
        times.append(time.perf_counter() - t)
    wall = statistics.median(times)
    held = [statistics.median(held)] if held else []
else:
    t = time.perf_counter()
    text, err = mem.call_tool(extra["tool"], extra["args"])
    wall = time.perf_counter() - t
print(json.dumps({"wall": wall, "held": max(held) if held else 0.0}))
"""


def run_case(server_dir: Path, case: str, path: Path, extra: dict) -> dict:
    spec = path.with_suffix(".json")
    spec.write_text(json.dumps(extra), encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", CHILD, str(server_dir), case, str(path), str(spec)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def cases(work: Path, facts: int, probes: int) -> list[tuple[str, Path, dict]]:
    rng = random.Random(3)
    big = work / "big.jsonl"
    names = make_graph(big, facts // 15, 15)
    probe_list = [(f"{rng.choice(WORDS)} {rng.choice(WORDS)}", rng.choice(names)) for _ in range(probes)]
    five = work / "five.jsonl"
    five_names = make_graph(five, 5000, 2)
    typos = [n[:-2] + n[-1] + n[-2] + "x" for n in rng.sample(five_names, 300)]
    rels = [{"from": t, "to": five_names[0], "relationType": "calls"} for t in typos]
    ten = work / "ten.jsonl"
    ten_names = make_graph(ten, 1000, 10)
    many = [f"2026-03-{1 + i % 28:02d}: {' '.join(rng.sample(WORDS, 5))} item {i}" for i in range(2800)]
    return [
        ("compact", big, {"env": {"MEMORY_OBS_MAX": "10"}, "probes": probe_list}),
        ("compact-dry", big, {"env": {"MEMORY_OBS_MAX": "10"}, "probes": probe_list}),
        ("relations-300", five, {"tool": "create_relations", "args": {"relations": rels}}),
        ("add-2800", ten, {"env": {"MEMORY_OBS_MAX": "5000"}, "tool": "add_observations",
                           "args": {"observations": [{"entityName": ten_names[0], "contents": many}]}}),
        ("write-10k", ten, {"names": ten_names}),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--facts", type=int, default=50_000)
    ap.add_argument("--probes", type=int, default=3000)
    ap.add_argument("--baseline", metavar="REF", help="git ref whose memory_server.py to measure in the same run")
    ap.add_argument("--quick", action="store_true", help="10k facts, 500 probes")
    ap.add_argument("--only", help="comma-separated case names")
    args = ap.parse_args()
    if args.quick:
        args.facts, args.probes = 10_000, 500
    with tempfile.TemporaryDirectory(prefix="graphmem-bench-lock-") as tmp:
        work = Path(tmp)
        servers = [("now", REPO)]
        if args.baseline:
            base = work / "baseline"
            base.mkdir()
            source = subprocess.run(["git", "-C", str(REPO), "show", f"{args.baseline}:memory_server.py"],
                                    capture_output=True, check=True).stdout
            (base / "memory_server.py").write_bytes(source)
            servers.append((args.baseline, base))
        print(f"lock hold times; {args.facts:,} facts and {args.probes:,} probes for compact; "
              f"{os.cpu_count()} cores")
        print(f"{'case':15} " + "  ".join(f"{label + ' held':>14} {label + ' wall':>14}" for label, _ in servers))
        for case, source_path, extra in cases(work, args.facts, args.probes):
            if args.only and case not in args.only.split(","):
                continue
            row = []
            for label, server_dir in servers:
                path = work / f"{case}-{label.replace('/', '_')}.jsonl"
                path.write_bytes(source_path.read_bytes())
                r = run_case(server_dir, case, path, extra)
                row.append(f"{'error: ' + r['error'][:40]:>29}" if "error" in r else f"{r['held']:>13.3f}s {r['wall']:>13.3f}s")
            print(f"{case:15} " + "  ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
