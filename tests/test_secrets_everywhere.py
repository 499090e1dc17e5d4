"""Secrets are refused wherever text enters the graph, through the real stdio server (StdioServer).

Covers: entity names, entity types, relation types and rename targets get the same refusal and hint as facts
and the secret is never repeated (answer, graph file, history); long hex, UUID or base64 values named as a
secret are refused in facts, while git SHAs, content hashes and UUIDs in ordinary sentences are kept.

Fake secrets are assembled at run time from pieces so this file does not itself look like it holds any.
"""
import random
import sqlite3
import string

import pytest

from conftest import StdioServer

RNG = random.Random(21)
HEX64 = "".join(RNG.choice("0123456789abcdef") for _ in range(64))
SHA1 = "".join(RNG.choice("0123456789abcdef") for _ in range(40))
B64_40 = "".join(RNG.choice(string.ascii_letters + string.digits + "+/") for _ in range(39)) + "9"
UUID = "3f0c9a1e-" + "7b2d-4c8e-9f10-" + "5a6b7c8d9e0f"
GH_TOKEN = "gh" + "p_" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(36))
SLACK = "xo" + "xb-" + "1234567890-" + "".join(RNG.choice(string.ascii_letters) for _ in range(24))
AWS = "AK" + "IA" + "".join(RNG.choice(string.ascii_uppercase + string.digits) for _ in range(16))
OPENAI = "s" + "k-" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(40))

# (tool, arguments, the secret that must not come back or be stored)
REFUSED = [
    ("create_entities", {"entities": [{"name": GH_TOKEN, "entityType": "service", "observations": []}]}, GH_TOKEN),
    ("create_entities", {"entities": [{"name": "bot", "entityType": SLACK, "observations": []}]}, SLACK),
    ("create_relations", {"relations": [{"from": "api", "to": "db", "relationType": OPENAI}]}, OPENAI),
    ("rename_entity", {"name": "api", "newName": AWS}, AWS),
    ("add_observations", {"observations": [{"entityName": "api", "contents": [
        f"signing secret for staging is {HEX64}"]}]}, HEX64),
    ("add_observations", {"observations": [{"entityName": "api", "contents": [f"the webhook token: {B64_40}"]}]}, B64_40),
    ("add_observations", {"observations": [{"entityName": "api", "contents": [f"the API token is {UUID}"]}]}, UUID),
    ("add_observations", {"observations": [{"entityName": "api", "contents": [
        f"the signing secret we use for the staging cluster is {HEX64}"]}]}, HEX64),
]

KEPT = [  # identifiers, not secrets
    f"sha256 of the tarball is {HEX64}",
    f"fixed in commit {SHA1}",
    f"token refresh fixed in commit {SHA1}",
    f"request {UUID} failed with a timeout",
    f"api key id is {UUID}",
    f"tokens rotate monthly. {SHA1} is the commit that added the rotation",
    "the token lives in myServiceToken2024Production",
    "image digest sha256:" + HEX64,
]


@pytest.fixture
def served(memory_file):
    memory_file.parent.mkdir(parents=True, exist_ok=True)
    server = StdioServer(memory_file)
    server.initialize()
    text, is_error = server.call("create_entities", {"entities": [
        {"name": n, "entityType": "service", "observations": ["written in Go"]} for n in ("api", "db")]})
    assert not is_error, text
    yield server
    server.close()


def stored_text(memory_file):
    """Everything the server keeps beside the graph that could hold the value: the graph and the history."""
    history = ""
    db = memory_file.with_suffix(".db")
    if db.exists():
        with sqlite3.connect(db) as conn:
            history = " ".join(str(row) for row in conn.execute("SELECT * FROM history"))
    return memory_file.read_text(encoding="utf-8") + history


@pytest.mark.parametrize("tool,arguments,secret", REFUSED, ids=[f"{i}-{r[0]}" for i, r in enumerate(REFUSED)])
def test_secrets_are_refused_everywhere_and_never_repeated(served, memory_file, tool, arguments, secret):
    text, _ = served.call(tool, arguments)
    assert "looks like a credential" in text, text
    assert "record where the secret lives" in text and "never its value" in text
    assert secret not in text and secret[-12:] not in text
    assert secret[-12:] not in stored_text(memory_file)


@pytest.mark.parametrize("fact", KEPT)
def test_identifiers_are_kept(served, memory_file, fact):
    text, is_error = served.call("add_observations", {"observations": [{"entityName": "api", "contents": [fact]}]})
    assert not is_error and "+1" in text and "refused" not in text, text
    assert fact in memory_file.read_text(encoding="utf-8")


def test_a_secret_name_next_to_a_good_one(served, memory_file):
    text, is_error = served.call("create_entities", {"entities": [
        {"name": "web", "entityType": "service", "observations": []},
        {"name": GH_TOKEN, "entityType": "service", "observations": []}]})
    assert not is_error and "Created 1: web" in text and "refused" in text
    assert GH_TOKEN not in text and GH_TOKEN[-12:] not in stored_text(memory_file)


def test_ordinary_names_and_types_are_kept(served, memory_file):
    text, is_error = served.call("create_entities", {"entities": [
        {"name": f"release-{SHA1[:12]}", "entityType": "release", "observations": []},
        {"name": "CamelCaseIdentifierForTheDeploymentPipelineRunner", "entityType": "class", "observations": []}]})
    assert not is_error and "Created 2" in text, text
    text, is_error = served.call("create_relations", {"relations": [
        {"from": "api", "to": "db", "relationType": "reads token settings from"}]})
    assert not is_error and "Created 1" in text, text
    text, is_error = served.call("rename_entity", {"name": "api", "newName": "checkout-api-v2"})
    assert not is_error and "Renamed" in text, text
