"""Work that must stay bounded on big graphs, in process (memory_server.Memory).

Covers: did-you-mean for many unknown names (an index of names, a cap per call) and its hint quality on
common typos; write-time curation of thousands of facts in one call (only the facts compare_facts could
flag are compared, with the same verdicts). Graphs are written as JSONL directly, which is quick.

The time bounds are the issue's (1 s, 5 s) on a 2-core CI machine; before the change the same calls took
35-43 s and 135-188 s.
"""
import collections
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
from conftest import call, make_memory  # noqa: E402

BASES = ["catalog", "checkout", "identity", "ledger", "notify", "payment", "search", "session", "shop", "stock"]
KINDS = ["api", "service", "worker", "web", "sync", "indexer", "gateway", "backend", "cli", "ui"]
FIRST = ["Ana", "Hana", "Kira", "Vera", "Tara", "Zoe", "Daniel", "Ivan", "Lena", "Dana", "Bea", "Ben"]
LAST = ["Fox", "Kim", "Xu", "Garcia", "Hill", "Gomez", "Rossi", "Ito", "Souza", "Laine"]


def entity_names(count: int, seed: int = 1) -> list[str]:
    """Names that look alike, as in a real graph: services with siblings, people sharing first or last names."""
    rng = random.Random(seed)
    names = [f"{b}-{k}" for b in BASES for k in KINDS] + [f"{f} {s}" for f in FIRST for s in LAST]
    while len(names) < count:
        names.append(f"{rng.choice(BASES)}-{rng.choice(KINDS)}-{len(names)}")
    return names


def big_memory(tmp_path, names, **env):
    return make_memory(tmp_path, [(n, "service", [f"fact {i}"]) for i, n in enumerate(names)], **env)


def timed(mem, tool, args):
    """CPU seconds of one call: the cost of the work itself, whatever else shares the machine's cores
    (CI runs alone; a developer's machine may be busy)."""
    start = time.process_time()
    text, _ = mem.call_tool(tool, args)
    return time.process_time() - start, text


# ---------------------------------------------------------------- did you mean
TYPOS = [  # (unknown name, the name the hint must offer)
    ("shop-backnd", "shop-backend"),          # a dropped letter
    ("Shop-Backend", "shop-backend"),         # wrong case
    ("shopbackend", "shop-backend"),          # a missing hyphen
    ("shop-bakcend", "shop-backend"),         # swapped letters
    ("ledgera-pi", "ledger-api"),             # a letter moved over the hyphen
    ("identityui", "identity-ui"),            # a missing hyphen in a short name with many siblings
    ("Haan Garcia", "Hana Garcia"),           # swapped letters at the start
    ("Kria Fox", "Kira Fox"),                 # swapped letters among 12 "* Fox" names
    ("Zoe im", "Zoe Kim"),                    # a dropped letter in a short name
    ("HanaXu", "Hana Xu"),                    # a missing space
    ("checkout-servicee", "checkout-service"),  # an added letter
    ("PAYMENT-GATEWAY", "payment-gateway"),   # all upper case
]


@pytest.mark.parametrize("unknown,meant", TYPOS)
def test_common_typos_get_the_right_hint_on_a_big_graph(tmp_path, unknown, meant):
    mem = big_memory(tmp_path, entity_names(5000))
    text = call(mem, "open_nodes", {"names": [unknown]})
    assert f'Not found: "{unknown}" (did you mean ' in text
    assert f'"{meant}"' in text.split("did you mean", 1)[1]


def test_did_you_mean_keeps_names_that_contain_the_unknown_one_first():
    names = ["billing", "api-gateway", "billing-api", "Billing-Worker"]
    assert ms.NameFinder(names).suggest("billing-ap")[:2] == ["billing", "billing-api"]  # graph order
    assert ms.NameFinder(names).suggest("BILLING") == ["billing", "billing-api", "Billing-Worker"]
    assert ms.NameFinder(names).suggest("xy") == []


def test_300_unknown_names_on_5000_entities_answer_within_a_second(tmp_path):
    names = entity_names(5000)
    mem = big_memory(tmp_path, names)
    mem.fresh_graph()  # loading the graph is not what is measured
    rng = random.Random(2)
    known = set(names)
    typos = [t for t in (n[:-2] + n[-1] for n in rng.sample(names, 400)) if t not in known][:300]
    calls = [("open_nodes", {"names": typos}),
             ("delete_observations", {"deletions": [{"entityName": t, "observations": ["x"]} for t in typos]}),
             ("create_relations", {"relations": [{"from": t, "to": names[0], "relationType": "calls"} for t in typos]})]
    for tool, args in calls:
        seconds, text = timed(mem, tool, args)
        assert seconds < 1.0, f"{tool} took {seconds:.2f} s"
        assert text.count("did you mean") == ms.HINTS_PER_CALL  # the first ones get hints, the rest are unknown
        assert all(f'"{t}"' in text for t in typos)


def test_the_name_index_alone_is_fast_enough_without_the_cap():
    names = entity_names(5000)
    finder = ms.NameFinder(names)
    rng = random.Random(3)
    wanted = rng.sample(names, 300)
    start = time.process_time()
    hints = [finder.suggest(n[:3] + n[4:]) for n in wanted]
    seconds = time.process_time() - start
    assert seconds < 3.0, f"300 suggestions took {seconds:.2f} s"  # difflib over every name: about 35 s
    assert sum(n in h for n, h in zip(wanted, hints)) >= 295


def test_hint_budget_is_per_call(tmp_path):
    mem = make_memory(tmp_path, [("shop-backend", "service", [])])
    many = [f"shop-backen{c}" for c in string.ascii_lowercase[:ms.HINTS_PER_CALL + 3]]
    text = call(mem, "open_nodes", {"names": many})
    assert text.count('did you mean "shop-backend"') == ms.HINTS_PER_CALL
    assert f'Not found: "{many[-1]}"' in text
    text, is_error = mem.call_tool("add_observations", {"observations": [{"entityName": "shop-backnd",
                                                                          "contents": ["x"]}]})
    assert is_error and 'did you mean "shop-backend"' in text  # a new call, a new budget


# ---------------------------------------------------------------- write-time curation
WORDS = ("deploy branch main staging owner team api cache ttl database postgres redis queue worker runner ci "
         "latency budget limit request minute alerts channel pager release version build nightly region eu us "
         "backup retention days weekly review ticket docs runbook").split()
FILLER = ["the", "is", "of", "to", "on", "for", "and", "not", "never", "no", "without", "it"]
SUBJECTS = ["deploy branch", "p95 latency budget", "rate limit", "main database", "cache ttl", "api version",
            "on-call owner", "backup retention", "ci runner", "release day"]


def random_fact(rng: random.Random) -> str:
    """Facts shaped like agents write them: dated events, values that change, negations, free text."""
    roll = rng.random()
    if roll < 0.3:
        return (f"2026-0{rng.randint(1, 3)}-{rng.randint(10, 28)}: deployed {rng.randint(1, 4)}.{rng.randint(0, 9)} "
                f"with {' '.join(rng.sample(WORDS, rng.randint(1, 3)))}")
    if roll < 0.6:
        value = rng.choice([str(rng.randint(1, 30) * 10), " ".join(rng.sample(WORDS, rng.randint(1, 2)))])
        negation = rng.choice(["", "", "", "not "])
        return f"{rng.choice(SUBJECTS)} is {negation}{value}" + rng.choice(["", "", " since the outage"])
    words = [rng.choice(WORDS + FILLER) for _ in range(rng.randint(1, 10))]
    return " ".join(words).capitalize() + rng.choice(["", ".", "!"])


STATES = ["open", "not started", "in progress", "blocked", "fixed and merged", "done", "closed", "rolled out to 10% of users",
          "rolled out to 50% of users", "now generally available", "released", "wontfix"]


def curation_fact(rng: random.Random) -> str:
    """random_fact, and the shapes issue 10 added rules for: compound facts (clause by clause), status reports
    (dated or not, of the entity or of a named thing), and "Key: value" / "verb by value" facts (near by word order)."""
    roll = rng.random()
    if roll < 0.15:
        return "; ".join(random_fact(rng).rstrip(".!") for _ in range(rng.randint(2, 3)))
    if roll < 0.3:
        date = rng.choice(["", "", f"2026-0{rng.randint(1, 3)}-{rng.randint(10, 28)}: "])
        subject = rng.choice(["", "", "Status: ", "login bug: ", "migration ", f"v1.{rng.randint(1, 4)} "])
        return date + subject + rng.choice(STATES)
    if roll < 0.4:
        person = " ".join(rng.sample(["Lucas", "Perez", "Maria", "Lopez", "Ana"], 2))
        return rng.choice(["Owner: ", "Owned by ", "Maintainer: ", "maintained by "]) + person
    return random_fact(rng)


def variant(rng: random.Random, text: str) -> str:
    """A fact close to another: a word dropped, swapped, replaced or negated, a date or a number changed."""
    words = text.split()
    i = rng.randrange(len(words))
    change = rng.choice(["drop", "swap", "replace", "negate", "date", "case"])
    if change == "drop" and len(words) > 1:
        del words[i]
    elif change == "swap" and len(words) > 1:
        j = rng.randrange(len(words))
        words[i], words[j] = words[j], words[i]
    elif change == "replace":
        words[i] = rng.choice(WORDS + FILLER + ["42", "7"])
    elif change == "negate":
        words.insert(i, rng.choice(["not", "never", "no"]))
    elif change == "date":
        words.insert(0, f"2026-02-{rng.randint(10, 28)}:")
    else:
        return text.upper()
    return " ".join(words)


def brute_first_flagged(facts: list[str], text: str):
    for other in facts:
        verdict = ms.compare_facts(other, text)
        if verdict:
            return verdict, other
    return None, None


def test_the_prefilter_never_drops_a_pair_compare_facts_flags():
    rng = random.Random(9)
    verdicts = collections.Counter()
    for _ in range(6000):
        old = curation_fact(rng)
        new = variant(rng, old) if rng.random() < 0.6 else curation_fact(rng)
        verdict = ms.compare_facts(old, new)
        assert ms.FactNeighbours([old]).first_flagged(new) == ((verdict, old) if verdict else (None, None)), (old, new)
        verdicts[verdict] += 1
    assert sum(verdicts.values()) - verdicts[None] > 1200  # the pairs exercise every verdict, not only "nothing in common"
    assert min(verdicts[v] for v in ("duplicate", "near", "supersede", "conflict")) > 100, verdicts


@pytest.mark.parametrize("old,new,verdict", [
    ("deploy branch is main; GitHub Actions deploys on tag v*", "deploy branch is prod", "conflict"),
    ("deploy branch is main", "deploy branch is prod; GitHub Actions deploys on tag v*", "supersede"),
    ("deploy branch is main; GitHub Actions deploys on tag v*", "deploy branch is main", "near"),
    ("Status: open", "2026-02-11: fixed and merged, closing", "supersede"),
    ("2026-02-11: Status: open", "2026-02-01: fixed and merged", None),
    ("Owned by Lucas Perez", "Owner: Lucas Perez", "near"),
])
def test_the_prefilter_finds_clause_status_and_word_order_pairs(old, new, verdict):
    assert ms.compare_facts(old, new) == verdict
    facts = [curation_fact(random.Random(i)) for i in range(30)] + [old]
    expected = brute_first_flagged(facts, new)
    assert ms.FactNeighbours(facts).first_flagged(new) == expected
    assert ms.FactNeighbours([old]).first_flagged(new) == ((verdict, old) if verdict else (None, None))


def test_first_flagged_is_the_first_in_list_order_as_a_full_scan():
    rng = random.Random(10)
    for _ in range(60):
        facts = [curation_fact(rng) for _ in range(40)]
        neighbours = ms.FactNeighbours(facts)
        for _ in range(20):
            new = variant(rng, rng.choice(facts)) if rng.random() < 0.7 else curation_fact(rng)
            expected = brute_first_flagged(facts, new)
            assert neighbours.first_flagged(new) == expected, new
            if expected[0] == "supersede":
                facts.remove(expected[1])
                neighbours.remove(expected[1])
            if expected[0] not in ("duplicate", "near"):
                facts.append(new)
                neighbours.add(new)


def test_near_buckets_bound_holds_on_real_vectors():
    rng = random.Random(11)
    for _ in range(500):
        a, b = ms.embed(random_fact(rng)), ms.embed(random_fact(rng))
        if a and b and ms.cosine(a, b) >= ms.NEAR_COSINE:
            assert set(ms.near_buckets(a)) & b.keys() and ms.could_be_near(a, b)


def graph_of_10k_facts(rng: random.Random) -> list[tuple[str, str, list[str]]]:
    return [(f"svc-{i}", "service", list(dict.fromkeys(random_fact(rng) for _ in range(14)))) for i in range(715)]


@pytest.mark.parametrize("cap", [None, 5000])
def test_2800_facts_in_one_call_at_10k_facts_within_5_seconds(tmp_path, cap):
    rng = random.Random(12)
    entities = graph_of_10k_facts(rng)
    mem = make_memory(tmp_path, entities, **({"MEMORY_OBS_MAX": cap} if cap else {}))
    mem.fresh_graph()
    old = entities[0][2]
    new = [variant(rng, rng.choice(old)) if rng.random() < 0.2 else random_fact(rng) for _ in range(2800)]
    seconds, text = timed(mem, "add_observations", {"observations": [{"entityName": "svc-0", "contents": new}]})
    assert seconds < 5.0, f"took {seconds:.2f} s"  # before: 135-188 s
    assert "svc-0: +" in text and "skipped duplicate" in text and "replaced" in text


class FullScan(ms.FactNeighbours):
    """The curation as it was: every new fact compared with every fact of the entity, in list order."""

    def __init__(self, facts):
        self.facts = list(facts)

    def add(self, text):
        self.facts.append(text)

    def remove(self, text):
        self.facts.remove(text)

    def first_flagged(self, text):
        return brute_first_flagged(self.facts, text)


def test_curation_answers_and_writes_the_same_as_a_full_scan(tmp_path, monkeypatch):
    rng = random.Random(13)
    entities = [(f"svc-{i}", "service", list(dict.fromkeys(random_fact(rng) for _ in range(30)))) for i in range(3)]
    new = [variant(rng, rng.choice(entities[0][2])) if rng.random() < 0.4 else random_fact(rng) for _ in range(400)]
    results = []
    for label in ("index", "scan"):
        if label == "scan":
            monkeypatch.setattr(ms, "FactNeighbours", FullScan)
        mem = make_memory(tmp_path / label, entities, MEMORY_OBS_MAX=40)
        text = call(mem, "add_observations", {"observations": [{"entityName": "svc-0", "contents": new}]})
        archive = mem.store.read_archive("svc-0")
        results.append((text, mem.settings.file_path.read_text(), [(f.text, f.why) for f in archive]))
    assert results[0] == results[1]
