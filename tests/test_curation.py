"""Issue 10: curation that never hides a true fact and says when it is unsure, on real processes.

The activity clock (decay counts only days the memory is used), facts of one call, clause-by-clause compare,
status updates, possible conflicts named with the call that removes one, near duplicates without false drops,
readable compact plans, manageable probes, and the small things (batch refusals, renamed entities).
Processes move through time with MEMORY_TEST_ONLY_NOW (a frozen clock for tests; README, Settings).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from conftest import SERVER, StdioServer, call, make_memory

import memory_server as ms

D0 = dt.date(2030, 1, 1)


def day(n: int) -> str:
    return (D0 + dt.timedelta(days=n)).isoformat() + "T12:00:00"


def cli(memory_file, *args: str, on: int | None = None) -> tuple[str, int]:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "MEMORY_FILE_PATH": str(memory_file)}
    if on is not None:
        env["MEMORY_TEST_ONLY_NOW"] = day(on)
    done = subprocess.run([sys.executable, str(SERVER), *args], capture_output=True, env=env, timeout=60)
    return done.stdout.decode() + done.stderr.decode(), done.returncode


def serve(memory_file, on: int, calls: list[tuple[str, dict]]) -> list[tuple[str, bool]]:
    """One server process on day `on`, making these tool calls."""
    server = StdioServer(memory_file, {"MEMORY_TEST_ONLY_NOW": day(on)})
    try:
        server.initialize()
        return [server.call(tool, args) for tool, args in calls]
    finally:
        server.close()


def add(entity: str, *facts: str) -> tuple[str, dict]:
    return "add_observations", {"observations": [{"entityName": entity, "contents": list(facts)}]}


# ---------------------------------------------------------------- item 1: the activity clock
EVENT = "2030-01-01: deployed 1.0 to staging"
PINNED_EVENT = "2030-01-01: migrated the users table"
IDENTITY = "staging URL is staging.example.test"
RULE = "2030-01-01: migrations must stay backward compatible for one release"
CLOCK_GRAPH = {"entities": [
    {"name": "Api", "entityType": "service", "observations": [EVENT, PINNED_EVENT, IDENTITY]},
    {"name": "Migrations", "entityType": "convention", "observations": [RULE]}]}


def planned(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("  ") and ": faded:" in line]


def test_activity_clock_a_year_away_forgets_nothing_days_of_use_fade_only_events(tmp_path):
    memory_file = tmp_path / "memory.jsonl"
    weak = [("mark_fact", {"entityName": e, "observation": f, "action": "not_helpful"})
            for e, f in [("Api", EVENT), ("Api", PINNED_EVENT), ("Api", IDENTITY), ("Migrations", RULE)]] * 2
    answers = serve(memory_file, 0, [("create_entities", CLOCK_GRAPH), *weak,
                                     ("mark_fact", {"entityName": "Api", "observation": PINNED_EVENT, "action": "pin"})])
    assert not any(is_error for _, is_error in answers), answers
    assert "probe added" in cli(memory_file, "--probe", "staging url", "--expect", "Api", "--fact", IDENTITY)[0]

    # a year and more without use: nothing has aged (half-life now 1.75 days of use)
    text, code = cli(memory_file, "--compact", "--dry-run", on=400)
    assert code == 0 and "plan: archive 0 fact(s)" in text, text

    # twelve days of use (a read a day, none of these facts returned): only the unpinned event fades
    for n in range(401, 413):
        serve(memory_file, n, [("read_graph", {})])
    days = sqlite3.connect(tmp_path / "memory.db").execute("SELECT count(*) FROM active_days").fetchone()[0]
    assert days == 13  # day 0 and the twelve: the CLI's compact and --probe are not use
    text, code = cli(memory_file, "--compact", "--dry-run", on=412)
    assert code == 0
    assert planned(text) == [f"  Api: faded: {EVENT}  (dated, retention 0.01 < 0.05: not used in 12 day(s) of use, "
                             "half-life 2)"], text
    text, code = cli(memory_file, "--compact", on=412)
    assert code == 0 and "archived 1 fact(s)" in text, text
    facts = {e["name"]: e["observations"] for e in map(json.loads, memory_file.read_text().splitlines())
             if e.get("type") == "entity"}
    assert facts == {"Api": [PINNED_EVENT, IDENTITY], "Migrations": [RULE]}
    text, _ = serve(memory_file, 413, [("archived_observations", {"entityName": "Api"})])[0]
    assert EVENT in text and "compacted (faded)" in text


def test_rule_and_identity_facts_are_never_archived_by_the_cap(tmp_path):
    memory_file = tmp_path / "memory.jsonl"
    events = [f"2030-01-{d:02d}: decided to keep the monorepo" for d in range(1, 5)]
    answers = serve(memory_file, 0, [
        ("create_entities", {"entities": [{"name": "Repo", "entityType": "decision", "observations": events},
                                          {"name": "Web", "entityType": "service", "observations": events}]})])
    assert not answers[0][1]
    text, code = cli(memory_file, "--compact", "--dry-run")
    assert "plan: archive 0 fact(s)" in text  # cap of 15 not reached
    env_cap = {"MEMORY_OBS_MAX": "2"}
    server = StdioServer(memory_file, env_cap)
    try:
        server.initialize()
        text, _ = server.call(*add("Repo", "2030-01-09: decided to use trunk-based development"))
        assert "oldest dated archived" not in text and "Repo: +1, now 5" in text
        assert "rule/convention/decision facts are never archived" in text
        text, _ = server.call(*add("Web", "2030-01-09: moved to trunk-based development"))
        assert "3 oldest dated archived (cap 2)" in text
    finally:
        server.close()


def test_test_clock_is_announced_and_checked(tmp_path):
    text, code = cli(tmp_path / "memory.jsonl", "--lint", on=5)
    assert code == 0 and "MEMORY_TEST_ONLY_NOW is set" in text and "for tests only" in text
    env = {"PATH": os.environ["PATH"], "MEMORY_FILE_PATH": str(tmp_path / "m.jsonl"), "MEMORY_TEST_ONLY_NOW": "soon"}
    done = subprocess.run([sys.executable, str(SERVER), "--lint"], capture_output=True, env=env, timeout=60)
    assert done.returncode == 2 and "not an ISO date" in done.stderr.decode()
