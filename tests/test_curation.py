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


# ---------------------------------------------------------------- items 2-6: write-time curation
@pytest.fixture
def api(tmp_path):
    """A real server with one entity, Api, holding `facts` (set by the test through create_entities)."""
    server = StdioServer(tmp_path / "memory.jsonl")
    server.initialize()
    yield server
    server.close()


def start(server, *facts: str, etype: str = "service") -> None:
    text, is_error = server.call("create_entities", {"entities": [{"name": "Api", "entityType": etype,
                                                                   "observations": list(facts)}]})
    assert not is_error and "Created 1" in text, text


def facts_on_disk(server) -> list[str]:
    text, _ = server.call("open_nodes", {"names": ["Api"]})
    return [line[2:].split(" [")[0] for line in text.splitlines() if line.startswith("- ")]


def test_item2_facts_of_one_call_never_replace_each_other(api):
    start(api)
    text, is_error = api.call(*add("Api", "supports Python 3.10", "supports Python 3.12",
                                   "deploy branch is main", "deploy branch is prod"))
    assert not is_error and "Api: +4, now 4" in text, text
    assert "replaced" not in text and "conflict" not in text
    assert facts_on_disk(api) == ["supports Python 3.10", "supports Python 3.12", "deploy branch is main",
                                  "deploy branch is prod"]
    # created with its facts in one call: the same
    text, _ = api.call("create_entities", {"entities": [{"name": "Web", "entityType": "service", "observations": [
        "rate limit is 100", "rate limit is 200"]}]})
    assert "replaced" not in text
    assert api.call("archived_observations", {"entityName": "Web"})[0].startswith("No archived facts")


def test_item3_compound_facts_are_compared_clause_by_clause(api):
    compound = "deploy branch is main; GitHub Actions deploys on tag v*"
    start(api, compound)
    text, _ = api.call(*add("Api", "deploy branch is prod"))
    # the old fact holds another clause: never archived, named with the call that would remove it
    assert f'possible conflict with the older {json.dumps(compound)}: both kept' in text, text
    assert facts_on_disk(api) == [compound, "deploy branch is prod"]
    text, _ = api.call(*add("Api", "GitHub Actions deploys on tag v*"))
    assert "nearly the same as" in text and "+0" in text
    # a compound fact that gives a new value for every clause of an older one replaces it
    api.call("create_entities", {"entities": [{"name": "Web", "entityType": "service",
                                               "observations": ["deploy branch is prod"]}]})
    text, _ = api.call(*add("Web", "deploy branch is release; GitHub Actions deploys on tag v*"))
    assert 'replaced "deploy branch is prod" (archived)' in text


@pytest.mark.parametrize("old,new", [
    ("Status: open", "2026-02-11: fixed and merged, closing"),
    ("Status: not started", "done and merged"),
    ("rolled out to 10% of users", "now generally available"),
    ("2026-01-20: login bug: in progress", "2026-02-11: login bug: fixed"),
])
def test_item4_a_later_status_report_supersedes_the_older_state(api, old, new):
    start(api, "written in Go", old)
    text, _ = api.call(*add("Api", new))
    assert f'replaced {json.dumps(old)} (archived)' in text, text
    assert facts_on_disk(api) == ["written in Go", new]


@pytest.mark.parametrize("old,new", [
    ("2026-02-11: Status: open", "2026-02-01: fixed and merged"),   # dated before: an old event, not news
    ("login bug: fixed", "signup bug: in progress"),                 # another thing's status
    ("2026-01-05: v1.2 released", "2026-02-01: v1.3 released"),      # releases are history
])
def test_item4_status_reports_of_other_things_or_earlier_dates_are_kept(api, old, new):
    start(api, old)
    text, _ = api.call(*add("Api", new))
    assert "replaced" not in text and "Api: +1, now 2" in text, text


def test_item5_a_possible_conflict_names_the_exact_older_fact_and_the_call_that_removes_it(api):
    older = "uses Redis for caching of the session store and of the rendered product pages"
    start(api, older)
    text, _ = api.call(*add("Api", "uses Redis for caching of the session store and of the rendered cart pages"))
    note = text[text.index("possible conflict"):].splitlines()[0]
    call_text = note.split("delete_observations ", 1)[1]
    assert json.loads(call_text) == {"deletions": [{"entityName": "Api", "observations": [older]}]}
    assert json.dumps(older) in note  # the whole text, never shortened
    text, is_error = api.call("delete_observations", json.loads(call_text))
    assert not is_error and "Api: -1" in text


def test_item5_recall_says_which_of_two_conflicting_facts_is_newer(api):
    start(api, "staging runs on port 8080")
    api.call(*add("Api", "staging runs on port 9090"))
    text, _ = api.call("recall", {"query": "staging port"})
    assert "staging runs on port 9090 [newer of a conflict]" in text, text
    assert 'staging runs on port 8080 [older: conflicts with "staging runs on port 9090"]' in text, text


@pytest.mark.parametrize("old,new", [
    ("client 1 wrote shared fact number 22 about topic w", "client 2 wrote shared fact number 22 about topic w"),
    ("deploy branch is main", "release branch is main"),
    ("logs are stored in S3", "backups are stored in S3"),
    ("runs before deploy", "runs after deploy"),
    ("uses Redis for caching", "uses Redis for queues"),
    ("Alice reviews Bob's changes", "Bob reviews Alice's changes"),
])
def test_item6_distinct_facts_are_never_skipped_or_archived(api, old, new):
    start(api, old)
    text, _ = api.call(*add("Api", new))
    assert "replaced" not in text and "skipped" not in text and "Api: +1, now 2" in text, text
    assert facts_on_disk(api) == [old, new]


def test_item6_near_duplicates_in_other_words_are_caught(api):
    start(api, "Owned by Lucas Perez")
    text, _ = api.call(*add("Api", "Owner: Lucas Perez"))
    assert 'skipped "Owner: Lucas Perez": nearly the same as "Owned by Lucas Perez"' in text
    assert facts_on_disk(api) == ["Owned by Lucas Perez"]


# ---------------------------------------------------------------- item 9: plans a person can read
def test_item9_dry_run_lists_every_planned_fact_with_its_reason_or_says_how_many_more(tmp_path):
    memory_file = tmp_path / "memory.jsonl"
    facts = [f"2029-{1 + i // 28:02d}-{1 + i % 28:02d}: deployed build {i}" for i in range(230)] + ["written in Go"]
    memory_file.write_text(json.dumps({"type": "entity", "name": "Api", "entityType": "service", "observations": facts}))
    env = {"PATH": os.environ["PATH"], "MEMORY_FILE_PATH": str(memory_file), "MEMORY_OBS_MAX": "5"}
    done = subprocess.run([sys.executable, str(SERVER), "--compact", "--dry-run"], capture_output=True, env=env, timeout=60)
    text = done.stdout.decode()
    assert "plan: archive 226 fact(s) from 1 entity" in text
    listed = [line for line in text.splitlines() if line.startswith("  Api: over cap: ")]
    assert len(listed) == ms.PLAN_LINES_SHOWN == 200
    assert listed[0] == f"  Api: over cap: {facts[0]}  (oldest dated of 231 facts, over the cap of 5)"
    assert "  … and 26 more: graphmem --compact --dry-run --all lists every one" in text
    done = subprocess.run([sys.executable, str(SERVER), "--compact", "--dry-run", "--all"], capture_output=True,
                          env=env, timeout=60)
    listed = [line.split(": over cap: ")[1].split("  (")[0] for line in done.stdout.decode().splitlines()
              if line.startswith("  Api: over cap: ")]
    assert listed == facts[:226] and "more:" not in done.stdout.decode()


# ---------------------------------------------------------------- item 8: probes a person can manage
def test_item8_probes_are_checked_listed_and_removed_from_the_cli(tmp_path):
    memory_file = tmp_path / "memory.jsonl"
    serve(memory_file, 0, [("create_entities", {"entities": [
        {"name": "shop-api", "entityType": "service", "observations": ["deploy branch is prod"]}]})])
    text, code = cli(memory_file, "--probe", "deploy branch", "--expect", "shop-apy")
    assert code == 1 and 'unknown entity "shop-apy"; did you mean "shop-api"?' in text
    text, code = cli(memory_file, "--probe", "deploy branch", "--expect", "shop-api", "--fact", "deploy branch is main")
    assert code == 1 and 'shop-api has no fact "deploy branch is main"; did you mean "deploy branch is prod"?' in text
    assert cli(memory_file, "--probes")[0].startswith("no probes yet")
    text, code = cli(memory_file, "--probe", "Deploy  Branch", "--expect", "shop-api", "--fact", "deploy branch is prod")
    assert code == 0 and "probe added" in text
    # learned from use: recall, then open what it found; the same question in other case is one probe
    serve(memory_file, 1, [("recall", {"query": "deploy branch"}), ("open_nodes", {"names": ["shop-api"]}),
                           ("recall", {"query": "DEPLOY branch"}), ("open_nodes", {"names": ["shop-api"]})])
    text, code = cli(memory_file, "--probes")
    assert code == 0 and text.splitlines()[0] == "1 probe(s); --remove-probe ID removes one", text
    assert '  1 [manual] "deploy branch" -> shop-api: deploy branch is prod' in text
    text, code = cli(memory_file, "--remove-probe", "1", "--probes")
    assert code == 0 and "probe 1 removed" in text and "no probes yet" in text
    text, code = cli(memory_file, "--remove-probe", "1")
    assert code == 1 and "no probe 1" in text


# ---------------------------------------------------------------- item 10: the small things
def test_item10_a_batch_refused_for_one_misspelt_entity_says_nothing_was_added_for_the_others(api):
    start(api, "written in Go")
    text, is_error = api.call("add_observations", {"observations": [
        {"entityName": "Api", "contents": ["runs on port 8080"]}, {"entityName": "Apj", "contents": ["x is y"]}]})
    assert is_error
    assert text.startswith('Nothing added (not to "Api" either): unknown entity "Apj"; did you mean "Api"?'), text
    assert facts_on_disk(api) == ["written in Go"]


def test_item10_an_old_name_after_rename_answers_renamed_to(api):
    start(api, "written in Go")
    api.call("rename_entity", {"name": "Api", "newName": "Backend"})
    api.call("rename_entity", {"name": "Backend", "newName": "Core"})
    text, is_error = api.call(*add("Api", "runs on port 8080"))
    assert is_error and '"Api" was renamed to "Core"; use the new name' in text, text
    text, _ = api.call("open_nodes", {"names": ["Backend"]})
    assert 'Not found: "Backend" (renamed to "Core")' in text


def test_item10_recall_explains_its_marks_in_its_description(api):
    tools = api.request("tools/list")["result"]["tools"]
    description = next(t["description"] for t in tools if t["name"] == "recall")
    assert "«~» matched by meaning" in description and "[newer of a conflict]" in description


def test_item5_a_new_value_of_a_short_key_is_named_not_replaced(api):
    start(api, "Owner: Lucas Perez", "TODO: update the runbook")
    text, _ = api.call(*add("Api", "Owner: Maria Lopez"))
    assert 'possible conflict with the older "Owner: Lucas Perez": both kept' in text
    text, _ = api.call(*add("Api", "TODO: rotate the keys"))  # "Key: value" notes may both hold: named, kept
    assert facts_on_disk(api) == ["Owner: Lucas Perez", "TODO: update the runbook", "Owner: Maria Lopez",
                                  "TODO: rotate the keys"]


# ---------------------------------------------------------------- item 7: results are data, rendered once
def test_item7_the_text_agents_read_is_rendered_from_data_unchanged(api):
    """One renderer makes the same text as before; MCP answers stay text content (no structuredContent: the
    tools declare no outputSchema and several clients show only content)."""
    start(api, "Status: open", "runs on port 8080", "deploy branch is main; GitHub Actions deploys on tag v*")
    reply = api.request("tools/call", {"name": "add_observations", "arguments": {"observations": [{
        "entityName": "Api", "contents": ["runs on port 8080", "2026-02-11: fixed and merged, closing",
                                          "deploy branch is prod", "deploy key AKIA" + "IOSFODNN7EXAMPLE", ""]}]}})
    result = reply["result"]
    assert set(result) == {"content", "isError"} and result["isError"] is False, result
    [block] = result["content"]
    assert block["type"] == "text"
    conflict = json.dumps({"deletions": [{"entityName": "Api", "observations": [
        "deploy branch is main; GitHub Actions deploys on tag v*"]}]})
    assert block["text"] == (
        'Api: +2, now 4; skipped duplicate of "runs on port 8080"; replaced "Status: open" (archived); '
        'possible conflict with the older "deploy branch is main; GitHub Actions deploys on tag v*": both kept; '
        f"if it no longer holds: delete_observations {conflict}; refused a fact: looks like a credential (AWS "
        "access key): record where the secret lives (e.g. \"deploy token: 1Password vault Ops, item 'CI'\"), "
        'never its value; refused "": empty fact'), block["text"]
    # a name with "; " in it no longer reads as "something was skipped" (the old code looked for a semicolon)
    text, _ = api.call("create_entities", {"entities": [{"name": "build; deploy", "entityType": "pipeline",
                                                         "observations": ["runs nightly"]}]})
    assert text == "Created 1: build; deploy", text
    text, is_error = api.call("delete_relations", {"relations": [{"from": "Api", "to": "x", "relationType": "y"}]})
    assert (text, is_error) == ("Deleted 0 of 1 relation(s). Not found: Api -y-> x.", False)
    text, is_error = api.call("add_observations", {"observations": [{"entityName": "Api", "contents": ["x" * 301]}]})
    assert is_error and text.startswith("Nothing added. Api: +0, now 4; refused "), text


def test_item7_a_refused_call_never_says_it_archived_something(tmp_path):
    """An all-refused call is not saved: its answer (text and data) names no archived fact and the count on
    disk; a call that adds nothing archives nothing."""
    server = StdioServer(tmp_path / "memory.jsonl", {"MEMORY_OBS_MAX": "3"})
    try:
        server.initialize()
        dated = [f"2026-01-0{i}: deployed 1.{i}" for i in range(1, 6)]
        text, _ = server.call("create_entities", {"entities": [{"name": "Api", "entityType": "service",
                                                                "observations": dated}]})
        assert "over cap 3" in text, text  # a call's own facts are never archived by it
        text, is_error = server.call(*add("Api", "deploy key AKIA" + "IOSFODNN7EXAMPLE"))
        assert is_error and text.startswith("Nothing added. Api: +0, now 5; over cap 3"), text
        assert "oldest dated archived" not in text
        text, is_error = server.call(*add("Api", dated[0]))
        assert not is_error and text == 'Api: +0, now 5; skipped duplicate of "2026-01-01: deployed 1.1"; ' \
            "over cap 3: undated, pinned and rule/convention/decision facts are never archived; delete stale ones"
        assert facts_on_disk(server) == dated
    finally:
        server.close()


def test_output_piped_into_a_reader_that_left_is_no_traceback(tmp_path):
    """`graphmem --lint | head -1` (or `--compact --dry-run --all | head`): the reader closes the pipe early;
    graphmem stops quietly with 141 (128 + SIGPIPE) instead of a BrokenPipeError traceback."""
    path = tmp_path / "memory.jsonl"
    path.write_text(json.dumps({"type": "entity", "name": "a", "entityType": "t", "observations": ["x"]}) + "\n")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        done = subprocess.run([sys.executable, str(SERVER), "--lint"], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=60, env={**os.environ, "MEMORY_FILE_PATH": str(path),
                                                         "HOME": str(tmp_path)})
    finally:
        os.close(write_end)
    assert done.returncode == 141 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
