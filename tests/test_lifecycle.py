"""Self-curation, in process (memory_server.Memory), no subprocess.

Covers: write-time curation (duplicates, near duplicates, supersede, dated history, pins, negation),
secrets refused (and look-alikes accepted), the length limit, decay and reinforcement numbers, the
compact guardrail (probes, dry run, roll back, commit), reconciling outside edits and a corrupt
memory.db, and undo.

Fake secrets are assembled at run time from pieces so this file does not itself look like it holds any.
"""
import base64
import json
import os
import random
import string
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).absolute().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import memory_server as ms  # noqa: E402
from conftest import call, make_memory, write_graph  # noqa: E402

HOUR = 3600.0


# ---------------------------------------------------------------- helpers
def add(mem, entity, *facts):
    return mem.call_tool("add_observations", {"observations": [{"entityName": entity, "contents": list(facts)}]})


def facts_of(mem, name):
    entity = mem.fresh_graph().get(name)
    return None if entity is None else list(entity.observations)


def file_facts(mem, name):
    """Facts as they are in memory.jsonl on disk (not the cache)."""
    for line in mem.settings.file_path.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            obj = json.loads(line)
            if obj.get("type") == "entity" and obj["name"] == name:
                return obj["observations"]
    return None


def db_row(mem, entity, text):
    return mem.meta.conn.execute(
        "SELECT last_used, uses, stability, importance, pinned FROM facts WHERE entity=? AND text=?",
        (entity, text)).fetchone()


def set_age(mem, keys, hours):
    """Last used `hours` ago (whole days), with the memory used on every day since: the activity clock counts them."""
    now = time.time()
    for key in keys:
        mem.meta.state(*key).last_used = now - hours * HOUR
    mem.meta.save_states(keys)
    use_days(mem, int(hours // 24))


def use_days(mem, days):
    """The memory was used on each of the last `days` days (and today)."""
    today = int(time.time() // 86400)
    with mem.meta.write() as conn:
        conn.executemany("INSERT OR IGNORE INTO active_days(day) VALUES (?)", [(today - d,) for d in range(days + 1)])
    mem.meta.days = tuple(d for (d,) in mem.meta.conn.execute("SELECT day FROM active_days ORDER BY day"))


# ---------------------------------------------------------------- write-time curation
@pytest.mark.parametrize("variant", ["deploy branch is main", "Deploy branch is MAIN", "deploy  branch   is main",
                                     "deploy branch is main.", "  Deploy Branch Is Main!  ", "deploy branch is main;"])
def test_exact_duplicates_are_skipped_and_reported(tmp_path, variant):
    mem = make_memory(tmp_path, [("Api", "service", ["deploy branch is main", "runs on port 8080"])])
    before = mem.settings.file_path.read_bytes()
    text, is_error = add(mem, "Api", variant)
    assert not is_error
    assert 'skipped duplicate of "deploy branch is main"' in text
    assert "+0, now 2" in text
    assert facts_of(mem, "Api") == ["deploy branch is main", "runs on port 8080"]
    assert mem.settings.file_path.read_bytes() == before


def test_near_duplicate_is_skipped_naming_the_existing_fact(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["Deploying requires VPN access",
                                                     "Builds run on GitHub Actions runners"])])
    text = call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": [
        "deploys require VPN access", "Builds run on the GitHub Actions runners"]}]})
    assert 'skipped "deploys require VPN access": nearly the same as "Deploying requires VPN access"' in text
    assert 'nearly the same as "Builds run on GitHub Actions runners"' in text
    assert "+0, now 2" in text
    assert facts_of(mem, "Api") == ["Deploying requires VPN access", "Builds run on GitHub Actions runners"]


def test_supersede_archives_the_old_value_and_says_so(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["deploy branch is main", "written in Go"])])
    text = call(mem, "add_observations", {"observations": [{"entityName": "Api",
                                                            "contents": ["deploy branch is prod"]}]})
    assert 'replaced "deploy branch is main" (archived)' in text
    assert file_facts(mem, "Api") == ["written in Go", "deploy branch is prod"]
    archived = mem.store.read_archive("Api")
    assert [(a.text, a.why) for a in archived] == [("deploy branch is main", 'superseded by "deploy branch is prod"')]
    listing = call(mem, "archived_observations", {"entityName": "Api"})
    assert "deploy branch is main" in listing and 'superseded by "deploy branch is prod"' in listing
    assert "(1 archived)" in call(mem, "open_nodes", {"names": ["Api"]})


def test_supersede_of_a_number(tmp_path):
    mem = make_memory(tmp_path, [("Staging", "env", ["staging port is 8080"])])
    text = call(mem, "add_observations", {"observations": [{"entityName": "Staging",
                                                            "contents": ["staging port is 9090"]}]})
    assert 'replaced "staging port is 8080" (archived)' in text
    assert facts_of(mem, "Staging") == ["staging port is 9090"]


def test_a_new_number_after_another_verb_is_a_possible_conflict(tmp_path):
    """"runs on port 8080" / "9090" could both hold (two services, a list): kept both, the older one named."""
    mem = make_memory(tmp_path, [("Staging", "env", ["staging runs on port 8080"])])
    text = call(mem, "add_observations", {"observations": [{"entityName": "Staging",
                                                            "contents": ["staging runs on port 9090"]}]})
    assert 'possible conflict with the older "staging runs on port 8080": both kept' in text
    assert facts_of(mem, "Staging") == ["staging runs on port 8080", "staging runs on port 9090"]


def test_dated_events_with_different_dates_are_both_kept(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["2026-01-05: deployed 1.0", "2026-01-07: deploy branch is main"])])
    text = call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": [
        "2026-02-01: deployed 1.0", "2026-02-03: deploy branch is prod"]}]})
    assert "+2, now 4" in text
    assert "replaced" not in text and "skipped" not in text
    assert facts_of(mem, "Api") == ["2026-01-05: deployed 1.0", "2026-01-07: deploy branch is main",
                                    "2026-02-01: deployed 1.0", "2026-02-03: deploy branch is prod"]
    assert mem.store.read_archive("Api") == []
    # the same event on the same date is still a duplicate
    text = call(mem, "add_observations", {"observations": [{"entityName": "Api",
                                                            "contents": ["2026-01-05: Deployed 1.0."]}]})
    assert "skipped duplicate" in text


def test_pinned_fact_is_never_superseded(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["deploy branch is main"])])
    call(mem, "mark_fact", {"entityName": "Api", "observation": "deploy branch is main", "action": "pin"})
    text = call(mem, "add_observations", {"observations": [{"entityName": "Api",
                                                            "contents": ["deploy branch is prod"]}]})
    assert 'possible conflict with the older "deploy branch is main" (pinned): both kept' in text
    assert "replaced" not in text
    assert file_facts(mem, "Api") == ["deploy branch is main", "deploy branch is prod"]
    assert mem.store.read_archive("Api") == []


@pytest.mark.parametrize("old,new", [
    ("feature flag dark-mode is enabled", "feature flag dark-mode is not enabled"),
    ("uses tabs for indentation", "never uses tabs for indentation"),
    # the negated verb has a different inflection ("needs" / "does not need"): still the same claim, flipped
    ("Deploying needs VPN access", "deploying does not need VPN access"),
])
def test_negation_flip_is_a_possible_conflict_both_kept(tmp_path, old, new):
    mem = make_memory(tmp_path, [("Api", "service", [old])])
    text = call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": [new]}]})
    assert f'possible conflict with the older "{old}"' in text and "both kept" in text
    assert file_facts(mem, "Api") == [old, new]
    assert mem.store.read_archive("Api") == []


# ---------------------------------------------------------------- secrets
def _rand(alphabet, n, seed):
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


ALNUM = string.ascii_letters + string.digits
UPNUM = string.ascii_uppercase + string.digits


def _b64(obj):
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def _high_entropy():
    token = _rand(ALNUM, 40, 7)
    assert not all(c in string.hexdigits for c in token)
    return token


SECRETS = [
    ("AWS access key", "ci uses key " + "AK" + "IA" + _rand(UPNUM, 16, 1)),
    ("GitHub token", "bot token " + "gh" + "p_" + _rand(ALNUM, 36, 2)),
    ("GitHub token", "fine-grained " + "github" + "_pat_" + _rand(ALNUM + "_", 70, 3)),
    ("Slack token", "slack bot " + "xo" + "xb-" + "1234567890-" + _rand(ALNUM, 24, 4)),
    ("API secret key", "openai " + "s" + "k-" + _rand(ALNUM, 40, 5)),
    ("API secret key", "anthropic " + "s" + "k-" + "ant-" + "api03-" + _rand(ALNUM, 40, 6)),
    ("Stripe key", "stripe " + "s" + "k_" + "live_" + _rand(ALNUM, 24, 8)),
    ("Google API key", "maps key " + "AI" + "za" + _rand(ALNUM + "_-", 35, 9)),
    ("JSON web token", "test session " + _b64({"alg": "HS256", "typ": "JWT"}) + "."
     + _b64({"sub": "1234567890", "name": "x"}) + "." + _rand(ALNUM + "_-", 43, 10)),
    ("private key block", "-----" + "BEGIN RSA " + "PRIVATE KEY-----" + " MIIEpAIBAAKCAQEA"),
    ("private key block", "-----" + "BEGIN OPENSSH " + "PRIVATE KEY-----"),
    ("password or key assignment", "admin pass" + "word=" + "Tr0ub4dor&3"),
    ("password or key assignment", "api" + "_key: " + "q8Zr2LmN5vXw"),
    ("password or key assignment", "client_" + "secret = " + "\"" + "mZ9-xK2pQ7rT" + "\""),
    ("connection string with a password", "db is postgres://" + "app:" + "s3cr" + "etpw" + "@db.internal:5432/app"),
    ("long random-looking string", "session cookie " + _high_entropy()),
]


@pytest.mark.parametrize("label,fact", SECRETS, ids=[f"{i}-{s[0]}" for i, s in enumerate(SECRETS)])
def test_secrets_are_refused(tmp_path, label, fact):
    assert ms.looks_like_secret(fact) == label
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"])])
    before = mem.settings.file_path.read_bytes()
    text, is_error = add(mem, "Api", fact)
    assert is_error
    assert "Nothing added" in text
    assert f"looks like a credential ({label})" in text
    assert "record where the secret lives" in text and "never its value" in text
    assert mem.settings.file_path.read_bytes() == before
    # refused next to an accepted fact: the good one goes in, the secret nowhere (graph, history, state)
    text, is_error = add(mem, "Api", "deploys from main", fact)
    assert not is_error and "+1" in text and "refused" in text
    assert facts_of(mem, "Api") == ["written in Go", "deploys from main"]
    secret_part = fact.split()[-1][-12:]
    assert secret_part.encode() not in mem.settings.file_path.read_bytes()
    history = " ".join(r[0] for r in mem.meta.conn.execute("SELECT changes FROM history"))
    assert secret_part not in history
    assert all(secret_part not in t for _, t in mem.meta.states)


def test_secret_in_create_entities_is_refused_entity_still_created(tmp_path):
    mem = make_memory(tmp_path)
    fact = "token " + "gh" + "p_" + _rand(ALNUM, 36, 11)
    text = call(mem, "create_entities", {"entities": [{"name": "Bot", "entityType": "service",
                                                       "observations": ["runs nightly", fact]}]})
    assert "Created 1: Bot" in text
    assert "looks like a credential (GitHub token)" in text and "record where the secret lives" in text
    assert facts_of(mem, "Bot") == ["runs nightly"]


NOT_SECRETS = [
    "fixed in commit " + "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
    "image digest sha256:" + "9b2e" * 16,
    "password is in 1Password",
    "postgres://user:${PASS}@host",
    "api_key: see vault",
    "the deploy token lives in 1Password vault Ops, item CI",
    "set the password via the DB_PASSWORD env var",
    "postgres://localhost:5432/app",
    "password: <from vault>",
    "secret = $DEPLOY_SECRET",
    "AKIA keys are rotated every 90 days",
    "CamelCaseIdentifierForTheDeploymentPipelineRunner",
]


@pytest.mark.parametrize("fact", NOT_SECRETS)
def test_look_alikes_are_accepted(tmp_path, fact):
    assert ms.looks_like_secret(fact) is None
    mem = make_memory(tmp_path, [("Api", "service", [])])
    text = call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": [fact]}]})
    assert "+1, now 1" in text and "refused" not in text
    assert file_facts(mem, "Api") == [fact]


# ---------------------------------------------------------------- length limit
def test_301_chars_refused_with_a_hint(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", [])])
    long_fact = ("the deploy pipeline " * 20)[:301]
    assert len(long_fact) == 301
    text, is_error = add(mem, "Api", long_fact)
    assert is_error
    assert "301 chars, over the 300-char limit" in text
    assert "split it into short facts" in text
    assert facts_of(mem, "Api") == []
    ok = long_fact[:300]
    text, is_error = add(mem, "Api", ok)
    assert not is_error and "+1" in text


def test_length_limit_follows_the_setting(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", [])], MEMORY_OBS_MAX_CHARS=400)
    text, is_error = add(mem, "Api", "x " * 150 + "y")  # 301 chars
    assert not is_error and "+1" in text
    text, is_error = add(mem, "Api", "z" * 401)
    assert is_error and "401 chars, over the 400-char limit" in text


def test_long_facts_already_in_the_file_are_kept(tmp_path):
    long_fact = "legacy note: " + "the old deploy flow " * 30
    assert len(long_fact) > 300
    mem = make_memory(tmp_path, [("Api", "service", [long_fact, "written in Go"])])
    call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": ["runs on port 8080"]}]})
    call(mem, "delete_observations", {"deletions": [{"entityName": "Api", "observations": ["written in Go"]}]})
    assert file_facts(mem, "Api") == [long_fact, "runs on port 8080"]
    assert long_fact in call(mem, "open_nodes", {"names": ["Api"]})
    assert "over-long facts (> 300 chars): 1" in ms.lint_report(mem)


# ---------------------------------------------------------------- decay and reinforcement
def test_new_fact_state(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", [])])
    t0 = time.time()
    call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": ["written in Go"]}]})
    state = mem.meta.states[("Api", "written in Go")]
    assert state.stability == ms.NEW_FACT_STABILITY_H == 168.0
    assert state.importance == 0.5 and state.uses == 0 and not state.pinned
    assert t0 - 1 <= state.last_used <= time.time()
    assert state.retention(mem.meta.clock()) == pytest.approx(1.0, abs=1e-4)
    last_used, uses, stability, importance, pinned = db_row(mem, "Api", "written in Go")
    assert (uses, stability, importance, pinned) == (0, 168.0, 0.5, 0)


@pytest.mark.parametrize("hours", [24, 168, 336, 1008, 4992])
def test_retention_formula(tmp_path, hours):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"])])
    mem.fresh_graph()
    key = ("Api", "written in Go")
    set_age(mem, [key], hours)
    expected = 0.5 ** (hours / 168.0)
    assert mem.lifecycle.strength(*key) == pytest.approx(expected, rel=1e-4)
    assert mem.meta.states[key].retention(mem.meta.clock()) == pytest.approx(expected, rel=1e-4)
    # a second process sees the same state
    other = ms.Memory(mem.settings, client="other")
    other.fresh_graph()
    assert other.lifecycle.strength(*key) == pytest.approx(expected, rel=1e-4)


def test_fading_fact_is_flagged_in_open_nodes(tmp_path):
    """Only a dated (event) fact shows as fading; an undated identity fact of the same age never does."""
    mem = make_memory(tmp_path, [("Api", "service", ["2026-01-05: deployed 1.0", "written in Go", "runs on port 8080"])])
    mem.fresh_graph()
    set_age(mem, [("Api", "2026-01-05: deployed 1.0"), ("Api", "written in Go")], 336)  # retention 0.25 < 0.3
    text = call(mem, "open_nodes", {"names": ["Api"]})
    assert "- 2026-01-05: deployed 1.0 [fading 0.25]" in text
    assert "- written in Go\n" in text and "- runs on port 8080\n" in text + "\n"


@pytest.mark.parametrize("tool", ["recall", "open_nodes"])
def test_a_fact_that_keeps_being_returned_outlives_its_untouched_twin(tmp_path, tool):
    """Behaviour, not arithmetic: each time a fact is returned its clock restarts and it fades more slowly
    afterwards, so after the same idle time it is stronger than a twin that was never returned."""
    used, idle = ("Api", "2026-01-05: deployed 1.0 with Go"), ("Web", "2026-01-05: deployed 1.0 with React")
    mem = make_memory(tmp_path, [("Api", "service", [used[1]]), ("Web", "site", [idle[1]])])
    mem.fresh_graph()
    set_age(mem, [used, idle], 500)
    args = {"query": "deployed with go"} if tool == "recall" else {"names": ["Api"]}
    stabilities = []
    for uses in (1, 2, 3):
        t0 = time.time()
        assert used[1] in call(mem, tool, args)
        state = mem.meta.states[used]
        assert state.uses == uses and state.last_used >= t0
        assert mem.lifecycle.strength(*used) == pytest.approx(1.0, abs=1e-3)  # its clock restarted
        stabilities.append(state.stability)
    assert stabilities == sorted(set(stabilities)), "each use must slow its fading further"
    set_age(mem, [used, idle], 400)  # the same idle time for both
    assert mem.lifecycle.strength(*used) > 2 * mem.lifecycle.strength(*idle)
    later = ms.Memory(mem.settings, client="later")  # what another process reads from memory.db
    later.fresh_graph()
    assert later.lifecycle.strength(*used) > 2 * later.lifecycle.strength(*idle)
    text = call(mem, "open_nodes", {"names": ["Api", "Web"]})  # (a use itself: checked last)
    assert f"- {idle[1]} [fading" in text and f"- {used[1]} [fading" not in text


def test_stability_is_capped_at_a_year(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"])])
    mem.fresh_graph()
    key = ("Api", "written in Go")
    mem.meta.state(*key).stability = 8000.0
    mem.meta.save_states([key])
    call(mem, "open_nodes", {"names": ["Api"]})
    assert mem.meta.states[key].stability == ms.MAX_STABILITY_H == 8760.0
    call(mem, "recall", {"query": "written in go"})
    assert mem.meta.states[key].stability == 8760.0
    assert db_row(mem, *key)[2] == 8760.0


def test_pinned_retention_is_one(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"])])
    call(mem, "mark_fact", {"entityName": "Api", "observation": "written in Go", "action": "pin"})
    key = ("Api", "written in Go")
    set_age(mem, [key], 100_000)
    assert mem.lifecycle.strength(*key) == 1.0
    assert db_row(mem, *key)[4] == 1
    assert "- written in Go [pinned]" in call(mem, "open_nodes", {"names": ["Api"]})
    call(mem, "mark_fact", {"entityName": "Api", "observation": "written in Go", "action": "unpin"})
    set_age(mem, [key], 100_000)
    assert mem.lifecycle.strength(*key) < 0.01


def test_helpful_facts_fade_later_and_not_helpful_ones_sooner(tmp_path):
    """Behaviour, not arithmetic: after the same idle time a fact rated helpful is stronger than an unrated twin,
    which is stronger than one rated not helpful; ratings persist for other processes, repeated ratings stay
    bounded, and no rating ever removes a fact."""
    good, plain, bad = (("Api", f"2026-01-0{d}: deployed 1.{d}") for d in (5, 6, 7))
    mem = make_memory(tmp_path, [("Api", "service", [good[1], plain[1], bad[1]])])
    mem.fresh_graph()
    assert "helped" in call(mem, "mark_fact", {"entityName": "Api", "observation": good[1], "action": "helpful"})
    assert "did not help" in call(mem, "mark_fact", {"entityName": "Api", "observation": bad[1],
                                                      "action": "not_helpful"})
    set_age(mem, [good, plain, bad], 300)  # an unrated fact is just under the fading line after 300 h
    assert mem.lifecycle.strength(*good) > mem.lifecycle.strength(*plain) > mem.lifecycle.strength(*bad)
    other = ms.Memory(mem.settings, client="other")  # ratings live in memory.db, not in one process
    other.fresh_graph()
    assert other.lifecycle.strength(*good) > other.lifecycle.strength(*plain) > other.lifecycle.strength(*bad)
    text = call(mem, "open_nodes", {"names": ["Api"]})  # (a use itself: checked after the strengths)
    assert f"- {good[1]}\n" in text + "\n" and f"- {plain[1]} [fading" in text and f"- {bad[1]} [fading" in text

    strengths = []
    for _ in range(6):  # rating again never weakens a fact, and the effect is bounded
        call(mem, "mark_fact", {"entityName": "Api", "observation": good[1], "action": "helpful"})
        set_age(mem, [good], 300)
        strengths.append(mem.lifecycle.strength(*good))
    assert strengths == sorted(strengths) and all(0 < x <= 1 for x in strengths)
    assert strengths[-1] - strengths[-2] <= strengths[1] - strengths[0] + 1e-9  # diminishing returns
    for _ in range(6):
        call(mem, "mark_fact", {"entityName": "Api", "observation": bad[1], "action": "not_helpful"})
    assert file_facts(ms.Memory(mem.settings, client="fresh"), "Api") == [good[1], plain[1], bad[1]]


def test_decay_alone_never_deletes_a_fact(tmp_path):
    facts = ["written in Go", "runs on port 8080", "2026-01-05: deployed 1.0"]
    mem = make_memory(tmp_path, [("Api", "service", facts), ("Web", "service", ["uses React"])])
    mem.fresh_graph()
    keys = [("Api", f) for f in facts] + [("Web", "uses React")]
    set_age(mem, keys, 24 * 3650)
    assert all(mem.lifecycle.strength(*k) < 1e-6 for k in keys)
    call(mem, "read_graph", {})
    call(mem, "search_nodes", {"query": "go"})
    call(mem, "add_observations", {"observations": [{"entityName": "Web", "contents": ["served from a CDN"]}]})
    assert "fading facts (retention < 0.3): 1" in ms.lint_report(mem)  # only the dated one can fade
    fresh = ms.Memory(mem.settings, client="later")
    assert file_facts(fresh, "Api") == facts
    assert file_facts(fresh, "Web") == ["uses React", "served from a CDN"]
    assert "written in Go" in call(fresh, "recall", {"query": "written in go"})


# ---------------------------------------------------------------- guardrail and compact
GUARD_GRAPH = [
    ("Api", "service", ["2026-01-07: deploy branch is main", "runs on port 8080", "2026-01-05: old staging host was box12"]),
    ("Web", "service", ["uses react", "2026-01-06: legacy jquery plugin removed"]),
]
FADED = [("Api", "2026-01-05: old staging host was box12"), ("Web", "2026-01-06: legacy jquery plugin removed"),
         ("Api", "2026-01-07: deploy branch is main")]


def guarded_memory(tmp_path, **env):
    mem = make_memory(tmp_path, GUARD_GRAPH, **env)
    mem.fresh_graph()
    set_age(mem, FADED, 24 * 365)  # retention ~ 0.5 ** 52
    return mem


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith("memory.db")}


def test_probes_are_learned_from_real_use(tmp_path):
    mem = make_memory(tmp_path, GUARD_GRAPH)
    recall = call(mem, "recall", {"query": "deploy branch"})
    assert "2026-01-07: deploy branch is main" in recall
    assert mem.meta.probes() == []  # recall alone is not evidence
    call(mem, "open_nodes", {"names": ["Web"]})  # not returned by that recall: no probe
    assert mem.meta.probes() == []
    call(mem, "open_nodes", {"names": ["Api"]})
    assert ("deploy branch", "Api", "2026-01-07: deploy branch is main", "auto") in mem.meta.probes()
    assert all(p[3] == "auto" and p[1] == "Api" for p in mem.meta.probes())
    # rating a recalled fact helpful records exactly that fact
    call(mem, "recall", {"query": "react"})
    call(mem, "mark_fact", {"entityName": "Web", "observation": "uses react", "action": "helpful"})
    assert ("react", "Web", "uses react", "auto") in mem.meta.probes()
    # probes are stored once
    n = len(mem.meta.probes())
    call(mem, "open_nodes", {"names": ["Api"]})
    assert len(mem.meta.probes()) == n
    assert mem.meta.add_probe("react", "Web", "uses react", "auto") is False


def test_compact_dry_run_changes_nothing_and_shows_the_plan(tmp_path):
    mem = guarded_memory(tmp_path)
    mem.meta.add_probe("deploy branch", "Api", "2026-01-07: deploy branch is main", "manual")
    before = snapshot(tmp_path)
    states_before = {k: (v.last_used, v.stability) for k, v in mem.meta.states.items()}
    text, code = ms.compact(mem, dry_run=True)
    assert code == 0
    assert "plan: archive 2 fact(s) from 2 entities" in text  # the probe's fact is kept out of the plan
    for entity, fact in FADED[:2]:
        assert f"{entity}: faded: {fact}" in text
    assert "kept: Api: 2026-01-07: deploy branch is main" in text
    assert "dry run: nothing changed." in text
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "archive").exists()
    assert {k: (v.last_used, v.stability) for k, v in mem.meta.states.items()} == states_before


def test_compact_keeps_what_a_failing_probe_needs_and_archives_the_rest(tmp_path):
    """One probe must not block a whole clean-up: the fact it needs stays, the other faded facts go, and only
    once the probes pass on the smaller plan."""
    mem = guarded_memory(tmp_path)
    mem.meta.add_probe("deploy branch", "Api", "2026-01-07: deploy branch is main", "manual")
    mem.meta.add_probe("react", "Web", "uses react", "manual")
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0, text
    assert 'would fail: "deploy branch" -> Api: 2026-01-07: deploy branch is main' in text
    assert "kept 1 planned fact(s) those probes need" in text and text.count(": pass") == 1
    assert "archived 2 fact(s)" in text
    assert facts_of(mem, "Api") == ["2026-01-07: deploy branch is main", "runs on port 8080"]
    assert facts_of(mem, "Web") == ["uses react"]
    assert [f.text for f in mem.store.read_archive("Api")] == ["2026-01-05: old staging host was box12"]


def test_compact_rolls_back_when_the_probes_still_fail(tmp_path, monkeypatch):
    monkeypatch.setattr(ms, "GUARD_ROUNDS", 1)  # no second check: the plan that fails is the last one
    mem = guarded_memory(tmp_path)
    mem.meta.add_probe("deploy branch", "Api", "2026-01-07: deploy branch is main", "manual")
    mem.meta.add_probe("react", "Web", "uses react", "manual")
    before = snapshot(tmp_path)
    history = mem.meta.conn.execute("SELECT count(*) FROM history").fetchone()[0]
    text, code = ms.compact(mem, dry_run=False)
    assert code == 1
    assert "hit rate 100.0% now, 50.0% after" in text and "FAIL" in text
    assert 'would fail: "deploy branch" -> Api: 2026-01-07: deploy branch is main' in text
    assert "rolled back: nothing changed" in text and "still failing" in text
    assert snapshot(tmp_path) == before  # memory.jsonl byte-identical, no archive, no backup
    assert not (tmp_path / "archive").exists()
    assert mem.meta.conn.execute("SELECT count(*) FROM history").fetchone()[0] == history
    assert facts_of(mem, "Api") == GUARD_GRAPH[0][2]


def test_compact_keeps_every_planned_fact_of_an_entity_probe(tmp_path):
    mem = guarded_memory(tmp_path)
    call(mem, "delete_observations", {"deletions": [{"entityName": "Web", "observations": ["uses react"]}]})
    call(mem, "add_observations", {"observations": [{"entityName": "Web", "contents": ["2026-01-08: moved to react"]}]})
    set_age(mem, [("Web", "2026-01-08: moved to react")], 24 * 365)  # every Web fact faded
    mem.meta.add_probe("jquery react", "Web", "", "manual")
    before = snapshot(tmp_path)
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0 and 'would fail: "jquery react" -> Web' in text
    assert snapshot(tmp_path)["memory.jsonl"] != before["memory.jsonl"]  # Api's faded facts went
    assert facts_of(mem, "Web") == ["2026-01-06: legacy jquery plugin removed", "2026-01-08: moved to react"]


def test_compact_commits_when_no_probe_would_fail(tmp_path):
    mem = guarded_memory(tmp_path)
    call(mem, "mark_fact", {"entityName": "Api", "observation": "2026-01-07: deploy branch is main", "action": "pin"})
    mem.meta.add_probe("deploy branch", "Api", "2026-01-07: deploy branch is main", "manual")
    mem.meta.add_probe("react", "Web", "uses react", "manual")
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0, text
    assert "plan: archive 2 fact(s) from 2 entities" in text
    assert "hit rate 100.0% now, 100.0% after" in text and "pass" in text
    assert "archived 2 fact(s)" in text
    assert file_facts(mem, "Api") == ["2026-01-07: deploy branch is main", "runs on port 8080"]
    assert file_facts(mem, "Web") == ["uses react"]
    assert [(a.text, a.why) for a in mem.store.read_archive("Api")] == [
        ("2026-01-05: old staging host was box12", "compacted (faded)")]
    assert [(a.text, a.why) for a in mem.store.read_archive("Web")] == [
        ("2026-01-06: legacy jquery plugin removed", "compacted (faded)")]
    assert list((tmp_path / "backups").glob("*before-compact*"))
    # restorable
    text = call(mem, "archived_observations", {"entityName": "Api", "restore": ["2026-01-05: old staging host was box12"]})
    assert "Restored 1 fact(s) to Api" in text
    assert "2026-01-05: old staging host was box12" in file_facts(mem, "Api")
    assert mem.store.read_archive("Api") == []


def test_compact_within_the_allowed_drop_commits(tmp_path):
    mem = guarded_memory(tmp_path, MEMORY_GUARDRAIL_MAX_DROP=0.5)
    mem.meta.add_probe("deploy branch", "Api", "2026-01-07: deploy branch is main", "manual")
    mem.meta.add_probe("react", "Web", "uses react", "manual")
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0, text
    assert "(max drop 50.0%): pass" in text and "archived 3 fact(s)" in text
    assert file_facts(mem, "Api") == ["runs on port 8080"]


def test_compact_without_probes_is_conservative(tmp_path):
    """Issue 10 item 1: with no probes there is nothing to guard recall with: faded facts are kept."""
    mem = guarded_memory(tmp_path)
    before = mem.settings.file_path.read_bytes()
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0
    assert "no probes recorded yet" in text
    assert "plan: archive 0 fact(s)" in text and "kept 3 faded fact(s): no probes" in text
    assert "nothing to do." in text
    assert mem.settings.file_path.read_bytes() == before
    assert mem.store.read_archive("Api") == []


def test_compact_never_archives_pinned_or_fresh_facts(tmp_path):
    mem = guarded_memory(tmp_path)
    for entity, fact in FADED:
        call(mem, "mark_fact", {"entityName": entity, "observation": fact, "action": "pin"})
    set_age(mem, FADED, 24 * 365)
    before = mem.settings.file_path.read_bytes()
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0 and "plan: archive 0 fact(s)" in text
    assert mem.settings.file_path.read_bytes() == before


def test_compact_archives_the_oldest_dated_facts_over_the_cap(tmp_path):
    facts = [f"2026-01-{i:02d}: deployed 1.{i}" for i in range(1, 18)] + ["written in Go"]
    mem = make_memory(tmp_path, [("Api", "service", facts)])
    assert "entities over the cap of 15: 1 (3 dated facts would move to the archive)" in ms.lint_report(mem)
    text, code = ms.compact(mem, dry_run=False)
    assert code == 0 and "archived 3 fact(s)" in text
    assert file_facts(mem, "Api") == facts[3:]
    assert [(a.text, a.why) for a in mem.store.read_archive("Api")] == [
        (f, "compacted (over cap)") for f in facts[:3]]


def test_compact_can_be_undone(tmp_path):
    mem = guarded_memory(tmp_path, MEMORY_GUARDRAIL_MAX_DROP=1.0)
    mem.meta.add_probe("react", "Web", "uses react", "manual")
    ms.compact(mem, dry_run=False)
    assert file_facts(mem, "Api") == ["runs on port 8080"]
    assert mem.undo().startswith("Undone: compact")
    assert file_facts(mem, "Api") == GUARD_GRAPH[0][2]
    assert file_facts(mem, "Web") == GUARD_GRAPH[1][2]
    assert mem.store.read_archive("Api") == [] and mem.store.read_archive("Web") == []


def test_new_dated_fact_over_the_cap_archives_the_oldest_dated(tmp_path):
    facts = [f"2026-01-{i:02d}: deployed 1.{i}" for i in range(1, 15)] + ["written in Go"]
    mem = make_memory(tmp_path, [("Api", "service", facts)])
    text = call(mem, "add_observations", {"observations": [{"entityName": "Api",
                                                            "contents": ["2026-02-01: deployed 2.0"]}]})
    assert "1 oldest dated archived (cap 15)" in text
    assert file_facts(mem, "Api") == facts[1:] + ["2026-02-01: deployed 2.0"]
    assert [(a.text, a.why) for a in mem.store.read_archive("Api")] == [("2026-01-01: deployed 1.1", "over cap")]


# ---------------------------------------------------------------- reconcile after outside edits
def test_entity_appended_by_hand_is_seen(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"])])
    call(mem, "read_graph", {})
    line = json.dumps({"type": "entity", "name": "Hand", "entityType": "note",
                       "observations": ["added by hand with vim", "second hand fact"]})
    with open(mem.settings.file_path, "a", encoding="utf-8") as fh:
        fh.write("\n" + line)
    text = call(mem, "recall", {"query": "vim"})
    assert "added by hand with vim" in text
    assert ("Hand", "added by hand with vim") in mem.meta.states
    assert ("Hand", "second hand fact") in mem.meta.states
    assert db_row(mem, "Hand", "second hand fact") is not None
    assert db_row(mem, "Hand", "second hand fact")[2] == 168.0
    assert "Hand (2)" in call(mem, "read_graph", {})


def test_facts_removed_by_hand_lose_their_state(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go", "runs on port 8080"]),
                                 ("Web", "service", ["uses React"])])
    call(mem, "open_nodes", {"names": ["Api", "Web"]})
    assert db_row(mem, "Api", "runs on port 8080") is not None
    write_graph(mem.settings.file_path, [("Api", "service", ["written in Go"])])
    call(mem, "read_graph", {})
    assert ("Api", "runs on port 8080") not in mem.meta.states
    assert ("Web", "uses React") not in mem.meta.states
    assert db_row(mem, "Api", "runs on port 8080") is None
    assert db_row(mem, "Web", "uses React") is None
    assert db_row(mem, "Api", "written in Go") is not None
    assert sorted(r[0] for r in mem.meta.conn.execute("SELECT text FROM facts")) == ["written in Go"]


def test_corrupt_memory_db_is_moved_aside_and_rebuilt(tmp_path, capsys):
    entities = [("Api", "service", ["written in Go", "runs on port 8080"]), ("Web", "service", ["uses React"])]
    path = tmp_path / "memory.jsonl"
    write_graph(path, entities, [("Web", "Api", "depends_on")])
    graph_bytes = path.read_bytes()
    (tmp_path / "memory.db").write_bytes(b"this is not sqlite\x00" + bytes(random.Random(1).randrange(256)
                                                                          for _ in range(4096)))
    mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": str(path)}), client="t")
    err = capsys.readouterr().err
    assert "warning" in err and "memory.db" in err and "rebuilt" in err
    assert list(tmp_path.glob("memory.db.corrupt-*"))
    text = call(mem, "open_nodes", {"names": ["Api", "Web"]})
    for _, _, facts in entities:
        for fact in facts:
            assert fact in text
            assert ("Api" if fact != "uses React" else "Web", fact) in mem.meta.states
    assert path.read_bytes() == graph_bytes
    assert mem.meta.conn.execute("SELECT count(*) FROM facts").fetchone()[0] == 3
    call(mem, "add_observations", {"observations": [{"entityName": "Web", "contents": ["served from a CDN"]}]})
    assert file_facts(mem, "Web") == ["uses React", "served from a CDN"]


# ---------------------------------------------------------------- undo
def test_undo_add_fact(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"])])
    call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": ["runs on port 8080"]}]})
    assert file_facts(mem, "Api") == ["written in Go", "runs on port 8080"]
    assert mem.undo().startswith("Undone: add facts to Api")
    assert file_facts(mem, "Api") == ["written in Go"]
    with pytest.raises(ms.ToolError, match="nothing to undo"):
        mem.undo()


def test_undo_supersede_restores_the_old_value(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["deploy branch is main"])])
    call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": ["deploy branch is prod"]}]})
    mem.undo()
    assert file_facts(mem, "Api") == ["deploy branch is main"]
    assert mem.store.read_archive("Api") == []


def test_undo_delete_entity_with_relations(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"]), ("Web", "service", ["uses React"]),
                                 ("Alice", "person", [])],
                      [("Web", "Api", "depends_on"), ("Alice", "Api", "maintains"), ("Alice", "Web", "maintains")])
    text = call(mem, "delete_entities", {"entityNames": ["Api"]})
    assert "Deleted 1 entities, 2 relations" in text
    assert mem.fresh_graph().get("Api") is None
    mem.undo()
    graph = mem.fresh_graph()
    assert graph.get("Api").observations == ["written in Go"]
    assert {r.key for r in graph.relations} == {("Web", "Api", "depends_on"), ("Alice", "Api", "maintains"),
                                                ("Alice", "Web", "maintains")}


def test_undo_rename(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"]), ("Web", "service", [])],
                      [("Web", "Api", "depends_on")])
    call(mem, "rename_entity", {"name": "Api", "newName": "Backend"})
    assert mem.fresh_graph().get("Backend") and mem.fresh_graph().get("Api") is None
    mem.undo()
    graph = mem.fresh_graph()
    assert graph.get("Backend") is None
    assert graph.get("Api").observations == ["written in Go"]
    assert [r.key for r in graph.relations] == [("Web", "Api", "depends_on")]


def test_undo_rename_keeps_fact_state(tmp_path):
    """rename_entity carries pins and stability over (MetaStore.move_facts); undoing it must carry them back."""
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"])])
    call(mem, "mark_fact", {"entityName": "Api", "observation": "written in Go", "action": "pin"})
    call(mem, "open_nodes", {"names": ["Api"]})  # stability 252
    call(mem, "rename_entity", {"name": "Api", "newName": "Backend"})
    assert mem.meta.states[("Backend", "written in Go")].pinned
    mem.undo()
    call(mem, "read_graph", {})
    state = mem.meta.states[("Api", "written in Go")]
    assert state.pinned
    assert state.stability == pytest.approx(252.0)


def test_undo_refuses_when_the_entity_changed_since(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"])])
    call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": ["runs on port 8080"]}]})
    # someone edits Api by hand afterwards
    write_graph(mem.settings.file_path, [("Api", "service", ["written in Go", "runs on port 8080",
                                                             "edited by hand in vim"])])
    before = mem.settings.file_path.read_bytes()
    with pytest.raises(ms.ToolError, match="changed since"):
        mem.undo()
    assert mem.settings.file_path.read_bytes() == before
    # the refusal leaves the history entry in place (nothing was undone)
    assert mem.meta.conn.execute("SELECT count(*) FROM history WHERE undone=1").fetchone()[0] == 0


def test_undo_refuses_after_a_later_tool_change_to_the_same_entity(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"]), ("Web", "service", [])])
    call(mem, "add_observations", {"observations": [{"entityName": "Api", "contents": ["runs on port 8080"]}]})
    call(mem, "add_observations", {"observations": [{"entityName": "Web", "contents": ["uses React"]}]})
    mem.undo()  # the Web change
    assert file_facts(mem, "Web") == []
    mem.undo()  # then the Api change
    assert file_facts(mem, "Api") == ["written in Go"]


def test_names_have_a_length_limit_and_refusals_do_not_echo_them(tmp_path):
    mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}))
    huge = "n" * 100_000
    text, _ = mem.call_tool("create_entities", {"entities": [{"name": huge, "entityType": "t", "observations": []},
                                                             {"name": "ok", "entityType": "t" * 201, "observations": []}]})
    assert "over the 200-char limit" in text and len(text) < 1000
    assert not (tmp_path / "memory.jsonl").exists() or huge not in (tmp_path / "memory.jsonl").read_text()
    mem.call_tool("create_entities", {"entities": [{"name": "a", "entityType": "t", "observations": []},
                                                   {"name": "b", "entityType": "t", "observations": []}]})
    text, _ = mem.call_tool("create_relations", {"relations": [{"from": "a", "to": "b", "relationType": "r" * 5000}]})
    assert "refused" in text and len(text) < 1000
    text, is_error = mem.call_tool("rename_entity", {"name": "a", "newName": huge})
    assert is_error and "200-char limit" in text and len(text) < 1000


def test_a_refused_secret_is_never_quoted_back(tmp_path):
    mem = ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}))
    mem.call_tool("create_entities", {"entities": [{"name": "svc", "entityType": "t", "observations": []}]})
    secret = "ghp_" + "a1B2c3D4e5" * 4
    text, is_error = mem.call_tool("add_observations", {"observations": [{"entityName": "svc",
                                                                          "contents": [f"ci token is {secret}"]}]})
    assert is_error and "credential" in text and secret[:12] not in text


def test_the_acting_client_is_an_argument_of_one_call(tmp_path):
    """call_tool(..., client=X) records X for that call only (history, ledger, fact source); the Memory's own
    client is back for the next call, also when the call fails."""
    mem = make_memory(tmp_path, [("Api", "service", ["written in Go"])])
    mem.client = "claude-code"
    text, error = mem.call_tool("add_observations", {"observations": [{"entityName": "Api", "contents": ["uses gRPC"]}]},
                                client="ui")
    assert not error, text
    mem.call_tool("open_nodes", {"names": ["Api"]}, client="codex")
    mem.call_tool("add_observations", {"observations": [{"entityName": "Nope", "contents": ["x"]}]}, client="cursor")
    mem.call_tool("add_observations", {"observations": [{"entityName": "Api", "contents": ["port 8080"]}]})
    assert mem.client == "claude-code"
    assert mem.meta.states[("Api", "uses gRPC")].client == "ui"
    assert mem.meta.states[("Api", "port 8080")].client == "claude-code"
    clients = [row[0] for row in mem.meta.conn.execute("SELECT client FROM history ORDER BY id")]
    assert clients == ["ui", "claude-code"]
    ledger = {row[0] for row in mem.meta.conn.execute("SELECT client FROM ledger_days")}
    assert "codex" in ledger and "ui" not in ledger
