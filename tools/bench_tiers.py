#!/usr/bin/env python3
"""What working out the memory tiers costs: `Settings.from_env` per call, in process.

    python tools/bench_tiers.py [--rounds 50] [--projects 30]

Prints figures only (never asserts). In a temporary HOME with PROJECTS known private projects (each a folder
with project.json), Settings.from_env is timed (median of ROUNDS) for: a git work tree with an origin whose
private memory exists (.git/config parsed, no git process), one without an origin (its root commit: one
`git rev-list` call, then cached per HEAD, so the median is the cached cost), a new project with an origin
and no memory yet (a scan of every project.json), the same origin case without git on PATH, and outside any
work tree. The baseline is MEMORY_FILE_PATH (no tiers),
timed in the same run. An HTTP transport that builds Settings per request pays this per request.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import memory_server as ms  # noqa: E402


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_repo(path: Path, origin: str | None) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    if origin:
        git(path, "remote", "add", "origin", origin)
    (path / "a.txt").write_text("a")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    return path


def median_ms(env: dict[str, str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        ms.Settings.from_env(env)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--projects", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="graphmem-bench-tiers-") as tmp:
        tmp_path = Path(tmp)
        home = tmp_path / "home"
        os.environ.update({"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "b",
                           "GIT_AUTHOR_EMAIL": "b@example.com", "GIT_COMMITTER_NAME": "b",
                           "GIT_COMMITTER_EMAIL": "b@example.com"})
        os.environ.pop("XDG_DATA_HOME", None)
        env = {"HOME": str(home)}
        for i in range(args.projects):  # other known projects, as --projects would list them
            folder = ms.projects_dir(env) / f"github.com-acme-p{i}-0000000{i % 10}"
            folder.mkdir(parents=True)
            (folder / "project.json").write_text(json.dumps({"identity": f"github.com/acme/p{i}", "kind": "origin",
                                                             "identities": [f"github.com/acme/p{i}"], "paths": []}))
        known = make_repo(tmp_path / "known", "git@github.com:acme/known.git")
        no_origin = make_repo(tmp_path / "no-origin", None)
        new = make_repo(tmp_path / "new", "git@github.com:acme/new.git")
        lonely = tmp_path / "lonely"
        lonely.mkdir()
        for root in (known, no_origin):
            ms.record_project(ms.Settings.from_env({**env, "MEMORY_PROJECT_ROOT": str(root)}).project)
        empty_bin = tmp_path / "bin"
        empty_bin.mkdir()
        baseline = median_ms({**env, "MEMORY_FILE_PATH": str(tmp_path / "one.jsonl")}, args.rounds)
        cases = [("origin, memory exists", known, None), ("no origin (root commit)", no_origin, None),
                 ("origin, no memory yet (scan)", new, None), ("origin, git not on PATH", known, str(empty_bin)),
                 ("outside any work tree", lonely, None)]
        print(f"Settings.from_env, median of {args.rounds}, {args.projects} other known projects")
        print(f"  {'MEMORY_FILE_PATH (baseline)':<32} {baseline:7.2f} ms")
        saved_path = os.environ["PATH"]
        for label, root, path in cases:
            os.environ["PATH"] = path or saved_path
            try:
                took = median_ms({**env, "MEMORY_PROJECT_ROOT": str(root)}, args.rounds)
            finally:
                os.environ["PATH"] = saved_path
            print(f"  {label:<32} {took:7.2f} ms  ({took / baseline:.0f}x the baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
