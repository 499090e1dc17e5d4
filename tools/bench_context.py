#!/usr/bin/env python3
"""How long `graphmem --context` takes from a cold process, as a session hook runs it.

    python tools/bench_context.py [--facts 10000] [--runs 7]

Prints figures only (never asserts). A generated graph of FACTS facts (15 a entity, a few pinned, a rule
entity, some recent changes in the history) lives in a temporary folder. The server module is compiled
once first (an installed command has its bytecode; a checkout run as `python3 memory_server.py` compiles
the whole file on every start, which this also reports). Baseline in the same run: a bare `python3 -c pass`.
"""
from __future__ import annotations

import argparse
import json
import os
import py_compile
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def median_seconds(command: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--facts", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="graphmem-bench-context-") as tmp:
        work = Path(tmp)
        server = work / "memory_server.py"
        shutil.copy(REPO / "memory_server.py", server)
        for data in REPO.glob("*.gz"):
            shutil.copy(data, work / data.name)
        py_compile.compile(str(server), cfile=str(work / "__pycache__" / f"memory_server.{sys.implementation.cache_tag}.pyc"))
        graph = work / "memory.jsonl"
        lines = [json.dumps({"type": "entity", "name": "RULE deploys", "entityType": "rule",
                             "observations": ["deploys only from main, after CI is green"]})]
        lines += [json.dumps({"type": "entity", "name": f"svc-{i}", "entityType": "service",
                              "observations": [f"fact {j} about service {i} and its queue {j % 7}" for j in range(15)]})
                  for i in range(args.facts // 15)]
        graph.write_text("\n".join(lines), encoding="utf-8")
        env = {**os.environ, "MEMORY_FILE_PATH": str(graph), "PYTHONDONTWRITEBYTECODE": "1"}
        sys.path.insert(0, str(work))
        import memory_server as ms  # the copy: a little real use (pins, a write) for the history
        mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": str(graph)}), client="bench")
        mem.call_tool("mark_fact", {"entityName": "svc-1", "observation": "fact 0 about service 1 and its queue 0",
                                    "action": "pin"})
        mem.call_tool("add_observations", {"observations": [{"entityName": "svc-2", "contents": ["2026-12-01: moved"]}]})
        subprocess.run([sys.executable, "-c", "import memory_server as m, sys; sys.exit(m.main(['--context']))"],
                       cwd=work, env=env, capture_output=True, check=True)  # the first briefing records itself
        bare = median_seconds([sys.executable, "-c", "pass"], env, args.runs)
        installed = median_seconds([sys.executable, "-c", "import memory_server as m, sys; sys.exit(m.main(['--context']))"],
                                   {**env, "PYTHONPATH": str(work)}, args.runs)
        script = median_seconds([sys.executable, str(server), "--context"], env, args.runs)
        facts = args.facts // 15 * 15 + 1  # the services' facts and the rule, as written
        print(f"--context on {facts:,} facts, median of {args.runs} cold processes ({os.cpu_count()} cores):")
        print(f"  installed (bytecode compiled): {installed * 1000:.0f} ms")
        print(f"  python3 memory_server.py (compiles the file each start): {script * 1000:.0f} ms")
        print(f"  baseline, python3 -c pass: {bare * 1000:.0f} ms; the briefing's own cost: {(installed - bare) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
