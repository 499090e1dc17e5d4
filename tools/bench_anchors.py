#!/usr/bin/env python3
"""Code-anchor benchmark: answer latency over many facts anchored to a large project.

    python tools/bench_anchors.py [--root DIR] [--facts N] [--seed S] [--repeat R]

Default project: the standard library's source tree (read-only; nothing is written there).
Anchors N facts to random Python functions and classes of it (deterministic seed), one fact per
entity, in a temporary memory file. Then, on a fresh server (cold fingerprint cache, as after a
restart), times the first and the warm (median of R) answers of open_nodes over every anchored
entity and of recall over all the facts, with the number of file parses/hashes each needed.
Prints figures only.
"""
from __future__ import annotations

import argparse
import ast
import os
import random
import statistics
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import memory_server as ms  # noqa: E402


def candidate_files(root: Path) -> list[str]:
    """Python files the way the anchor checker walks them (hidden and vendored folders skipped)."""
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ms.ANCHOR_SKIP_DIRS)
        rel = os.path.relpath(folder, root).replace(os.sep, "/")
        out += [(n if rel == "." else f"{rel}/{n}") for n in sorted(names) if n.endswith(".py")]
    return out


def pick_symbols(root: Path, count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    files = candidate_files(root)
    rng.shuffle(files)
    picked: list[tuple[str, str]] = []
    for rel in files:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                symbols = ms.python_symbols(ast.parse((root / rel).read_bytes()))
        except (SyntaxError, ValueError, RecursionError, OSError):
            continue
        names = sorted(n for n in symbols if n.count(".") <= 1 and not n.split(".")[-1].isupper()
                       and not n.split(".")[-1].startswith("__"))
        for name in rng.sample(names, min(3, len(names))):
            picked.append((rel, name))
        if len(picked) >= count:
            break
    return picked[:count]


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1000.0, result


def measure(memory: "ms.Memory", tool: str, arguments: dict, repeat: int) -> tuple[float, float, int, int]:
    """(first ms, warm median ms, hash_count during the first, hash_count during the warm ones)."""
    before = memory.anchors.hash_count
    first, _ = timed(lambda: memory.call_tool(tool, arguments))
    first_hashes = memory.anchors.hash_count - before
    warm = [timed(lambda: memory.call_tool(tool, arguments))[0] for _ in range(repeat)]
    return first, statistics.median(warm), first_hashes, memory.anchors.hash_count - before - first_hashes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=sysconfig.get_paths()["stdlib"])
    parser.add_argument("--facts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(args.root).resolve()
    symbols = pick_symbols(root, args.facts, args.seed)
    files = len({rel for rel, _ in symbols})
    with tempfile.TemporaryDirectory(prefix="graphmem-anchors-") as tmp:
        env = {"MEMORY_FILE_PATH": str(Path(tmp) / "memory.jsonl"), "MEMORY_PROJECT_ROOT": str(root),
               "MEMORY_OBS_MAX": "100000"}
        settings = ms.Settings.from_env(env)
        writer = ms.Memory(settings, client="bench")
        entities = [{"name": f"code {i:04d} {name}", "entityType": "code",
                     "observations": [f"{name} in {rel} is relied on here, fact {i} [@{rel}::{name}]"]}
                    for i, (rel, name) in enumerate(symbols)]
        write_ms, (out, is_error) = timed(lambda: writer.call_tool("create_entities", {"entities": entities}))
        stored = writer.meta.conn.execute("SELECT count(*) FROM anchors").fetchone()[0]
        write_hashes = writer.anchors.hash_count
        del writer

        names = [e["name"] for e in entities]
        scenarios = [
            ("restart, files unchanged since recorded", "keep"),
            ("restart, every file touched (stamps unknown: all parsed)", "forget"),
            ("anchors off (baseline without checks)", "off"),
        ]
        results = []
        for label, mode in scenarios:
            memory = ms.Memory(settings, client="bench")  # a fresh server: cold fingerprint cache
            if mode == "forget":
                with memory.meta.write() as conn:
                    conn.execute("UPDATE anchors SET mtime_ns=0, size=-1")
            if mode == "off":
                off = ms.AnchorChecker.__new__(ms.AnchorChecker)
                off.hash_count = 0
                off.note = lambda e, t: ""
                off.is_stale = lambda e, t: False
                off.rank_penalty = lambda e, t: 1.0
                memory.anchors = off
            rows = [(tool, *measure(memory, tool, arguments, args.repeat))
                    for tool, arguments in (("open_nodes", {"names": names}),
                                            ("recall", {"query": "relied on here fact"}))]
            stale = 0 if mode == "off" else sum(
                1 for e in entities if memory.anchors.is_stale(e["name"], e["observations"][0]))
            results.append((label, rows, stale))
            del memory

    print(f"project root: {root}")
    print(f"anchored facts: {stored} of {len(symbols)} written ({files} files); write error: {is_error}")
    print(f"write: {write_ms:.0f} ms for all facts, {write_hashes} file parses/hashes")
    for label, rows, stale in results:
        print(f"{label}: stale or gone {stale}")
        for tool, first, warm, h1, h2 in rows:
            print(f"  {tool:<10} first {first:8.1f} ms ({h1} parses/hashes)   "
                  f"warm median {warm:7.1f} ms ({h2} parses/hashes in {args.repeat} answers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
