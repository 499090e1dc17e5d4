"""Work that must stay bounded on big graphs, in process (memory_server.Memory).

Covers: did-you-mean for many unknown names (an index of names, a cap per call) and its hint quality on
common typos; write-time curation of thousands of facts in one call (only the facts compare_facts could
flag are compared, with the same verdicts). Graphs are written as JSONL directly, which is quick.

The time bounds are the issue's (1 s, 5 s) on a 2-core CI machine; before the change the same calls took
35-43 s and 135-188 s.
"""
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
    start = time.perf_counter()
    text, _ = mem.call_tool(tool, args)
    return time.perf_counter() - start, text


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
    mem.graph()  # loading the graph is not what is measured
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
    start = time.perf_counter()
    hints = [finder.suggest(n[:3] + n[4:]) for n in wanted]
    seconds = time.perf_counter() - start
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
