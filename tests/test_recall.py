"""Recall, search and the savings ledger, in process (memory_server.Memory), no subprocess.

Covers: the hard token budget of recall (a seeded property test over random graphs), an honest footer
(matched = shown + left out by budget + below relevance gate), the relevance gate, ranking and partial
words, search_nodes (name matches first, limit, every word must match), read_graph without fact text,
open_nodes "did you mean", and the ledger arithmetic behind receipts() and report().
"""
import json
import random
import re
import string
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).absolute().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import memory_server as ms  # noqa: E402
from conftest import call, make_memory  # noqa: E402


# ---------------------------------------------------------------- helpers
def parse_recall(text):
    """(facts shown as (entity, line text), footer numbers) of a recall answer. The footer is the last line;
    its numbers are read by their words, not by an exact layout."""
    lines = text.split("\n")
    footer = lines[-1]
    if "nothing matched" in footer:
        assert len(lines) == 1, text
        return [], {"matched": 0, "shown": 0, "used": 0, "budget": None, "left": 0, "gate": 0}

    def number(pattern, required=True):
        m = re.search(pattern, footer)
        assert m or not required, f"footer lacks {pattern!r}: {footer!r}"
        return int(m.group(1)) if m else 0

    numbers = {"matched": number(r"(\d+) matched"), "shown": number(r"matched, (\d+) shown"),
               "nearby": number(r"(\d+) nearby", False),
               "used": number(r"~(\d+)/\d+ tokens"), "budget": number(r"~\d+/(\d+) tokens"),
               "left": number(r"(\d+) over budget", False),
               "gate": number(r"(\d+) below gate", False)}
    shown, entity = [], None
    for line in lines[:-1]:
        if line.startswith("## "):
            entity = line[3:line.rindex(" [")] if line.endswith("]") else line[3:]  # no type under small budgets
        elif line.startswith("- "):
            shown.append((entity, line[2:]))
        else:
            pytest.fail(f"unexpected line in recall answer: {line!r}")
    return shown, numbers


def fact_of_line(mem, entity, line):
    """The fact a recall line shows (the line may add « » marks and [flags] after the text)."""
    candidates = [f for f in mem.fresh_graph().get(entity).observations if line.startswith(f)]
    assert candidates, (entity, line)
    return max(candidates, key=len)


def shown_texts(text):
    return [line for _, line in parse_recall(text)[0]]


# ---------------------------------------------------------------- the budget property
VOCAB = ("deploy deployment deploying api server database postgres redis cache queue worker billing invoice "
         "payment auth login token session frontend backend build pipeline release branch main staging prod "
         "migration schema index latency timeout retry error crash log metrics alert owner team oncall docs "
         "readme config flag feature test coverage docker kubernetes cluster node region bucket storage backup "
         "cron nightly weekly vpn firewall port dns certificate").split()
TYPES = ["service", "person", "project", "database", "decision", "library"]


def random_word(rng):
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9)))


def random_fact(rng):
    words = []
    target = rng.choice([rng.randint(5, 40)] * 3 + [rng.randint(40, 120)] * 3 + [rng.randint(120, 300)] * 2
                        + [rng.randint(300, 600)])
    while len(" ".join(words)) < target:
        words.append(rng.choice(VOCAB) if rng.random() < 0.6 else random_word(rng))
    fact = " ".join(words)
    if rng.random() < 0.2:
        fact = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}: {fact}"
    return fact


def random_graph(rng):
    entities = []
    for i in range(rng.randint(1, 25)):
        name = f"{rng.choice(VOCAB)}-{random_word(rng)}-{i}"
        facts = list(dict.fromkeys(random_fact(rng) for _ in range(rng.randint(0, 14))))
        entities.append((name, rng.choice(TYPES), facts))
    names = [e[0] for e in entities]
    relations = {(rng.choice(names), rng.choice(names), rng.choice(["depends_on", "owns", "uses", "part_of"]))
                 for _ in range(rng.randint(0, 2 * len(names)))}
    return entities, sorted(relations)


def random_query(rng, entities):
    words = []
    for _ in range(rng.randint(1, 7)):
        r = rng.random()
        if r < 0.55:
            words.append(rng.choice(VOCAB))
        elif r < 0.75:
            words.append(random_word(rng))  # noise
        elif r < 0.85:
            words.append(rng.choice(["the", "and", "what", "is", "of", "how"]))
        else:
            name, _, facts = rng.choice(entities)
            words.append(rng.choice(name.split("-")) if not facts or rng.random() < 0.5
                         else rng.choice(rng.choice(facts).split()))
    if rng.random() < 0.05:
        words = words * 20  # a very long query: its echo in the footer must still fit
    return " ".join(words)


def random_budget(rng):
    return rng.choice([50, 50, 51, 55, 64, 80, 100, 150, rng.randint(50, 400), rng.randint(50, 3000), 3000])


@pytest.mark.parametrize("seed", range(50))
def test_recall_never_exceeds_budget_and_footer_adds_up(tmp_path, seed):
    rng = random.Random(seed)
    entities, relations = random_graph(rng)
    mem = make_memory(tmp_path, entities, relations)
    mem.fresh_graph()
    fade = seed % 2 == 1
    if fade:  # some facts faded, some pinned: flags ([fading 0.12], [pinned]) cost tokens too
        now = time.time()
        keys = [(n, f) for n, _, facts in entities for f in facts]
        for key in rng.sample(keys, len(keys) // 3):
            state = mem.meta.state(*key)
            state.last_used = now - rng.uniform(100, 5000) * 3600
            state.pinned = rng.random() < 0.2
        mem.meta.save_states(keys)
    all_facts = [(n, f) for n, _, facts in entities for f in facts]

    for _ in range(3):
        query = random_query(rng, entities)
        budget = random_budget(rng)
        text, is_error = mem.call_tool("recall", {"query": query, "budget": budget})
        assert not is_error, text
        assert ms.estimate_tokens(text) <= budget, (query, budget, text)
        shown, n = parse_recall(text)
        assert n["budget"] in (budget, None)
        assert n["shown"] + n.get("nearby", 0) == len(shown)  # nearby: other facts of an entity the query names
        assert n["matched"] == n["shown"] + n["left"] + n["gate"], text
        assert n["matched"] <= len(all_facts)
        # every fact containing a query word (not a stop word) as a whole word is counted as matched
        words = list(dict.fromkeys(ms.tokenize(query)))
        content = {w for w in words if w not in ms.STOP_WORDS} or set(words)
        containing = sum(1 for _, f in all_facts if content & set(ms.tokenize(f)))
        assert n["matched"] >= containing, (query, text)
        if n["matched"] == 0:
            assert "nothing matched" in text
        shown = [(entity, fact_of_line(mem, entity, line)) for entity, line in shown]
        if not fade and n["matched"]:
            # with room for everything, the facts left out by budget appear and nothing else changes
            big, _ = mem.call_tool("recall", {"query": query, "budget": 100_000})
            big_shown, bn = parse_recall(big)
            assert bn["left"] == 0
            assert bn["matched"] == n["matched"]
            assert bn["gate"] == n["gate"]
            assert bn["shown"] == n["shown"] + n["left"]
            big_shown = [(entity, fact_of_line(mem, entity, line)) for entity, line in big_shown]
            assert len(set(big_shown)) == len(big_shown)
            assert set(shown) <= set(big_shown)


def test_recall_budget_below_50_is_a_clear_error(tmp_path):
    mem = make_memory(tmp_path, [("Api", "service", ["deploy branch is main"])])
    for budget in (49, 10, 0, -5):
        text, is_error = mem.call_tool("recall", {"query": "deploy", "budget": budget})
        assert is_error
        assert f"budget {budget} is too small" in text and "at least 50" in text
    text = call(mem, "recall", {"query": "deploy", "budget": 50})
    assert ms.estimate_tokens(text) <= 50
    assert "deploy branch is main" in text


def test_recall_default_budget_comes_from_settings(tmp_path):
    facts = [f"deploy step {i}: run the {w} task before the release" for i, w in enumerate(VOCAB[:30])]
    mem = make_memory(tmp_path, [("Pipeline", "process", facts)], MEMORY_RECALL_BUDGET=120)
    text = call(mem, "recall", {"query": "deploy step"})
    assert ms.estimate_tokens(text) <= 120
    _, n = parse_recall(text)
    assert n["budget"] == 120


def test_footer_says_how_many_were_left_out_by_budget(tmp_path):
    facts = [f"deploy step {i:02d} runs the {w} task" for i, w in enumerate(VOCAB[:40])]
    mem = make_memory(tmp_path, [("Pipeline", "process", facts)])
    text = call(mem, "recall", {"query": "deploy", "budget": 100})
    shown, n = parse_recall(text)
    assert n["matched"] == 40
    assert 0 < n["shown"] == len(shown) < 40
    assert n["gate"] == 0
    assert n["left"] == 40 - n["shown"]
    assert f"{40 - n['shown']} over budget" in text
    assert ms.estimate_tokens(text) <= 100
    # with a budget that fits everything, nothing is left out and the footer says so
    text = call(mem, "recall", {"query": "deploy", "budget": 3000})
    _, n = parse_recall(text)
    assert n["shown"] == 40 and n["left"] == 0
    assert "over budget" not in text


def test_pack_facts_hard_budget_even_when_footer_alone_is_long():
    """The packer's own guarantee ("the hard guarantee, whatever the estimates said") at the minimum budget,
    with a long query and very many matches: the footer alone must not break it."""
    facts = [ms.ScoredFact("E", f"fact {i}", 1.0, 1.0, ["alpha"]) for i in range(10_000)]
    ranking = ms.Ranking(facts, ms.query_terms("alpha beta"), 1_000_000, 990_000)
    packed = ms.pack_facts("alpha beta " * 20, ranking, 50, {"E": "note"}, lambda f: "")
    assert packed.matched == 1_000_000
    assert ms.estimate_tokens(packed.text) <= 50, packed.text


def test_footer_accounts_for_every_match_when_many_facts_match(tmp_path):
    """More matches than the ranker scores in full (2500 equally relevant facts): every match is still
    accounted for as shown, left out by budget or below the gate, and none of them is blamed on the gate."""
    entities = [(f"svc{i:03d}", "service", [f"deploy step {i} runs task {j}" for j in range(10)]) for i in range(250)]
    mem = make_memory(tmp_path, entities)
    for budget in (100_000, 200):
        text = call(mem, "recall", {"query": "deploy step", "budget": budget})
        shown, n = parse_recall(text)
        footer = text.split("\n")[-1]
        assert n["matched"] == 2500, footer
        assert n["shown"] == len(shown)
        assert n["gate"] == 0, footer
        assert n["shown"] + n["left"] == 2500, footer
        assert ms.estimate_tokens(text) <= budget


# ---------------------------------------------------------------- relevance gate
GATE_GRAPH = [
    ("Postgres", "database", ["postgres connection pool size is 20", "owner is Alice",
                              "backups run nightly at 02:00"]),
    ("Gym", "place", ["the swimming pool opens at 9", "size of locker is small"]),
    ("Office", "place", ["the connection to the office printer is flaky"]),
]


def test_off_topic_fact_never_pads_a_strong_answer(tmp_path):
    mem = make_memory(tmp_path, GATE_GRAPH)
    text = call(mem, "recall", {"query": "postgres connection pool size"})
    texts = shown_texts(text)
    assert texts[0] == "postgres connection pool size is 20"
    for off_topic in ("the swimming pool opens at 9", "size of locker is small",
                      "the connection to the office printer is flaky"):
        assert off_topic not in text
    _, n = parse_recall(text)
    assert n["gate"] >= 3
    assert f"{n['gate']} below gate" in text
    # even with a huge budget, the gate (not the budget) keeps padding out
    text = call(mem, "recall", {"query": "postgres connection pool size", "budget": 50_000})
    assert "swimming pool" not in text and "printer" not in text


def test_query_matching_nothing_says_so(tmp_path):
    mem = make_memory(tmp_path, GATE_GRAPH)
    text = call(mem, "recall", {"query": "zebra quokka"})
    assert "nothing matched" in text
    assert "- " not in text.split("\n")[0] and text.count("\n") == 0
    empty = make_memory(tmp_path / "empty")
    assert "nothing matched" in call(empty, "recall", {"query": "deploy"})


def test_empty_query_is_an_error(tmp_path):
    mem = make_memory(tmp_path, GATE_GRAPH)
    text, is_error = mem.call_tool("recall", {"query": "   "})
    assert is_error and "empty query" in text


# ---------------------------------------------------------------- ranking
def test_fact_with_query_words_beats_unrelated_facts(tmp_path):
    entities = [
        ("Api", "service", ["runs on port 8080", "written in Go", "the rate limiter allows 100 requests per minute",
                            "owned by the platform team"]),
        ("Web", "service", ["uses React 19", "served from a CDN", "rate of page loads is tracked in Grafana"]),
        ("Billing", "service", ["invoices are sent on the first day of the month", "Stripe handles payments"]),
    ]
    mem = make_memory(tmp_path, entities)
    texts = shown_texts(call(mem, "recall", {"query": "rate limiter requests"}))
    assert texts[0] == "the rate limiter allows 100 requests per minute"
    texts = shown_texts(call(mem, "recall", {"query": "stripe payments"}))
    assert texts[0] == "Stripe handles payments"
    assert "runs on port 8080" not in texts


@pytest.mark.parametrize("query", ["deploy", "deployment", "deploying", "deploys", "deployed"])
def test_partial_words_match(tmp_path, query):
    entities = [("Release", "process", ["deployment needs a green pipeline", "deploying takes ten minutes",
                                        "we deploy from the main branch", "coffee machine is on floor 2"])]
    mem = make_memory(tmp_path, entities)
    text = call(mem, "recall", {"query": query})
    for fact in entities[0][2][:3]:
        assert fact in text, (query, text)
    assert "coffee machine" not in text


def test_search_nodes_name_matches_first(tmp_path):
    entities = [
        ("Cache", "component", ["backed by redis", "redis evicts with allkeys-lru", "redis runs in cluster mode",
                                "redis memory limit is 4 GB"]),
        ("Sessions", "component", ["session data lives in redis"]),
        ("Redis", "database", ["version 7.2"]),
    ]
    mem = make_memory(tmp_path, entities)
    text = call(mem, "search_nodes", {"query": "redis"})
    lines = [l for l in text.split("\n") if l.startswith("- ")]
    assert lines[0].startswith("- Redis [database]")
    assert {l.split(" [")[0][2:] for l in lines} == {"Redis", "Cache", "Sessions"}
    assert text.startswith('3 match "redis"')
    assert "top" not in text.split("\n")[0]


def test_search_nodes_footer_when_more_match_than_the_limit(tmp_path):
    entities = [(f"svc-{i:02d}", "service", [f"service number {i} handles deploy jobs"]) for i in range(15)]
    mem = make_memory(tmp_path, entities)
    text = call(mem, "search_nodes", {"query": "deploy"})
    assert text.split("\n")[0].startswith('15 match "deploy", top 10 shown')
    assert sum(l.startswith("- ") for l in text.split("\n")) == 10
    text = call(mem, "search_nodes", {"query": "deploy", "limit": 4})
    assert text.split("\n")[0].startswith('15 match "deploy", top 4 shown')
    assert sum(l.startswith("- ") for l in text.split("\n")) == 4
    text = call(mem, "search_nodes", {"query": "deploy", "limit": 50})
    assert "top" not in text.split("\n")[0]
    assert sum(l.startswith("- ") for l in text.split("\n")) == 15

    env_mem = make_memory(tmp_path / "env", entities, MEMORY_SEARCH_LIMIT=3)
    text = call(env_mem, "search_nodes", {"query": "deploy"})
    assert text.split("\n")[0].startswith('15 match "deploy", top 3 shown')
    assert sum(l.startswith("- ") for l in text.split("\n")) == 3


def test_search_nodes_every_word_must_match(tmp_path):
    entities = [
        ("Api", "service", ["deploys to kubernetes", "written in Go"]),
        ("Web", "service", ["deploys to a CDN"]),
        ("Docs", "site", ["built with mkdocs"]),
    ]
    mem = make_memory(tmp_path, entities)
    broad = call(mem, "search_nodes", {"query": "deploys"})
    assert broad.startswith('2 match "deploys"')
    narrow = call(mem, "search_nodes", {"query": "deploys kubernetes"})
    assert narrow.startswith('1 match "deploys kubernetes"')
    assert "- Api [service]" in narrow and "Web" not in narrow
    # no entity has every word: it says so (closest entities may be offered, flagged as such)
    none = call(mem, "search_nodes", {"query": "deploys kubernetes mkdocs"})
    first = none.split("\n")[0]
    assert first.startswith("No entit") and "every word" in first
    nothing = call(mem, "search_nodes", {"query": "zebra"})
    assert nothing.startswith("No entities match") and nothing.count("\n") == 0


def test_read_graph_has_no_fact_text(tmp_path):
    entities = [("Api", "service", ["runs on port 8080", "written in Go"]),
                ("Alice", "person", ["prefers tabs over spaces"])]
    mem = make_memory(tmp_path, entities, [("Alice", "Api", "maintains")])
    text = call(mem, "read_graph", {})
    for _, _, facts in entities:
        for fact in facts:
            assert fact not in text
    assert "2 entities, 1 relations, 3 facts" in text
    assert "Api (2)" in text and "Alice (1)" in text


def test_open_nodes_unknown_name_suggests(tmp_path):
    mem = make_memory(tmp_path, [("PaymentService", "service", ["uses Stripe"]), ("Api", "service", [])])
    text = call(mem, "open_nodes", {"names": ["PaymentServce"]})
    assert 'Not found: "PaymentServce"' in text
    assert 'did you mean "PaymentService"' in text
    text = call(mem, "open_nodes", {"names": ["Api", "paymentservice"]})
    assert text.startswith("## Api [service]")
    assert 'did you mean "PaymentService"' in text


# ---------------------------------------------------------------- ledger
LEDGER_GRAPH = [
    ("Api", "service", ["runs on port 8080", "deploy branch is main", "written in Go"]),
    ("Web", "service", ["deploys to a CDN", "uses React"]),
    ("Alice", "person", ["maintains Api", "on call this week"]),
]
LEDGER_RELATIONS = [("Alice", "Api", "maintains"), ("Web", "Api", "depends_on")]


def test_receipts_add_up(tmp_path):
    mem = make_memory(tmp_path, LEDGER_GRAPH, LEDGER_RELATIONS, MEMORY_PRICE_PER_MTOK=15)
    calls = [("read_graph", {}), ("search_nodes", {"query": "deploy"}), ("search_nodes", {"query": "api"}),
             ("open_nodes", {"names": ["Api", "Alice"]}), ("open_nodes", {"names": ["Nobody"]}),
             ("read_graph", {}), ("search_nodes", {"query": "zzz"})]
    used = reference = 0
    for tool, args in calls:
        text = call(mem, tool, args)
        used += ms.estimate_tokens(text)
        reference += ms.estimate_tokens(ms.reference_answer_text(mem.fresh_graph(), tool, args))
    r = ms.receipts(mem)
    assert r["calls"] == len(calls)
    assert r["tokensUsed"] == used
    assert r["tokensReference"] == reference
    saved = max(reference - used, 0)
    assert r["tokensSaved"] == saved > 0
    assert r["pricePerMTok"] == 15.0
    assert r["dollarsSaved"] == round(saved * 15.0 / 1e6, 4)
    assert sum(d["saved"] for d in r["series"]) >= saved


def test_receipts_count_recall_against_the_entities_it_showed(tmp_path):
    mem = make_memory(tmp_path, LEDGER_GRAPH, LEDGER_RELATIONS)
    text = call(mem, "recall", {"query": "deploy"})
    graph = mem.fresh_graph()
    names = list(dict.fromkeys(e for e, _ in parse_recall(text)[0]))
    reference = ms._reference_graph_json([graph.get(n) for n in names], graph.relations_of(set(names)))
    r = ms.receipts(mem)
    assert r["calls"] == 1
    assert r["tokensUsed"] == ms.estimate_tokens(text)
    assert r["tokensReference"] == ms.estimate_tokens(reference)
    # errors are not reads: nothing recorded
    mem.call_tool("recall", {"query": "deploy", "budget": 10})
    assert ms.receipts(mem)["calls"] == 1


def test_report_on_a_new_store_says_nothing_saved_yet(tmp_path):
    mem = make_memory(tmp_path, LEDGER_GRAPH)
    text = ms.report(mem)
    assert "No reads recorded yet" in text and "nothing saved so far" in text
    assert ms.receipts(mem)["calls"] == 0 and ms.receipts(mem)["dollarsSaved"] == 0


def test_report_lines_per_tool_and_per_client(tmp_path):
    mem = make_memory(tmp_path, LEDGER_GRAPH, LEDGER_RELATIONS)
    call(mem, "read_graph", {})
    call(mem, "search_nodes", {"query": "deploy"})
    call(mem, "open_nodes", {"names": ["Api"]})
    other = ms.Memory(mem.settings, client="other-agent")
    call(other, "read_graph", {})
    text = ms.report(mem)
    r = ms.receipts(mem)
    assert text.startswith(f"4 read calls: {r['tokensUsed']:,} tokens returned")
    assert f"would have returned {r['tokensReference']:,}" in text
    assert f"Saved {r['tokensSaved']:,} tokens" in text
    lines = text.split("\n")
    per_tool = lines[lines.index("per tool:") + 1:lines.index("per client:")]
    per_client = lines[lines.index("per client:") + 1:]
    assert {l.split(":")[0].strip() for l in per_tool} == {"read_graph", "search_nodes", "open_nodes"}
    assert any(l.strip().startswith("read_graph: 2 calls") for l in per_tool)
    assert {l.split(":")[0].strip() for l in per_client} == {"t", "other-agent"}
    assert any(l.strip().startswith("t: 3 calls") for l in per_client)


def test_a_weak_match_written_near_a_strong_one_is_lifted_but_never_a_non_match(tmp_path, monkeypatch):
    """The reply written two places after the question that matched shares only a name with the query:
    it is lifted. A fact matching no query word is never lifted, and the lift reaches two places, no further."""
    chat = ["Gina: when is the studio opening night planned?", "Gina: good luck with everything",
            "Jon: tomorrow, at eight sharp", "Gina: fine", "Jon: the weather was lovely today"]
    filler = [(f"day {i}", "session", [f"Jon: note {i} about shoes", f"Gina: note {i} about cats"]) for i in range(30)]
    entities = [("session 1", "session", chat)] + filler
    query = "when is Jon's studio opening night"
    text = call(make_memory(tmp_path, entities), "recall", {"query": query})
    assert chat[0] in text and chat[2] in text, text
    assert chat[1] not in text  # next to the match, but no query word of its own: never lifted
    assert "lovely" not in text  # four places away
    monkeypatch.setattr(ms, "LIFT_AFTER", ms.LIFT_AFTER[:1])
    assert chat[2] not in call(make_memory(tmp_path / "one", entities), "recall", {"query": query})


def test_the_fact_written_after_a_strong_match_is_lifted_more_than_the_one_before(tmp_path):
    """A reply follows its question: of two equal weak matches around a strong one, the later comes first."""
    chat = ["Jon: shoes again", "Gina: when is the studio opening night planned?", "Jon: shoes again, sorry"]
    filler = [(f"day {i}", "session", [f"Jon: note {i} about cats"]) for i in range(30)]
    mem = make_memory(tmp_path, [("session 1", "session", chat)] + filler)
    mem.fresh_graph()
    ranked = [f.text for f in mem.index.rank_facts("when is Jon's studio opening night", lambda e, t: 1.0).facts]
    assert ranked[:3] == [chat[1], chat[2], chat[0]], ranked


def test_small_budget_answers_use_their_room(tmp_path):
    facts = [f"deploy note {i}: " + "x" * (40 + 7 * (i % 5)) for i in range(40)]
    mem = make_memory(tmp_path, [("ops", "runbook", facts)])
    for budget in (60, 120, 200, 333):
        text = call(mem, "recall", {"query": "deploy note", "budget": budget})
        used = ms.estimate_tokens(text)
        longest = max(ms.estimate_tokens(f"- {f}\n") for f in facts)
        assert budget - longest - 2 <= used <= budget, (budget, used)


def _first_fact(text):
    return next(l[2:].split(" «")[0] for l in text.split("\n") if l.startswith("- "))


@pytest.mark.parametrize("query, answer, other", [
    ("when was the orders database migration?",
     "orders database migration was done on 2026-01-12", "orders database migration went fine, with pg_upgrade"),
    ("how many replicas does the search cluster run?",
     "search cluster replicas: 3, one per zone", "search cluster replicas are rebuilt from snapshots"),
    ("where are the search cluster snapshots kept?",
     "search cluster snapshots are kept in s3://ops-backups", "search cluster snapshots are kept for a week"),
])
def test_a_fact_that_carries_what_the_question_asks_for_ranks_first(tmp_path, monkeypatch, query, answer, other):
    """when -> a time, how many -> a number, where -> a place or path: among facts matching the question's
    words, the one carrying the answer type comes first; with the boost off the other fact wins."""
    entities = [("ops notes", "notes", [other, answer]),
                ("office", "place", ["coffee machine fixed on 2026-02-01 at 9:30 in Berlin, floor 3"])]
    text = call(make_memory(tmp_path, entities), "recall", {"query": query})
    assert _first_fact(text) == answer, text
    assert "coffee" not in text  # the answer type reorders matches: a non-match of another entity never comes in
    monkeypatch.setattr(ms, "ANSWER_TYPE_BOOST", 0.0)
    assert _first_fact(call(make_memory(tmp_path / "off", entities), "recall", {"query": query})) == other


def test_question_words_pick_the_answer_type():
    assert ms.wanted_mention("When did we ship 2.0?").search("shipped last Friday")
    assert ms.wanted_mention("which year was the repo created").search("created in 2019")
    assert ms.wanted_mention("How many workers run?").search("runs twelve workers")
    assert ms.wanted_mention("where does the config live").search("lives in infra/config.yaml")
    assert ms.wanted_mention("where does the config live").search("kept in Vault") is not None
    assert ms.wanted_mention("what is the deploy branch") is None
    assert ms.wanted_mention("whenever we deploy, who approves?") is None


@pytest.mark.parametrize("query, fact", [
    ("can I roll out a change late in the evening?", "no deploys after 16:00"),
    ("how do people sign in to the admin portal?", "admin portal login goes through Okta SSO"),
])
def test_two_words_written_as_one_meet_its_synonyms(tmp_path, query, fact):
    entities = [("release process", "rule", [fact]), ("office", "place", ["coffee machine is on floor 2"])]
    assert fact in call(make_memory(tmp_path, entities), "recall", {"query": query})
    words = [t.word for t in ms.query_terms(query)]
    assert ("rollout" in words) or ("signin" in words), words


def test_joined_words_without_synonyms_are_not_added():
    assert [t.word for t in ms.query_terms("roll call at nine") if not t.phrase] == ["roll", "call", "nine"]


def test_the_leading_entity_adds_only_facts_carrying_what_the_question_asks_for(tmp_path, monkeypatch):
    """"how long ..." asks for a number: the leading entity's fact with one comes along (marked as nearby,
    no query word), its other facts do not, and no other entity adds anything."""
    entities = [("redis-cache", "service", ["holds shopping sessions for the web shop",
                                            "entries expire after 14 days of inactivity",
                                            "eviction policy is allkeys-lru"]),
                ("office", "place", ["coffee machine is on floor 2", "shopping list is on the fridge"])]
    text = call(make_memory(tmp_path, entities), "recall", {"query": "how long do shopping sessions stay around?"})
    assert "holds shopping sessions" in text and "entries expire after 14 days of inactivity" in text, text
    assert "eviction" not in text and "coffee" not in text
    assert "entries expire after 14 days of inactivity «~»" in text and "+ 1 nearby" in text.split("\n")[-1], text
    plain = call(make_memory(tmp_path / "plain", entities), "recall", {"query": "what holds shopping sessions?"})
    assert "entries expire" not in plain  # no answer type asked for: no context from an unnamed entity
    monkeypatch.setattr(ms, "ANSWER_CONTEXT_FACTS", 0)
    off = call(make_memory(tmp_path / "off", entities), "recall", {"query": "how long do shopping sessions stay around?"})
    assert "entries expire" not in off


def test_reference_item_sizes_are_counted_exactly_without_rendering():
    """The receipts count the reference's pretty JSON by arithmetic; it must match the real render exactly,
    for odd text too (quotes, backslashes, control characters, unicode, lone surrogates, empty lists)."""
    rng = random.Random(7)
    alphabet = ['a', 'Z', ' ', '"', '\\', '\n', '\t', '\x01', 'é', '中', '😀', '\ud800', '/', '<']
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(300)]
    for i in range(200):
        entity = {"name": texts[i], "entityType": texts[i + 1], "observations": texts[i + 2:i + 2 + rng.randint(0, 4)]}
        relation = {"from": texts[i], "to": texts[i + 3], "relationType": texts[i + 5]}
        for obj in (entity, relation):
            text = ms._pretty_json(obj)
            assert ms.pretty_item_size(obj) == len(text) + 4 * (text.count("\n") + 1), obj
