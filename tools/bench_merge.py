#!/usr/bin/env python3
"""How fast the team merge driver merges two branches of a big team file, and whether anything was lost.

    python tools/bench_merge.py [--facts 10000] [--added 500] [--git]

Prints figures only (never asserts). A generated team file of FACTS facts (15 a entity) is the base; two
branches each add ADDED facts spread over many entities (and one new entity and relation each), and one of
them deletes 20 facts. The driver (`memory_server.py --merge BASE OURS THEIRS`) runs as git would run it,
in a fresh process, timed end to end; with --git the same merge also runs through a real `git merge`.
The baseline is git's own line merge of the same files (`git merge-file`), timed in the same run: it is
fast but stops at conflicts, which are counted.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "memory_server.py"


def entity_line(name: str, facts: list[str]) -> str:
    return json.dumps({"type": "entity", "name": name, "entityType": "service", "observations": facts},
                      ensure_ascii=False, separators=(",", ":"))


def write(path: Path, graph: dict[str, list[str]], relations: list[tuple[str, str, str]]) -> None:
    lines = [entity_line(n, f) for n, f in graph.items()]
    lines += [json.dumps({"type": "relation", "from": a, "to": b, "relationType": t}, separators=(",", ":"))
              for a, b, t in relations]
    path.write_text("\n".join(lines), encoding="utf-8")


def branch(base: dict[str, list[str]], rng: random.Random, tag: str, added: int, deletes: int) -> tuple[dict, list]:
    graph = {n: list(f) for n, f in base.items()}
    names = list(graph)
    for i in range(added):
        graph[rng.choice(names)].append(f"2026-03-{1 + i % 28:02d}: {tag} change {i}")
    for name in rng.sample(names, deletes):
        graph[name].pop(0)
    graph[f"{tag}-new-service"] = [f"created on branch {tag}"]
    return graph, [(names[0], f"{tag}-new-service", "calls")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--facts", type=int, default=10_000)
    ap.add_argument("--added", type=int, default=500)
    ap.add_argument("--git", action="store_true", help="also merge through a real git repository")
    args = ap.parse_args()
    rng = random.Random(11)
    base = {f"svc-{i}": [f"fact {j} of service {i}" for j in range(15)] for i in range(args.facts // 15)}
    ours, ours_rel = branch(base, rng, "left", args.added, 20)
    theirs, theirs_rel = branch(base, rng, "right", args.added, 0)
    with tempfile.TemporaryDirectory(prefix="graphmem-bench-merge-") as tmp:
        work = Path(tmp)
        paths = {name: work / f"{name}.jsonl" for name in ("base", "ours", "theirs")}
        write(paths["base"], base, [])
        write(paths["ours"], ours, ours_rel)
        write(paths["theirs"], theirs, theirs_rel)
        line_copy = work / "line-merge.jsonl"
        shutil.copy(paths["ours"], line_copy)
        started = time.perf_counter()
        line = subprocess.run(["git", "merge-file", "-p", str(line_copy), str(paths["base"]), str(paths["theirs"])],
                              capture_output=True, text=True)
        line_seconds = time.perf_counter() - started
        started = time.perf_counter()
        done = subprocess.run([sys.executable, str(SERVER), "--merge", str(paths["base"]), str(paths["ours"]),
                               str(paths["theirs"])], capture_output=True, text=True)
        seconds = time.perf_counter() - started
        merged = [json.loads(line) for line in paths["ours"].read_text(encoding="utf-8").splitlines()]
        got = {m["name"]: m["observations"] for m in merged if m["type"] == "entity"}
        rels = {(m["from"], m["to"], m["relationType"]) for m in merged if m["type"] == "relation"}
        expected_added = {f for side in (ours, theirs) for n, facts in side.items() for f in facts
                          if f not in base.get(n, [])}
        present = {f for facts in got.values() for f in facts}
        deleted = {f for n, facts in base.items() for f in facts if f not in ours[n]}
        print(f"team file: {sum(map(len, base.values())):,} facts in {len(base):,} entities; "
              f"each branch adds {args.added} facts + 1 entity + 1 relation; one deletes 20 facts")
        print(f"graphmem --merge: {seconds:.2f} s (exit {done.returncode}), "
              f"{sum(map(len, got.values())):,} facts after the merge")
        print(f"  added facts kept: {len(expected_added & present)}/{len(expected_added)}; "
              f"deletions kept: {len(deleted - present)}/{len(deleted)}; relations: {len(rels)}/2; "
              f"conflict markers: {sum('<<<<<<<' in m for m in paths['ours'].read_text().splitlines())}")
        conflicts = line.stdout.count("<<<<<<<")
        print(f"git merge-file (line merge, baseline): {line_seconds:.2f} s, {conflicts} conflict(s) left to a person; "
              f"ratio {seconds / max(line_seconds, 1e-9):.1f}x its time")
        if args.git:
            print(f"through git merge: {git_merge(work, base, (ours, ours_rel), (theirs, theirs_rel)):.2f} s")
    return 0


def git_merge(work: Path, base: dict, ours: tuple, theirs: tuple) -> float:
    repo = work / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    import os
    env = {**os.environ, **env}

    def git(*a: str) -> None:
        subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, env=env)
    git("init", "-q", "-b", "main")
    subprocess.run([sys.executable, str(SERVER), "--init"], cwd=repo, check=True, capture_output=True, env=env)
    team = repo / ".graphmem" / "memory.jsonl"
    write(team, base, [])
    git("add", "-A")
    git("commit", "-qm", "base")
    for name, (graph, rels) in (("left", ours), ("right", theirs)):
        git("checkout", "-q", "-b", name, "main")
        write(team, graph, rels)
        git("commit", "-qam", name)
        git("checkout", "-q", "main")
    git("merge", "-q", "--no-edit", "left")
    started = time.perf_counter()
    git("merge", "-q", "--no-edit", "right")
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())
