"""Memory tiers with real git and real processes: a git work tree without .graphmem/ keeps a private memory in
the per-user data dir under its identity (origin URL, else root commit, else path); the global memory is read
alongside; `--projects` lists them; `--init --move-private` moves a private memory into the team tier; the UI
shows and edits each tier."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SERVER, write_graph
from test_ui_api import UIServer

import memory_server as ms

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def env_for(home: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
            "GIT_CONFIG_NOSYSTEM": "1", **extra}


def git(cwd: Path, home: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, env=env_for(home))
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout


def graphmem(cwd: Path, home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SERVER), *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env=env_for(home, **extra))


def serve(cwd: Path, home: Path, calls: list[tuple[str, dict]], **extra: str) -> list[str]:
    """The real server started in `cwd` as agents start it (no MEMORY_FILE_PATH); each call's text (errors fail)."""
    requests = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}]
    requests += [{"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": n, "arguments": a}}
                 for i, (n, a) in enumerate(calls)]
    done = subprocess.run([sys.executable, str(SERVER)], input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, cwd=cwd, env=env_for(home, **extra), timeout=60)
    replies = {r["id"]: r["result"] for r in map(json.loads, done.stdout.splitlines())}
    out = []
    for i in range(len(calls)):
        result = replies[i + 1]
        assert not result.get("isError"), (calls[i], result, done.stderr)
        out.append(result["content"][0]["text"])
    return out


def repo(home: Path, path: Path, origin: str | None = None, commit: bool = True) -> Path:
    path.mkdir(parents=True)
    git(path, home, "init", "-q", "-b", "main")
    if origin:
        git(path, home, "remote", "add", "origin", origin)
    if commit:
        (path / "README.md").write_text(f"{path.name}\n")
        git(path, home, "add", "-A")
        git(path, home, "commit", "-qm", "first")
    return path


def data_dir(home: Path) -> Path:
    return home / ".local" / "share" / "graphmem"


def remember(fact: str, entity: str = "deploy", **args) -> tuple[str, dict]:
    entities = [{"name": entity, "entityType": "process", "observations": [fact]}]
    return ("create_entities", {"entities": entities, **args})


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def test_two_repos_keep_separate_private_memories_and_both_see_global_facts(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    blog = repo(home, tmp_path / "blog", "https://github.com/acme/blog.git")
    serve(shop, home, [remember("2026-03-01: deploy branch is main"),
                       remember("prefers tabs over spaces", "me", scope="global")])
    serve(blog, home, [remember("2026-03-02: deploy branch is production")])
    recall, index, opened = serve(blog, home, [("recall", {"query": "which deploy branch"}), ("read_graph", {}),
                                               ("open_nodes", {"names": ["me"]})])
    assert "production" in recall and "branch is main" not in recall
    assert index.startswith("Private memory of blog (private to you, github.com/acme/blog); your global memory follows")
    assert "prefers tabs over spaces" in opened and "== global memory" in opened
    recall_shop, = serve(shop, home, [("recall", {"query": "deploy branch tabs"})])
    assert "branch is main" in recall_shop and "production" not in recall_shop and "prefers tabs" in recall_shop
    projects = data_dir(home) / "projects"
    folders = sorted(p.name for p in projects.iterdir())
    assert len(folders) == 2 and folders[0].startswith("github.com-acme-blog-"), folders
    assert '"name":"me"' not in (projects / folders[0] / "memory.jsonl").read_text()
    assert "prefers tabs" in (data_dir(home) / "memory.jsonl").read_text()  # the global tier: today's default file
    recorded = json.loads((projects / folders[1] / "project.json").read_text())
    assert recorded["identity"] == "github.com/acme/shop" and recorded["paths"] == [str(shop)]


def test_a_delete_acts_on_the_tier_the_entity_lives_in(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    serve(shop, home, [remember("prefers tabs", "me", scope="global"), remember("2026-03-01: deploy is main")])
    serve(shop, home, [("delete_entities", {"entityNames": ["me"]})])
    assert "me" not in (data_dir(home) / "memory.jsonl").read_text()
    assert "deploy is main" in serve(shop, home, [("open_nodes", {"names": ["deploy"]})])[0]


@pytest.mark.parametrize("spelling", ["git@github.com:Acme/Shop.git", "ssh://git@GitHub.com:22/Acme/Shop/",
                                      "https://user:secret@github.com/Acme/Shop"])
def test_a_clone_with_the_same_origin_at_another_path_finds_its_private_memory(tmp_path, home, spelling):
    first = repo(home, tmp_path / "work" / "shop", "https://github.com/Acme/Shop.git")
    serve(first, home, [remember("2026-03-01: deploy branch is main")])
    other = repo(home, tmp_path / "elsewhere" / "shop-copy", spelling)
    (other / "src").mkdir()
    recall, = serve(other / "src", home, [("recall", {"query": "deploy branch"})])
    assert "deploy branch is main" in recall
    folders = list((data_dir(home) / "projects").iterdir())
    assert len(folders) == 1
    recorded = json.loads((folders[0] / "project.json").read_text())
    assert "secret" not in json.dumps(recorded)  # credentials in a URL never reach project.json
    assert recorded["paths"][0] == str(other) and str(first) in recorded["paths"]


def test_real_clones_of_one_repository_share_a_private_memory(tmp_path, home):
    upstream = repo(home, tmp_path / "upstream")
    bare = tmp_path / "shop.git"
    git(tmp_path, home, "clone", "-q", "--bare", str(upstream), str(bare))
    a, b = tmp_path / "a" / "shop", tmp_path / "b" / "shop"
    for clone in (a, b):
        git(tmp_path, home, "clone", "-q", str(bare), str(clone))
    serve(a, home, [remember("2026-03-01: deploy branch is main")])
    assert "deploy branch is main" in serve(b, home, [("recall", {"query": "deploy branch"})])[0]
    assert "deploy branch is main" not in serve(upstream, home, [("recall", {"query": "deploy branch"})])[0]


def test_without_an_origin_the_root_commit_is_the_identity(tmp_path, home):
    shop = repo(home, tmp_path / "shop")
    serve(shop, home, [remember("2026-03-01: deploy branch is main")])
    copy = tmp_path / "copy"
    git(tmp_path, home, "clone", "-q", str(shop), str(copy))
    git(copy, home, "remote", "remove", "origin")  # same history, no origin: the root commit finds it
    assert "deploy branch is main" in serve(copy, home, [("recall", {"query": "deploy branch"})])[0]
    unrelated = repo(home, tmp_path / "unrelated")
    assert "deploy branch is main" not in serve(unrelated, home, [("recall", {"query": "deploy branch"})])[0]
    root = git(shop, home, "rev-list", "--max-parents=0", "HEAD").strip()
    folder, = [p for p in (data_dir(home) / "projects").iterdir() if (p / "memory.jsonl").exists()]
    assert folder.name.startswith(f"commit-{root[:12]}-")
    assert json.loads((folder / "project.json").read_text())["identity"] == f"commit {root}"


def test_a_project_keeps_its_memory_through_its_first_commit_and_a_new_origin(tmp_path, home):
    shop = repo(home, tmp_path / "shop", commit=False)
    serve(shop, home, [remember("2026-03-01: deploy branch is main")])  # no commits yet: filed by path
    (shop / "a.txt").write_text("a")
    git(shop, home, "add", "-A")
    git(shop, home, "commit", "-qm", "first")
    serve(shop, home, [remember("2026-03-02: the api listens on 8080", "api")])  # now by root commit
    git(shop, home, "remote", "add", "origin", "git@github.com:acme/shop.git")
    recall, = serve(shop, home, [("recall", {"query": "deploy branch api listens"})])
    assert "deploy branch is main" in recall and "listens on 8080" in recall
    folder, = (data_dir(home) / "projects").iterdir()
    assert json.loads((folder / "project.json").read_text())["identities"][-1] == "github.com/acme/shop"


def test_without_git_on_path_a_linked_work_tree_finds_the_same_memory(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    linked = tmp_path / "shop-feature"
    git(shop, home, "worktree", "add", "-q", "-b", "feature", str(linked))
    assert (linked / ".git").is_file()
    serve(shop, home, [remember("2026-03-01: deploy branch is main")])
    no_git = tmp_path / "empty-bin"
    no_git.mkdir()
    recall, = serve(linked, home, [("recall", {"query": "deploy branch"})], PATH=str(no_git))
    assert "deploy branch is main" in recall  # origin parsed from the main repository's .git/config


def test_outside_a_project_global_is_the_only_tier(tmp_path, home):
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    written, index = serve(lonely, home, [remember("prefers tabs", "me"), ("read_graph", {})])
    assert index.startswith(f"Global memory ({data_dir(home) / 'memory.jsonl'}; not in a git project)")
    assert "prefers tabs" in (data_dir(home) / "memory.jsonl").read_text()
    assert not (data_dir(home) / "projects").exists()


def test_memory_file_path_still_means_one_file_in_a_private_project(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    only = tmp_path / "only.jsonl"
    written, index = serve(shop, home, [remember("a fact", scope="global"), ("read_graph", {})],
                           MEMORY_FILE_PATH=str(only))
    assert "a fact" in only.read_text() and index.startswith("1 entities")
    assert not data_dir(home).exists()


def test_reading_never_creates_a_private_graph_file(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    serve(shop, home, [("recall", {"query": "anything"}), ("read_graph", {})])
    assert not list(data_dir(home).rglob("memory.jsonl"))
    listed = graphmem(shop, home, "--projects").stdout
    assert "github.com/acme/shop (here): no facts yet" in listed, listed


def test_projects_lists_the_tiers_here_and_every_private_project(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    blog = repo(home, tmp_path / "blog", "git@github.com:acme/blog.git")
    serve(shop, home, [remember("2026-03-01: deploy branch is main"), remember("one", "x"),
                       remember("prefers tabs", "me", scope="global")])
    serve(blog, home, [remember("2026-03-02: deploy branch is production")])
    out = graphmem(shop, home, "--projects")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"Here: {shop} (git work tree; identity github.com/acme/shop)"
    private = next(line for line in lines if "private " in line and "projects" in line)
    assert private.lstrip().startswith("* private") and "2 facts in 2 entities" in private
    assert any(line.strip().startswith("team    none (graphmem --init") for line in lines)
    assert any(line.strip().startswith("global") and "1 facts" in line for line in lines)
    assert any(line.startswith("Private project memories in") and line.endswith(": 2") for line in lines)
    assert any(line.strip().startswith("github.com/acme/shop (here): 2 facts") and f"last path {shop}" in line
               for line in lines)
    assert any(line.strip().startswith("github.com/acme/blog: 1 facts") for line in lines)
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    outside = graphmem(lonely, home, "--projects").stdout
    assert "not inside a git work tree" in outside and "github.com/acme/blog" in outside
    one = graphmem(shop, home, "--projects", MEMORY_FILE_PATH=str(tmp_path / "one.jsonl")).stdout
    assert one.startswith("MEMORY_FILE_PATH is set: one file, no tiers.")


def test_init_move_private_loses_nothing_and_is_idempotent(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    serve(shop, home, [
        ("create_entities", {"entities": [
            {"name": "api", "entityType": "service", "observations": ["written in Go", "listens on 8080"]},
            {"name": "db", "entityType": "database", "observations": ["Postgres 16"]}]}),
        ("create_relations", {"relations": [{"from": "api", "to": "db", "relationType": "uses"}]})])
    private, = (data_dir(home) / "projects").glob("*/memory.jsonl")
    before = private.read_bytes()
    secret = "token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    ci = {"type": "entity", "name": "ci", "entityType": "tool", "observations": [secret, "runs on every push"]}
    private.write_bytes(before + b"\n" + json.dumps(ci).encode())
    hint = graphmem(shop, home, "--init")
    assert "graphmem --init --move-private moves it" in hint.stdout, hint.stdout
    team = shop / ".graphmem" / "memory.jsonl"
    write_graph(team, [("api", "backend", ["written in Go", "owned by the platform team"])])
    moved = graphmem(shop, home, "--init", "--move-private")
    assert moved.returncode == 0, moved.stderr
    assert "2 new entities, 3 facts, 1 relations" in moved.stdout, moved.stdout
    assert "kept the team's type 'backend'" in moved.stdout and "1 secret-shaped item(s) were not moved" in moved.stdout
    graph = {e["name"]: e for e in map(json.loads, team.read_text().splitlines()) if e["type"] == "entity"}
    assert graph["api"]["observations"] == ["written in Go", "owned by the platform team", "listens on 8080"]
    assert graph["db"]["observations"] == ["Postgres 16"] and graph["ci"]["observations"] == ["runs on every push"]
    assert '"relationType":"uses"' in team.read_text().replace(" ", "")
    assert "ghp_" not in team.read_text()
    backup, = private.parent.glob("memory.jsonl.moved-*")
    assert backup.read_bytes().startswith(before) and not private.exists()
    team_bytes = team.read_bytes()
    again = graphmem(shop, home, "--init", "--move-private")
    assert "no private memory to move" in again.stdout and "moved earlier" in again.stdout
    assert team.read_bytes() == team_bytes
    assert "Postgres 16" in serve(shop, home, [("recall", {"query": "which database"})])[0]
    listed = graphmem(shop, home, "--projects").stdout
    assert "* team" in listed and "moved to a team tier" in listed


def test_move_private_without_init_is_refused(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    done = graphmem(shop, home, "--move-private")
    assert done.returncode == 2 and "graphmem --init --move-private" in done.stderr


def test_remote_spellings_name_one_project_and_local_paths_stay_apart():
    root = Path("/work/x")
    same = {ms.normalise_remote(u, root) for u in ("https://github.com/acme/shop.git", "git@github.com:acme/shop.git",
                                                    "ssh://git@GitHub.com/acme/shop", "https://github.com/acme/shop/",
                                                    "git+ssh://git@github.com:2222/acme/shop.git")}
    assert same == {"github.com/acme/shop"}
    assert ms.normalise_remote("/srv/git/shop.git", root) == "file /srv/git/shop"
    assert ms.normalise_remote("../shop.git", root) == "file /work/shop"
    assert ms.without_credentials("https://ghp_x@github.com/a/b") == "https://github.com/a/b"
    assert ms.project_slug("github.com/acme/shop", "origin").startswith("github.com-acme-shop-")
    assert ms.project_slug("github.com/acme/shop", "origin") != ms.project_slug("github.com/acme/shop2", "origin")


class TierUI(UIServer):
    """The UI server started in a project without MEMORY_FILE_PATH, as `graphmem --ui` is run there."""

    def __init__(self, cwd: Path, home: Path, *extra: str):
        import tempfile
        import urllib.parse
        self.dir = tempfile.mkdtemp(prefix="graphmem-ui-tiers-")
        self.stderr = open(os.path.join(self.dir, "server.stderr"), "w+")
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--ui", "0", "--no-open", *extra], cwd=str(cwd),
                                     env=env_for(home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)
        line = self._first_line(30.0)
        self.url = line[len("graphmem UI: "):].strip()
        parts = urllib.parse.urlsplit(self.url)
        self.port, self.origin = parts.port, f"http://127.0.0.1:{parts.port}"
        self.key = urllib.parse.parse_qs(parts.query)["key"][0]
        self.cookie = self.token = None


def test_the_ui_shows_each_tier_and_writes_to_the_chosen_one(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    serve(shop, home, [remember("2026-03-01: deploy branch is main"), remember("prefers tabs", "me", scope="global")])
    private, = (data_dir(home) / "projects").glob("*/memory.jsonl")
    everyone = data_dir(home) / "memory.jsonl"
    ui = TierUI(shop, home).login()
    try:
        project = ui.get_json("/api/graph")
        assert project["tier"] == "private" and [e["name"] for e in project["entities"]] == ["deploy"]
        assert project["entities"][0]["tier"] == "private"
        assert [(t["tier"], t["facts"], t["default"]) for t in project["tiers"]] == [("private", 1, True),
                                                                                     ("global", 1, False)]
        mine = ui.get_json("/api/graph?tier=global")
        assert mine["tier"] == "global" and [e["name"] for e in mine["entities"]] == ["me"]
        assert mine["file"] == str(everyone)
        assert ui.get_json("/api/search?q=tabs&tier=global")["entities"] == ["me"]
        assert ui.get_json("/api/search?q=tabs")["entities"] == []
        status, _, raw = ui.request("POST", "/api/op", {"op": "add_fact", "name": "me", "text": "uses vim",
                                                        "tier": "global"})
        assert json.loads(raw)["ok"], raw
        assert "uses vim" in everyone.read_text() and "uses vim" not in private.read_text()
        status, _, raw = ui.request("POST", "/api/op", {"op": "add_fact", "name": "deploy", "text": "tags are signed"})
        assert json.loads(raw)["ok"] and "tags are signed" in private.read_text()
        status, _, raw = ui.request("GET", "/api/graph?tier=team")
        assert status == 400 and "tiers here: private, global" in json.loads(raw)["error"]
        for bad in ("team", 5):
            status, _, raw = ui.request("POST", "/api/op", {"op": "add_fact", "name": "me", "text": "x", "tier": bad})
            answer = json.loads(raw)
            assert status == 200 and not answer["ok"] and "tiers here" in answer["message"], answer
        assert ui.get_json("/api/history?tier=global")["changes"][0]["summary"]
        assert ui.get_json("/api/version?tier=global")["version"]
    finally:
        ui.stop()


def test_the_demo_in_a_project_shows_only_its_own_copy(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    serve(shop, home, [remember("prefers tabs", "me", scope="global")])
    before = (data_dir(home) / "memory.jsonl").read_bytes()
    ui = TierUI(shop, home, "--demo").login()
    try:
        graph = ui.get_json("/api/graph")
        assert [t["tier"] for t in graph["tiers"]] == ["file"] and "me" not in {e["name"] for e in graph["entities"]}
        status, _, _ = ui.request("GET", "/api/graph?tier=global")
        assert status == 400
    finally:
        ui.stop()
    assert (data_dir(home) / "memory.jsonl").read_bytes() == before


def test_an_origin_set_in_an_included_config_file_is_found(tmp_path, home):
    shop = repo(home, tmp_path / "shop")
    (tmp_path / "remotes.config").write_text('[remote "origin"]\n\turl = git@github.com:acme/shop.git\n')
    git(shop, home, "config", "include.path", str(tmp_path / "remotes.config"))
    serve(shop, home, [remember("2026-03-01: deploy branch is main")])
    folder, = (data_dir(home) / "projects").iterdir()
    assert folder.name.startswith("github.com-acme-shop-")


def test_without_git_a_project_with_no_origin_is_found_by_its_last_path(tmp_path, home):
    shop = repo(home, tmp_path / "shop")
    serve(shop, home, [remember("2026-03-01: deploy branch is main")])
    no_git = tmp_path / "empty-bin"
    no_git.mkdir()
    recall, = serve(shop, home, [("recall", {"query": "deploy branch"})], PATH=str(no_git))
    assert "deploy branch is main" in recall
    assert len(list((data_dir(home) / "projects").iterdir())) == 1


def test_the_tier_selector_in_a_real_browser_switches_and_edits_the_chosen_tier(tmp_path, home):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import cdp
    if cdp.find_chromium() is None:
        pytest.skip("no chromium binary (install the Debian package `chromium`)")
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    serve(shop, home, [remember("2026-03-01: deploy branch is main"), remember("prefers tabs", "me", scope="global")])
    private, = (data_dir(home) / "projects").glob("*/memory.jsonl")
    everyone = data_dir(home) / "memory.jsonl"
    ui = TierUI(shop, home)
    browser = cdp.Browser(width=1280, height=800, color_scheme="light")
    drawn = "[...document.querySelectorAll('[data-entity]')].map((n) => n.dataset.entity).join(',')"
    try:
        browser.navigate(ui.url)
        browser.wait_for(f"{drawn} === 'deploy'", timeout=10)
        assert browser.evaluate("document.getElementById('tier').hidden") is False
        assert browser.evaluate("[...document.getElementById('tier').options].map((o) => o.value).join(',')") \
            == "private,global"
        browser.evaluate("(() => { const t = document.getElementById('tier'); t.value = 'global'; "
                         "t.dispatchEvent(new Event('change')); })()")
        browser.wait_for(f"{drawn} === 'me'", timeout=10)
        assert browser.evaluate("document.getElementById('graph-info').textContent").startswith("global memory")
        browser.click("[...document.querySelectorAll('[data-entity]')].find((n) => n.dataset.entity === 'me')"
                      ".querySelector('circle')")  # the node's dot (the group's centre may fall between dot and label)
        browser.wait_for("(document.getElementById('entity-name') || {}).textContent === 'me'", timeout=5)
        browser.click("document.getElementById('add-fact-input')")
        browser.type_text("uses vim")
        browser.click("document.getElementById('add-fact-btn')")
        browser.wait_for("[...document.querySelectorAll('#facts-list .fact')].some((li) => li.dataset.fact === "
                         "'uses vim')", timeout=5)
        assert "uses vim" in everyone.read_text() and "uses vim" not in private.read_text()
    finally:
        browser.close()
        ui.stop()


def test_the_session_briefing_of_a_project_names_the_global_rules_too(tmp_path, home):
    """--context in a project: its own rules and pinned facts, then the global tier's (your conventions hold in
    every project), within the budget; a global fact that is neither pinned nor a rule stays out."""
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    serve(shop, home, [
        ("create_entities", {"entities": [{"name": "RULE review", "entityType": "rule",
                                           "observations": ["every migration gets a second reviewer"]}]}),
        ("create_entities", {"entities": [{"name": "my style", "entityType": "convention",
                                           "observations": ["prefers small commits with imperative messages"]}],
                             "scope": "global"}),
        remember("likes green tea", "me", scope="global")])
    done = graphmem(shop, home, "--context", "--budget", "400")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "every migration gets a second reviewer" in out
    assert "Your global pinned facts and rules" in out and "prefers small commits" in out
    assert "green tea" not in out
    assert out.index("second reviewer") < out.index("prefers small commits")
    assert len(out) <= 400 * 4
    elsewhere = graphmem(tmp_path, home, "--context")  # outside any project: global only, said once
    assert "prefers small commits" in elsewhere.stdout and "Your global pinned" not in elsewhere.stdout


def test_a_private_memory_first_written_by_import_survives_the_first_commit(tmp_path, home):
    """--import is a write like a tool's: it records project.json, so the memory it filed by path is found again
    once the repository has a root commit (before the fix: orphaned, `--projects` said "last path ?")."""
    shop = repo(home, tmp_path / "shop", commit=False)
    notes = tmp_path / "CLAUDE.md"
    notes.write_text("# shop conventions\n- run make test before pushing\n")
    done = graphmem(shop, home, "--import", str(notes))
    assert done.returncode == 0 and "1 new entities" in done.stdout, done.stderr
    (shop / "a.txt").write_text("a")
    git(shop, home, "add", "-A")
    git(shop, home, "commit", "-qm", "first")
    recall, = serve(shop, home, [("recall", {"query": "make test before pushing"})])
    assert "run make test before pushing" in recall
    assert "last path ?" not in graphmem(shop, home, "--projects").stdout


def test_a_project_with_no_memory_yet_still_gets_the_global_rules_at_session_start(tmp_path, home):
    """--context in a new project used to print nothing (exit 0) although your global rules hold there too;
    it prints them and creates nothing for the project."""
    somewhere = repo(home, tmp_path / "old", "git@github.com:acme/old.git")
    serve(somewhere, home, [("create_entities", {"entities": [{"name": "my style", "entityType": "convention",
                                                               "observations": ["prefers small commits"]}],
                                                 "scope": "global"})])
    fresh = repo(home, tmp_path / "fresh", "git@github.com:acme/fresh.git")
    before = sorted(p.name for p in (data_dir(home) / "projects").iterdir()) \
        if (data_dir(home) / "projects").exists() else []
    done = graphmem(fresh, home, "--context", "--budget", "200")
    assert done.returncode == 0 and "no memory for this project yet" in done.stdout, done.stdout + done.stderr
    assert "prefers small commits" in done.stdout and ms.estimate_tokens(done.stdout.rstrip("\n")) <= 200
    hook = json.loads(graphmem(fresh, home, "--context", "--hook-json").stdout)
    assert "prefers small commits" in hook["hookSpecificOutput"]["additionalContext"]
    after = sorted(p.name for p in (data_dir(home) / "projects").iterdir()) \
        if (data_dir(home) / "projects").exists() else []
    assert after == before  # nothing was created for the fresh project


def test_a_delete_naming_entities_of_both_tiers_deletes_each_where_it_lives(tmp_path, home):
    """delete_entities / delete_observations naming a project entity and a global one: both go (before: the global
    one was "Not found" although every read showed it)."""
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    facts, deleted, gone = serve(shop, home, [
        remember("2026-03-01: deploy branch is main"), remember("likes green tea", "me", scope="global"),
        ("create_entities", {"entities": [{"name": "tools", "entityType": "note",
                                           "observations": ["uses vim", "uses zsh"]}], "scope": "global"}),
        ("delete_observations", {"deletions": [{"entityName": "deploy", "observations": ["2026-03-01: deploy "
                                                                                        "branch is main"]},
                                               {"entityName": "tools", "observations": ["uses zsh"]}]}),
        ("delete_entities", {"entityNames": ["deploy", "me"]}),
        ("read_graph", {})])[3:]
    assert "In your global memory: tools: -1" in facts, facts
    assert "Not found" not in deleted and "In your global memory: Deleted 1 entities" in deleted, deleted
    assert "deploy (" not in gone and "me (" not in gone and "tools (1)" in gone, gone


def test_a_project_write_to_a_global_entity_says_to_send_scope_global(tmp_path, home):
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    serve(shop, home, [remember("likes green tea", "me", scope="global"), remember("2026-03-01: deploy is manual")])
    requests = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add_observations", "arguments": {
            "observations": [{"entityName": "me", "contents": ["drinks it at 4 pm"]}]}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "create_relations", "arguments": {
            "relations": [{"from": "me", "to": "deploy", "relationType": "runs"}]}}}]
    done = subprocess.run([sys.executable, str(SERVER)], input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, cwd=shop, env=env_for(home), timeout=60)
    replies = {r["id"]: r["result"] for r in map(json.loads, done.stdout.splitlines())}
    for i in (1, 2):
        text = replies[i]["content"][0]["text"]
        assert '"me" is in your global memory' in text and 'scope: "global"' in text, text
    assert replies[1]["isError"]
    assert "drinks it" not in (data_dir(home) / "memory.jsonl").read_text()  # nothing written anywhere


def test_a_read_only_the_global_tier_answers_does_not_say_nothing_matched(tmp_path, home):
    """recall / search_nodes that only the global tier answers: the project part says so in one line, not
    "nothing matched ... try other words" above the global facts that did match."""
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    recall, search = serve(shop, home, [remember("2026-03-01: deploy is manual"),
                                        remember("prefers tabs over spaces", "me", scope="global"),
                                        ("recall", {"query": "tabs"}), ("search_nodes", {"query": "tabs"})])[2:]
    for text in (recall, search):
        assert text.startswith("Nothing in this project's memory matched \"tabs\".\n== global memory"), text
        assert "Try other words" not in text and "prefers tabs" in text
    both, = serve(shop, home, [("recall", {"query": "deploy manual"})])
    assert both.startswith("## deploy"), both  # the project answered: its own text, unchanged


def test_projects_points_at_the_memory_a_renamed_remote_left_behind(tmp_path, home):
    """The remote renamed (origin URL changed): the project is a new identity with no memory, and the old one
    sits unread. --projects says which one was last used at this work tree and how to keep using it."""
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/old-name.git")
    serve(shop, home, [remember("2026-03-01: deploy branch is main")])
    git(shop, home, "remote", "set-url", "origin", "git@github.com:acme/new-name.git")
    out = graphmem(shop, home, "--projects").stdout
    assert "github.com/acme/old-name: 1 facts" in out and "renamed remote?" in out, out
    assert "github.com-acme-new-name-" in out.split("renamed remote?")[1], out
    serve(shop, home, [remember("2026-03-02: the api listens on 8080", "api")])
    assert "renamed remote?" not in graphmem(shop, home, "--projects").stdout  # it has a memory of its own now


def test_move_private_on_a_full_disk_changes_neither_file(tmp_path, home):
    """The team write fails (a file-size limit stands in for a full disk): the private memory stays where it
    was, whole, no backup is made, the team file is as it was, and the answer is a message, not a traceback."""
    import resource
    shop = repo(home, tmp_path / "shop", "git@github.com:acme/shop.git")
    serve(shop, home, [("create_entities", {"entities": [
        {"name": f"svc{i}", "entityType": "service", "observations": [f"service {i} " + "x" * 200]}
        for i in range(20)]})])
    private, = (data_dir(home) / "projects").glob("*/memory.jsonl")
    assert graphmem(shop, home, "--init").returncode == 0
    team = shop / ".graphmem" / "memory.jsonl"
    write_graph(team, [("api", "backend", ["written in Go"])])
    before_private, before_team = private.read_bytes(), team.read_bytes()
    limit = len(before_team) + 512  # the merged team file is several KB
    done = subprocess.run([sys.executable, str(SERVER), "--init", "--move-private"], cwd=shop, capture_output=True,
                          text=True, timeout=60, env=env_for(home),
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert private.read_bytes() == before_private and not list(private.parent.glob("memory.jsonl.moved-*"))
    assert team.read_bytes() == before_team
    assert not [p for p in team.parent.iterdir() if p.name.startswith(".memory.jsonl") or p.suffix == ".tmp"]
