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

        memory = ms.Memory(settings, client="bench")  # a fresh server: cold fingerprint cache
        names = [e["name"] for e in entities]
        anchors = memory.anchors

        def answer(tool: str, arguments: dict) -> tuple[float, float, int, int]:
            before = anchors.hash_count
            first, _ = timed(lambda: memory.call_tool(tool, arguments))
            first_hashes = anchors.hash_count - before
            warm = []
            for _ in range(args.repeat):
                ms_, _ = timed(lambda: memory.call_tool(tool, arguments))
                warm.append(ms_)
            return first, statistics.median(warm), first_hashes, anchors.hash_count - before - first_hashes

        open_first, open_warm, open_h1, open_h2 = answer("open_nodes", {"names": names})
        recall_first, recall_warm, recall_h1, recall_h2 = answer("recall", {"query": "relied on here fact"})
        stale = sum(1 for e in entities if anchors.is_stale(e["name"], e["observations"][0]))

    print(f"project root: {root}")
    print(f"anchored facts: {stored} of {len(symbols)} written ({files} files); write error: {is_error}")
    print(f"write: {write_ms:.0f} ms for all facts, {write_hashes} file parses/hashes")
    print(f"open_nodes over {len(names)} entities: first {open_first:.1f} ms ({open_h1} parses/hashes), "
          f"warm median {open_warm:.1f} ms ({open_h2} parses/hashes over {args.repeat} answers)")
    print(f"recall over all facts: first {recall_first:.1f} ms ({recall_h1} parses/hashes), "
          f"warm median {recall_warm:.1f} ms ({recall_h2} parses/hashes over {args.repeat} answers)")
    print(f"hash_count total on the reading server: {anchors.hash_count}; racy re-reads: {anchors.racy_reads}; "
          f"stale or gone: {stale}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
