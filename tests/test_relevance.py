"""Relevance: the word table (paraphrases, whole words only, the server without it), the weak-match hint,
the one recall pipeline the guardrail shares, and the honesty rules of the benchmarks."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import conftest
from conftest import ROOT, StdioServer, call, make_memory, write_graph

import memory_server as ms

sys.path.insert(0, str(ROOT / "tools"))

TEAM = [
    ("Dana Okafor", "person", ["based in Cape Town", "maintains the billing exports"]),
    ("Lee Park", "person", ["based in Lisbon", "owns the search service"]),
    ("capacity review", "meeting", ["capacity planning for the storage cluster every quarter"]),
]
PARAPHRASE = "which colleague works in South Africa?"


def stdio_recall(memory_file: Path, query: str, server_path: Path | None = None) -> str:
    """recall through a real server over stdio (the checked-in one unless server_path is given)."""
    if server_path is not None:
        saved, conftest.SERVER = conftest.SERVER, server_path
    try:
        server = StdioServer(memory_file)
    finally:
        if server_path is not None:
            conftest.SERVER = saved
    try:
        server.initialize()
        text, is_error = server.call("recall", {"query": query})
        assert not is_error, text
        return text
    finally:
        server.close()


@pytest.fixture
def team_file(tmp_path):
    path = tmp_path / "memory.jsonl"
    write_graph(path, TEAM)
    return path


def test_a_paraphrase_is_found_through_the_word_table(team_file):
    """No word of the question is in the fact: Cape Town is part of South Africa, found through the table."""
    text = stdio_recall(team_file, PARAPHRASE)
    assert "based in Cape Town" in text
    assert "based in Lisbon" not in text


def test_without_the_data_file_the_server_works_and_lint_says_so(team_file, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(ROOT / "memory_server.py", bare / "memory_server.py")
    assert "based in Cape Town" not in stdio_recall(team_file, PARAPHRASE, bare / "memory_server.py")
    assert "based in Cape Town" in stdio_recall(team_file, "who is in Cape Town?", bare / "memory_server.py")
    lint = subprocess.run([sys.executable, str(bare / "memory_server.py"), "--lint"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MEMORY_FILE_PATH": str(team_file)})
    assert "word table: wordtable.tsv.gz not found" in lint.stdout, lint.stdout + lint.stderr


def test_related_words_match_whole_words_never_prefixes(tmp_path):
    """'ceiling' is related to 'cap' in WordNet; 'capacity' starts with 'cap' but must not match it."""
    related = dict(ms.query_terms("ceiling")[0].related)
    assert "cap" in related
    mem = make_memory(tmp_path, TEAM + [("budget", "rule", ["a hard cap of 40k EUR on cloud spend"])])
    text = call(mem, "recall", {"query": "ceiling"})
    assert "hard cap" in text
    assert "capacity planning" not in text


def test_a_query_word_the_graph_has_weighs_its_related_words_less():
    alone = dict(ms.query_terms("colleague")[0].related)
    present = dict(ms.query_terms("colleague", lambda s: True)[0].related)
    assert alone and all(present[w] == pytest.approx(alone[w] * ms.TABLE_IN_GRAPH) for w in present)


def test_inflected_phrases_meet_the_table(tmp_path):
    """'giving back' is the table's 'give back', a synonym of refund."""
    assert any(t.phrase and t.word == "giving back" for t in ms.query_terms("who approves giving back money"))


def test_a_weak_match_says_so_and_suggests_what_to_try(team_file):
    weak = stdio_recall(team_file, "quarterly revenue forecast for investors")
    assert "Weak match" in weak and "Try other words" in weak
    assert "revenue" in weak.split("Weak match", 1)[1]  # names the words nothing had
    strong = stdio_recall(team_file, "who maintains the billing exports?")
    assert "maintains the billing exports" in strong and "Weak match" not in strong


def test_the_hint_never_breaks_the_budget(tmp_path):
    mem = make_memory(tmp_path, TEAM)
    for budget in (50, 60, 80, 120):
        text = call(mem, "recall", {"query": "quarterly revenue forecast for our investors", "budget": budget})
        assert ms.estimate_tokens(text) <= budget


def test_the_guardrail_runs_the_recall_agents_get(tmp_path, monkeypatch):
    """Probes go through recall_pipeline with the memory's strength, anchor penalty and flags; a fact recall
    shows as context of a named entity (no query word in it) is a hit for the guardrail too."""
    entities = [("shop-api", "service", ["written in Go", "deploys every Tuesday", "owned by the payments squad"])]
    mem = make_memory(tmp_path, entities)
    text = call(mem, "recall", {"query": "shop-api deploys"})
    assert "owned by the payments squad" in text  # context: the query names shop-api
    calls = []
    real = ms.recall_pipeline

    def spy(index, graph, query, budget, strength, penalty, notes, **kwargs):
        calls.append((strength, penalty, sorted(kwargs)))
        return real(index, graph, query, budget, strength, penalty, notes, **kwargs)

    monkeypatch.setattr(ms, "recall_pipeline", spy)
    probes = [("shop-api deploys", "shop-api", "owned by the payments squad", "test")]
    results = ms.run_probes(probes, mem.fresh_graph(), mem.settings.recall_budget, mem)
    assert results[0].hit
    assert calls == [(mem.lifecycle.strength, mem.anchors.rank_penalty, ["dense", "flags"])]  # flags and embeddings too


def test_synonym_groups_hold_no_word_of_the_corpus_paraphrase_questions():
    import bench_corpus
    asked = {ms.stem(w) for q in bench_corpus.questions() if q["kind"] == "paraphrase" for w in ms.tokenize(q["q"])}
    listed = {ms.stem(w) for group in ms.SYNONYM_GROUPS for w in group.split()}
    assert not asked & listed


def test_the_word_table_rebuilds_byte_identical(tmp_path):
    if not Path("/usr/share/wordnet/data.noun").exists():
        pytest.skip("wordnet-base is not installed (apt-get install wordnet-base) to rebuild the table from")
    out = tmp_path / "wordtable.tsv.gz"
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_wordtable.py"), "--out", str(out)], check=True,
                   capture_output=True, timeout=300)
    assert out.read_bytes() == (ROOT / "wordtable.tsv.gz").read_bytes()


BILLING = [
    ("billing-engine", "service", [f"2026-01-{d:02d}: deployed release 4.{d}.0 with minor fixes" for d in range(1, 15)]
     + ["written in Go; owned by the payments squad", "invoices are retried three times with exponential backoff",
        "talks to Stripe through the payments gateway"]),
    ("notification-worker", "service", ["email retries use exponential backoff capped at one hour",
                                        "written in Python"]),
]


def test_a_question_naming_an_entity_gets_the_facts_with_its_specific_words_first(tmp_path):
    """Issue 10: "billing-engine retry backoff" must not return billing-engine's 17 facts because its name
    matched them all. The facts with the specific words come first, wherever they are; the named entity's
    other facts only fill the room left, as nearby context (counted apart, marked «~»)."""
    path = tmp_path / "memory.jsonl"
    write_graph(path, BILLING)
    server = StdioServer(path)
    try:
        server.initialize()
        tight, _ = server.call("recall", {"query": "billing-engine retry backoff", "budget": 80})
        roomy, _ = server.call("recall", {"query": "billing-engine retry backoff", "budget": 400})
    finally:
        server.close()
    assert "invoices are retried three times" in tight and "email retries use exponential backoff" in tight
    assert "deployed release" not in tight and "2 shown + 2 nearby" in tight  # the name alone is no match
    assert "2 shown + 6 nearby" in roomy  # room left: the named entity's nearest other facts fill it
    lines = [line for line in roomy.splitlines() if "deployed release" in line]
    assert lines and all(line.endswith("«~»") for line in lines)
