#!/usr/bin/env python3
"""How conservative write-time curation is: planted restatements, planted newer values, and distinct facts.

    python tools/bench_curation.py [--entities 300] [--seed 7] [--baseline REV]

A synthetic graph, generated deterministically from --seed (nothing from a user's memory): --entities
services, each with identity facts ("deploy branch is main", "Owner: Lucas Perez", "uses Redis for caching"),
a status, dated events and a rule. Then, through memory_server.Memory's add_observations (the handler the
stdio server runs), one planted fact per entity per call:
- restatements of a fact in other words (case and punctuation, an article, "Owned by" for "Owner:", an
  inflection): caught when skipped as a duplicate or near duplicate;
- newer values of the same subject ("deploy branch is prod", "Status: in progress" then a dated "done and
  merged", "Owner: Maria Lopez"): caught when the old value is archived, named when both are kept with a
  possible conflict note;
- distinct facts that look alike (another subject with the same value, a second use of the same tool, another
  client's numbered fact, before/after, the next release): must all stay.
A false drop is any fact that should be in the active graph and is not (skipped, or archived as replaced).
Prints the figures for this working copy and, with --baseline, for a git revision of memory_server.py.
Everything lives in a temporary folder. Stdlib only; prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
PEOPLE = ["Lucas Perez", "Maria Lopez", "Ana Silva", "Omar Haddad", "Mei Chen", "Jonas Berg", "Priya Nair", "Tom Okafor"]
ATTRIBUTES = {  # subject -> values a service may have
    "deploy branch": ["main", "prod", "release", "trunk"], "primary region": ["eu-west-1", "us-east-1", "ap-south-1"],
    "log level": ["info", "debug", "warn"], "database engine": ["Postgres 15", "Postgres 16", "MySQL 8"],
    "on-call channel": ["#ops", "#payments-oncall", "#infra-pager"], "cache ttl": ["60 seconds", "300 seconds", "1 hour"],
    "build tool": ["Bazel", "Gradle", "Make"], "release cadence": ["weekly", "biweekly", "monthly"]}
TOOLS = {"Redis": ["caching", "rate limiting", "job queues"], "Kafka": ["audit events", "order events"],
         "S3": ["backups", "build artifacts", "logs"]}
STATES = [("Status: not started", "2026-03-02: done and merged"), ("Status: open", "2026-03-02: fixed and merged, closing"),
          ("rolled out to 10% of users", "now generally available"), ("Status: in progress", "2026-03-02: shipped")]
RULES = ["migrations must stay backward compatible for one release", "never deploy on Fridays without a rollback plan"]


def load(source: Path | str) -> ModuleType:
    """memory_server.py of this working copy, or of a git revision (written to a temporary file)."""
    path = Path(source) if isinstance(source, Path) else None
    if path is None:
        text = subprocess.run(["git", "-C", str(REPO), "show", f"{source}:memory_server.py"], check=True,
                              capture_output=True, text=True).stdout
        path = Path(tempfile.mkdtemp(prefix="bench-curation-")) / "memory_server.py"
        path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"ms_{abs(hash(str(source)))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def service(rng: random.Random, i: int) -> tuple[list[str], list[tuple[str, str, str | None]]]:
    """(base facts, planted [(kind, fact, the old fact it replaces or restates)]) for one entity."""
    attrs = rng.sample(sorted(ATTRIBUTES), 4)
    values = {a: rng.choice(ATTRIBUTES[a]) for a in attrs}
    tool = rng.choice(sorted(TOOLS))
    uses = rng.sample(TOOLS[tool], 2)
    owner = rng.choice(PEOPLE)
    state, later_state = rng.choice(STATES)
    base = [f"{a} is {values[a]}" for a in attrs] + [f"Owner: {owner}", f"uses {tool} for {uses[0]}", state,
                                                     f"2026-01-{5 + i % 20:02d}: deployed v1.{i % 9} to staging",
                                                     f"client 1 wrote shared fact number {i} about topic w",
                                                     "deploys run before the smoke tests", rng.choice(RULES)]
    other_attr = next(a for a in sorted(ATTRIBUTES) if a not in attrs)
    new_value = next(v for v in ATTRIBUTES[attrs[0]] if v != values[attrs[0]])
    new_owner = next(p for p in PEOPLE if p != owner)
    planted = [
        ("restatement", f"{attrs[1].title()} is {values[attrs[1]]}.", f"{attrs[1]} is {values[attrs[1]]}"),
        ("restatement", f"Owned by {owner}", f"Owner: {owner}"),
        ("restatement", f"uses {tool} for the {uses[0]}", f"uses {tool} for {uses[0]}"),
        ("restatement", f"2026-01-{5 + i % 20:02d}: Deployed v1.{i % 9} to staging!",
         f"2026-01-{5 + i % 20:02d}: deployed v1.{i % 9} to staging"),
        ("newer value", f"{attrs[0]} is {new_value}", f"{attrs[0]} is {values[attrs[0]]}"),
        ("newer value", later_state, state),
        ("newer value", f"Owner: {new_owner}", f"Owner: {owner}"),
        ("distinct", f"{other_attr} is {values[attrs[2]]}", None),
        ("distinct", f"uses {tool} for {uses[1]}", None),
        ("distinct", f"client 2 wrote shared fact number {i} about topic w", None),
        ("distinct", "deploys run after the smoke tests", None),
        ("distinct", f"2026-02-{5 + i % 20:02d}: deployed v1.{i % 9 + 1} to staging", None),
    ]
    rng.shuffle(planted)
    return base, planted


def run(ms: ModuleType, entities: int, seed: int) -> dict[str, int]:
    """Plant the facts through add_observations, one planted fact per entity per call; count what happened."""
    rng = random.Random(seed)
    graph = {f"svc-{i:03d}": service(rng, i) for i in range(entities)}
    folder = Path(tempfile.mkdtemp(prefix="bench-curation-"))
    settings = ms.Settings.from_env({"MEMORY_FILE_PATH": str(folder / "memory.jsonl"), "MEMORY_OBS_MAX": "1000"})
    memory = ms.Memory(settings, client="bench")
    text, is_error = memory.call_tool("create_entities", {"entities": [
        {"name": name, "entityType": "service", "observations": base} for name, (base, _) in graph.items()]})
    assert not is_error, text
    answers: dict[tuple[str, str], str] = {}
    for round_ in range(max(len(p) for _, p in graph.values())):
        batch = [(name, planted[round_][1]) for name, (_, planted) in graph.items() if round_ < len(planted)]
        text, is_error = memory.call_tool("add_observations", {"observations": [
            {"entityName": name, "contents": [fact]} for name, fact in batch]})
        assert not is_error, text
        for (name, fact), line in zip(batch, text.splitlines()):
            answers[(name, fact)] = line
    return count((getattr(memory, "fresh_graph", None) or memory.graph)(), graph, answers)


def count(active, graph, answers: dict[tuple[str, str], str]) -> dict[str, int]:
    figures: collections.Counter[str] = collections.Counter()
    for name, (base, planted) in graph.items():
        facts = set(active.get(name).observations)
        replaced_targets = {old for kind, _, old in planted if kind == "newer value"}
        must_stay = {f for f in base if f not in replaced_targets} | {f for kind, f, _ in planted if kind != "restatement"}
        figures["facts that must stay"] += len(must_stay)
        figures["false drops"] += len(must_stay - facts)
        for kind, fact, old in planted:
            figures[f"planted {kind}s"] += 1
            if kind == "restatement":
                figures["restatements caught (skipped)"] += fact not in facts
            elif kind == "newer value":
                if old not in facts and fact in facts:
                    figures["newer values caught (old archived)"] += 1
                elif "possible conflict" in answers.get((name, fact), ""):
                    figures["newer values named as a possible conflict (both kept)"] += 1
                else:
                    figures["newer values missed (both kept, nothing said)"] += 1
    return dict(figures)


ORDER = ["planted restatements", "restatements caught (skipped)", "planted newer values",
         "newer values caught (old archived)", "newer values named as a possible conflict (both kept)",
         "newer values missed (both kept, nothing said)", "planted distincts", "facts that must stay", "false drops"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--baseline", help="a git revision of memory_server.py to compare with")
    args = parser.parse_args()
    runs = [("this working copy", load(REPO / "memory_server.py"))]
    if args.baseline:
        runs.append((f"baseline {args.baseline}", load(args.baseline)))
    print(f"synthetic graph: {args.entities} services, seed {args.seed}; one planted fact per entity per call")
    results = [(label, run(ms, args.entities, args.seed)) for label, ms in runs]
    width = max(map(len, ORDER))
    print(" " * width + "".join(f"  {label:>20}" for label, _ in results))
    for key in ORDER:
        print(f"{key:<{width}}" + "".join(f"  {figures.get(key, 0):>20}" for _, figures in results))


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
