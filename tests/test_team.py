"""Team memory in git: `--init`, the `--merge` driver under real `git merge`, healing conflict markers,
the server finding a project's `.graphmem/`, and `--lint` as a pre-commit check. Real git, real processes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SERVER, StdioServer, write_graph

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def env_for(home: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
            "GIT_CONFIG_NOSYSTEM": "1"}


def run(cwd: Path, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**env_for(cwd.parent), **env})
    if check and done.returncode != 0:
        raise AssertionError(f"{args} failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    return done


def graphmem(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(cwd, sys.executable, str(SERVER), *args, check=check)


def entities(path: Path) -> dict[str, dict]:
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {i["name"]: i for i in items if i["type"] == "entity"}


def relations(path: Path) -> set[tuple[str, str, str]]:
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {(i["from"], i["to"], i["relationType"]) for i in items if i["type"] == "relation"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    run(root, "git", "init", "-q", "-b", "main")
    (root / "README.md").write_text("shop\n")
    done = graphmem(root, "--init")
    assert "created .graphmem/" in done.stdout and "merge driver" in done.stdout, done.stdout
    write_graph(root / ".graphmem" / "memory.jsonl", [
        ("api", "service", ["written in Go", "listens on 8080", "2026-01-05: moved to Postgres 16"]),
        ("billing", "service", ["owned by the payments team"]),
    ], [("api", "billing", "calls")])
    run(root, "git", "add", "-A")
    run(root, "git", "commit", "-qm", "team memory")
    return root


def branch(repo: Path, name: str, edit) -> None:
    run(repo, "git", "checkout", "-q", "-b", name, "main")
    path = repo / ".graphmem" / "memory.jsonl"
    graph = entities(path)
    rels = relations(path)
    edit(graph, rels)
    write_graph(path, [(n, e["entityType"], e["observations"]) for n, e in graph.items()], sorted(rels))
    run(repo, "git", "commit", "-qam", name)
    run(repo, "git", "checkout", "-q", "main")


def left(graph, rels):
    graph["api"]["observations"].append("2026-02-01: p99 latency budget is 200 ms")
    graph["api"]["observations"].remove("listens on 8080")  # a deletion on one side


def right(graph, rels):
    graph["api"]["observations"].append("retries stay at 3")
    graph["search"] = {"entityType": "service", "observations": ["runs on OpenSearch 2"]}
    rels.add(("api", "search", "calls"))


def test_init_is_idempotent_and_sets_up_git(repo):
    assert (repo / ".graphmem" / ".gitignore").read_text().count("*.db") >= 1
    attributes = (repo / ".gitattributes").read_text()
    assert ".graphmem/memory.jsonl merge=graphmem" in attributes and ".graphmem/archive/*.md merge=union" in attributes
    assert "--merge %O %A %B %P" in run(repo, "git", "config", "merge.graphmem.driver").stdout
    again = graphmem(repo, "--init")
    assert "nothing to do" in again.stdout
    assert (repo / ".gitattributes").read_text() == attributes


def test_init_with_memory_file_path_set_says_servers_will_not_use_the_team_file(repo):
    """--init ignores MEMORY_FILE_PATH, but a server started with it keeps using that one file: said, not silent."""
    done = run(repo, sys.executable, str(SERVER), "--init", MEMORY_FILE_PATH=str(repo.parent / "mine.jsonl"))
    assert "MEMORY_FILE_PATH is set here" in done.stdout and "not .graphmem/memory.jsonl" in done.stdout
    assert "MEMORY_FILE_PATH" not in graphmem(repo, "--init").stdout


def test_init_outside_a_repository_is_a_clear_error(tmp_path):
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    done = graphmem(lonely, "--init", check=False)
    assert done.returncode == 2 and "not inside a git work tree" in done.stderr


@pytest.mark.parametrize("first,second", [("left", "right"), ("right", "left")])
def test_two_branches_merge_without_conflict_in_either_order(repo, first, second):
    branch(repo, "left", left)
    branch(repo, "right", right)
    run(repo, "git", "merge", "-q", "--no-edit", first)
    merged = run(repo, "git", "merge", "--no-edit", second, check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    path = repo / ".graphmem" / "memory.jsonl"
    text = path.read_text(encoding="utf-8")
    assert "<<<<<<<" not in text and ">>>>>>>" not in text
    graph = entities(path)
    api = graph["api"]["observations"]
    assert "2026-02-01: p99 latency budget is 200 ms" in api and "retries stay at 3" in api
    assert "listens on 8080" not in api and "written in Go" in api
    assert graph["search"]["observations"] == ["runs on OpenSearch 2"]
    assert relations(path) == {("api", "billing", "calls"), ("api", "search", "calls")}
    for line in text.splitlines():  # strictly valid: every line a reference-format JSON object
        assert json.loads(line)["type"] in ("entity", "relation")
    assert run(repo, "git", "status", "--porcelain").stdout == ""


def test_a_rename_on_one_side_carries_the_other_sides_facts(repo):
    def rename(graph, rels):
        graph["payments"] = graph.pop("billing")
        rels.discard(("api", "billing", "calls"))
        rels.add(("api", "payments", "calls"))

    def add_fact(graph, rels):
        graph["billing"]["observations"].append("invoices go out on the 1st")
    branch(repo, "rename", rename)
    branch(repo, "fact", add_fact)
    run(repo, "git", "merge", "-q", "--no-edit", "rename")
    run(repo, "git", "merge", "-q", "--no-edit", "fact")
    graph = entities(repo / ".graphmem" / "memory.jsonl")
    assert "billing" not in graph
    assert graph["payments"]["observations"] == ["owned by the payments team", "invoices go out on the 1st"]
    assert ("api", "payments", "calls") in relations(repo / ".graphmem" / "memory.jsonl")


def test_a_type_changed_on_both_sides_keeps_ours_and_says_so(tmp_path):
    base, ours, theirs = (tmp_path / n for n in ("base", "ours", "theirs"))
    write_graph(base, [("api", "service", ["a"])])
    write_graph(ours, [("api", "backend", ["a"])])
    write_graph(theirs, [("api", "microservice", ["a", "b"])])
    done = graphmem(tmp_path, "--merge", str(base), str(ours), str(theirs))
    assert entities(ours)["api"] == {"type": "entity", "name": "api", "entityType": "backend", "observations": ["a", "b"]}
    assert "microservice" in done.stderr


def test_an_entity_deleted_on_one_side_and_changed_on_the_other_is_kept(tmp_path):
    base, ours, theirs = (tmp_path / n for n in ("base", "ours", "theirs"))
    write_graph(base, [("api", "service", ["a"]), ("old", "service", ["x"])])
    write_graph(ours, [("api", "service", ["a"])])
    write_graph(theirs, [("api", "service", ["a"]), ("old", "service", ["x", "still used by cron"])])
    graphmem(tmp_path, "--merge", str(base), str(ours), str(theirs))
    assert entities(ours)["old"]["observations"] == ["x", "still used by cron"]


def test_a_file_merged_without_the_driver_is_healed_keeping_both_sides(repo):
    path = repo / ".graphmem" / "memory.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    ours = json.dumps({"type": "entity", "name": "api", "entityType": "service",
                       "observations": ["written in Go", "from ours"]})
    theirs = json.dumps({"type": "entity", "name": "api", "entityType": "service",
                         "observations": ["written in Go", "from theirs"]})
    path.write_text("\n".join(["<<<<<<< HEAD", ours, "=======", theirs, ">>>>>>> other"] + lines[1:]), encoding="utf-8")
    lint = graphmem(repo, "--lint")
    assert "git conflict markers: 3" in lint.stdout
    fixed = graphmem(repo, "--lint", "--fix")
    assert "healed 3 conflict marker line(s)" in fixed.stdout, fixed.stdout
    text = path.read_text(encoding="utf-8")
    assert "<<<<<<<" not in text
    assert entities(path)["api"]["observations"] == ["written in Go", "from ours", "from theirs"]
    assert not path.with_name("memory.jsonl.unreadable").exists()


def test_a_clone_without_the_driver_is_told_by_lint_and_the_fix_says_how_to_mark_it_resolved(repo, tmp_path):
    """A teammate who cloned but never ran --init: git merges memory.jsonl line by line. --lint says the driver
    is missing; --lint --fix heals the real conflict and says to `git add` the file; --init silences the line."""
    clone = tmp_path / "clone"
    run(tmp_path, "git", "clone", "-q", str(repo), str(clone))
    assert "merge driver: not registered" in graphmem(clone, "--lint").stdout
    assert "merge driver" not in graphmem(repo, "--lint").stdout  # --init registered it there
    path = clone / ".graphmem" / "memory.jsonl"
    run(clone, "git", "checkout", "-q", "-b", "side")
    path.write_text(path.read_text(encoding="utf-8").replace('"written in Go"', '"written in Go", "side fact"'))
    run(clone, "git", "commit", "-qam", "side")
    run(clone, "git", "checkout", "-q", "main")
    path.write_text(path.read_text(encoding="utf-8").replace('"written in Go"', '"written in Go", "main fact"'))
    run(clone, "git", "commit", "-qam", "main")
    assert run(clone, "git", "merge", "side", check=False).returncode != 0  # a real line conflict
    fixed = graphmem(clone, "--lint", "--fix")
    assert "git add .graphmem/memory.jsonl" in fixed.stdout, fixed.stdout
    assert {"main fact", "side fact"} <= set(entities(path)["api"]["observations"])
    graphmem(clone, "--init")
    assert "merge driver: not registered" not in graphmem(clone, "--lint").stdout


def test_conflict_markers_are_healed_by_the_next_write_too(repo):
    path = repo / ".graphmem" / "memory.jsonl"
    a = json.dumps({"type": "entity", "name": "api", "entityType": "service", "observations": ["one"]})
    b = json.dumps({"type": "entity", "name": "api", "entityType": "service", "observations": ["two"]})
    path.write_text("\n".join(["<<<<<<< HEAD", a, "=======", b, ">>>>>>> x"]), encoding="utf-8")
    server = StdioServer(path)
    try:
        server.initialize()
        text, is_error = server.call("add_observations", {"observations": [{"entityName": "api", "contents": ["three"]}]})
        assert not is_error, text
    finally:
        server.close()
    assert entities(path)["api"]["observations"] == ["one", "three", "two"]
    assert "<<<<<<<" not in path.read_text(encoding="utf-8")


def test_the_server_in_a_project_with_graphmem_uses_the_team_file_and_a_clone_recalls_it(repo, tmp_path):
    clone = tmp_path / "elsewhere" / "shop-clone"
    clone.parent.mkdir()
    run(tmp_path, "git", "clone", "-q", str(repo), str(clone))
    env = {"MEMORY_PROJECT_ROOT": str(clone / "src")}
    (clone / "src").mkdir()
    proc_env = {**env_for(tmp_path), **env}
    requests = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {
            "query": "which database does the api use"}}}]
    done = subprocess.run([sys.executable, str(SERVER)], input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, cwd=clone / "src", env=proc_env, timeout=60)
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert "Postgres 16" in replies[2]["result"]["content"][0]["text"], done.stdout + done.stderr
    assert str(clone / ".graphmem" / "memory.jsonl") in done.stderr
    assert not (tmp_path / ".local").exists()  # the personal default file was not touched


def test_lint_fails_a_pre_commit_check_when_the_team_file_holds_a_secret(repo):
    path = repo / ".graphmem" / "memory.jsonl"
    assert graphmem(repo, "--lint").returncode == 0
    graph = entities(path)
    graph["api"]["observations"].append("ci token: ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")
    write_graph(path, [(n, e["entityType"], e["observations"]) for n, e in graph.items()])
    done = graphmem(repo, "--lint", check=False)
    assert done.returncode == 1 and "secret-shaped text: 1" in done.stdout
    assert "ghp_" not in done.stdout


def test_lint_fails_when_a_secret_sits_in_an_unreadable_or_unknown_line(repo):
    """A hand edit that broke a line (or a line of a type graphmem does not know) is still in the file git
    commits: a token there fails the pre-commit check too, without printing it."""
    path = repo / ".graphmem" / "memory.jsonl"
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    clean = path.read_bytes()
    path.write_bytes(clean + b'\n{"type":"entity","name":"ci","observations":["' + token.encode() + b'"]')  # cut off
    done = graphmem(repo, "--lint", check=False)
    assert done.returncode == 1 and "unreadable line 4: looks like a credential (GitHub token)" in done.stdout, done.stdout
    assert token not in done.stdout
    path.write_bytes(clean + b'\n{"type":"note","text":"' + token.encode() + b'"}')
    done = graphmem(repo, "--lint", check=False)
    assert done.returncode == 1 and "a line of unknown type: looks like a credential (GitHub token)" in done.stdout, done.stdout


def test_local_files_stay_out_of_git(repo):
    server = StdioServer(repo / ".graphmem" / "memory.jsonl")
    try:
        server.initialize()
        server.call("add_observations", {"observations": [{"entityName": "api", "contents": ["new fact"]}]})
    finally:
        server.close()
    status = run(repo, "git", "status", "--porcelain").stdout
    assert status.strip() == "M .graphmem/memory.jsonl", status


def serve_in(cwd: Path, home: Path, calls: list[tuple[str, dict]]) -> list[tuple[str, bool]]:
    """The real server started in `cwd` with no MEMORY_FILE_PATH (as agents start it), HOME=home."""
    requests = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}]
    requests += [{"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": n, "arguments": a}}
                 for i, (n, a) in enumerate(calls)]
    done = subprocess.run([sys.executable, str(SERVER)], input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, cwd=cwd, env=env_for(home), timeout=60)
    replies = {r["id"]: r["result"] for r in map(json.loads, done.stdout.splitlines())}
    return [(replies[i + 1]["content"][0]["text"], replies[i + 1].get("isError", False)) for i in range(len(calls))]


def test_in_a_team_project_global_memory_is_read_alongside_and_written_with_scope_global(repo, tmp_path):
    home = repo.parent  # env_for(cwd.parent) gives this HOME too
    personal = home / ".local" / "share" / "graphmem" / "memory.jsonl"
    personal.parent.mkdir(parents=True)
    write_graph(personal, [("me", "person", ["prefers tabs over spaces", "reviews pull requests in the morning"])])
    out = serve_in(repo, home, [
        ("recall", {"query": "tabs or spaces", "budget": 300}),
        ("search_nodes", {"query": "Postgres"}),
        ("open_nodes", {"names": ["api", "me"]}),
        ("add_observations", {"observations": [{"entityName": "me", "contents": ["uses vim"]}], "scope": "global"}),
        ("add_observations", {"observations": [{"entityName": "api", "contents": ["p99 budget 200 ms"]}]}),
        ("delete_observations", {"deletions": [{"entityName": "me", "observations": ["reviews pull requests in the morning"]}]}),
        ("read_graph", {}),
    ])
    recall, search, opened, global_write, project_write, delete, index = out
    assert index[0].startswith("Team memory of shop (.graphmem/memory.jsonl); your global memory follows")
    assert "me (2)" in index[0].split("== global memory")[1]
    assert "prefers tabs over spaces" in recall[0] and "== global memory" in recall[0]
    assert ms_tokens(recall[0]) <= 300
    assert "Postgres 16" in search[0] and "global memory" not in search[0]
    assert "written in Go" in opened[0] and "prefers tabs" in opened[0] and not opened[1]
    assert not global_write[1] and not project_write[1] and not delete[1], out
    assert entities(personal)["me"]["observations"] == ["prefers tabs over spaces", "uses vim"]
    team = entities(repo / ".graphmem" / "memory.jsonl")
    assert "p99 budget 200 ms" in team["api"]["observations"] and "me" not in team


def test_memory_file_path_still_means_exactly_one_file(repo):
    home = repo.parent
    personal = home / ".local" / "share" / "graphmem" / "memory.jsonl"
    personal.parent.mkdir(parents=True, exist_ok=True)
    write_graph(personal, [("me", "person", ["prefers tabs over spaces"])])
    only = repo.parent / "only.jsonl"
    write_graph(only, [("x", "t", ["the only fact"])])
    env = {**env_for(home), "MEMORY_FILE_PATH": str(only)}
    request = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add_observations", "arguments": {
            "observations": [{"entityName": "x", "contents": ["second"]}], "scope": "global"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "tabs"}}}]
    done = subprocess.run([sys.executable, str(SERVER)], input="".join(json.dumps(r) + "\n" for r in request),
                          capture_output=True, text=True, cwd=repo, env=env, timeout=60)
    replies = {r["id"]: r["result"] for r in map(json.loads, done.stdout.splitlines())}
    assert entities(only)["x"]["observations"] == ["the only fact", "second"]
    assert "prefers tabs" not in replies[2]["content"][0]["text"]
    assert entities(personal)["me"]["observations"] == ["prefers tabs over spaces"]


def ms_tokens(text: str) -> int:
    return (len(text) + 3) // 4


@pytest.mark.skipif(os.name != "posix", reason="file-size limits are POSIX")
def test_a_merge_that_cannot_write_leaves_ours_as_it_was(tmp_path):
    """The driver replaces OURS atomically: a full disk (here a file-size limit) fails the merge, and git
    then keeps the conflict for a person; OURS is untouched and no temp file is left."""
    import resource
    base, ours, theirs = (tmp_path / n for n in ("base", "ours", "theirs"))
    write_graph(base, [("api", "service", ["a"])])
    write_graph(ours, [("api", "service", ["a", "from ours"])])
    write_graph(theirs, [("api", "service", ["a", "from theirs " + "x" * 400])])
    before = ours.read_bytes()
    limit = len(before) + 10
    done = subprocess.run([sys.executable, str(SERVER), "--merge", str(base), str(ours), str(theirs)],
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert done.returncode == 1
    assert "cannot write the merged" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert ours.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "ours", "theirs"]


def test_merge_with_a_missing_file_is_refused_and_writes_nothing(tmp_path):
    """By hand, a typo in a path used to "merge" into a new empty OURS file and exit 0."""
    base, theirs = tmp_path / "base", tmp_path / "theirs"
    write_graph(base, [("api", "service", ["a"])])
    write_graph(theirs, [("api", "service", ["a", "b"])])
    done = graphmem(tmp_path, "--merge", str(base), str(tmp_path / "ourz"), str(theirs), check=False)
    assert done.returncode == 2 and f"OURS {tmp_path / 'ourz'}" in done.stderr, done.stderr
    assert not (tmp_path / "ourz").exists()


def test_a_merge_whose_driver_is_gone_is_merged_by_lint_fix_from_gits_three_sides(repo):
    """The driver registered by --init points at a checkout that moved (or a graphmem since uninstalled): git
    reports a conflict but leaves OURS as it was, without markers, so `git add` would silently drop theirs'
    facts. --lint says so; --lint --fix merges git's three index stages (a deletion on one side honoured)."""
    path = repo / ".graphmem" / "memory.jsonl"
    gone = "/nonexistent/python3 /gone/memory_server.py --merge %O %A %B %P"
    run(repo, "git", "config", "merge.graphmem.driver", gone)
    branch(repo, "side", lambda graph, rels: graph["api"]["observations"].insert(1, "side fact"))
    graph = entities(path)
    graph["api"]["observations"].remove("listens on 8080")  # main deletes a fact and adds one
    graph["api"]["observations"].insert(1, "main fact")
    write_graph(path, [(n, e["entityType"], e["observations"]) for n, e in graph.items()], sorted(relations(path)))
    run(repo, "git", "commit", "-qam", "main")
    assert run(repo, "git", "merge", "side", check=False).returncode != 0
    assert "side fact" not in path.read_text(encoding="utf-8") and "<<<<" not in path.read_text(encoding="utf-8")
    lint = graphmem(repo, "--lint").stdout
    assert "unmerged" in lint and "its command is gone" in lint, lint
    fixed = graphmem(repo, "--lint", "--fix")
    assert "merged its three sides" in fixed.stdout and "git add .graphmem/memory.jsonl" in fixed.stdout
    facts = entities(path)["api"]["observations"]
    assert facts == ["written in Go", "main fact", "2026-01-05: moved to Postgres 16", "side fact"], facts
    run(repo, "git", "add", ".graphmem/memory.jsonl")
    run(repo, "git", "commit", "-qm", "merged")
    assert "unmerged" not in graphmem(repo, "--lint").stdout


def test_a_real_pre_commit_hook_refuses_a_secret_and_says_why_with_stdout_discarded(repo):
    """The README's hook (`graphmem --lint >/dev/null`): git commit fails, and the reason reaches the terminal
    through stderr (before: a silent failure), naming where, never the value."""
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"'{sys.executable}' '{SERVER}' --lint >/dev/null\n")
    hook.chmod(0o755)
    path = repo / ".graphmem" / "memory.jsonl"
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    graph = entities(path)
    graph["api"]["observations"].append(f"ci token: {token}")
    write_graph(path, [(n, e["entityType"], e["observations"]) for n, e in graph.items()])
    done = run(repo, "git", "commit", "-qam", "oops", check=False)
    assert done.returncode != 0 and "secret-shaped text in" in done.stderr and "api: fact looks like a credential (GitHub token)" \
        in done.stderr, done.stderr
    assert token not in done.stderr + done.stdout
