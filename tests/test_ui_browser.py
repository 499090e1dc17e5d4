"""The web UI in a real headless Chromium, driven over the DevTools protocol (tools/cdp.py, stdlib only).

The real server runs as a subprocess (`memory_server.py --ui 0 --no-open`) on a temporary graph.
Skipped only when no Chromium binary is installed (Debian package `chromium`).
"""
import http.server
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import cdp  # noqa: E402

SERVER = ROOT / "memory_server.py"
XSS = "<img src=x onerror=alert(1)>"
SEED = [
    {"type": "entity", "name": "Alpha", "entityType": "service", "observations": ["runs on port 8080", "2026-01-05: deployed 1.0"]},
    {"type": "entity", "name": "Beta", "entityType": "person", "observations": ["maintains Alpha"]},
    {"type": "entity", "name": XSS, "entityType": "<b>type</b>", "observations": ["<script>alert('fact')</script>"]},
    {"type": "relation", "from": "Beta", "to": "Alpha", "relationType": "maintains"},
    {"type": "relation", "from": XSS, "to": "Alpha", "relationType": "<i>pokes</i>"},
]

pytestmark = pytest.mark.skipif(cdp.find_chromium() is None,
                                reason="no chromium binary (install the Debian package `chromium`)")


def js(value):
    """A Python value as a JS literal."""
    return json.dumps(value)


def node_js(name):
    return "[...document.querySelectorAll('[data-entity]')].find((n) => n.dataset.entity === %s)" % js(name)


@pytest.fixture(scope="module")
def server():
    tmp = tempfile.mkdtemp(prefix="graphmem-ui-browser-")
    path = os.path.join(tmp, "memory.jsonl")
    with open(path, "w", encoding="utf-8") as fh:
        for obj in SEED:
            fh.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
    project = os.path.join(tmp, "project")
    os.makedirs(project)
    with open(os.path.join(project, "anchored.py"), "w") as fh:
        fh.write("def helper():\n    return 1\n")
    err = open(os.path.join(tmp, "server.stderr"), "w+")
    proc = subprocess.Popen([sys.executable, str(SERVER), "--ui", "0", "--no-open"], cwd=str(ROOT),
                            env=dict(os.environ, MEMORY_FILE_PATH=path, MEMORY_PROJECT_ROOT=project),
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=err, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("graphmem UI: "):
        proc.kill()
        err.seek(0)
        pytest.fail("server printed no link (got %r); stderr: %s" % (line, err.read()[-2000:]))
    url = line.split("graphmem UI: ", 1)[1].strip()
    yield {"url": url, "path": path, "proc": proc, "project": project}
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
    err.close()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def page(server):
    b = cdp.Browser(width=1280, height=800, color_scheme="light")
    try:
        b.navigate(server["url"])
        b.wait_for("document.querySelectorAll('[data-entity]').length >= 3", timeout=10)
        yield b
    finally:
        b.close()


def js_errors(page):
    """Uncaught exceptions the page threw since it was last loaded."""
    page.pump(0.1)
    return [e["params"]["exceptionDetails"].get("text", "") + " " +
            str(e["params"]["exceptionDetails"].get("exception", {}).get("description", ""))
            for e in page.events_named("Runtime.exceptionThrown")]


@pytest.fixture(autouse=True)
def fresh_page(page, server):
    """Every test starts from a freshly loaded page (graph tab, nothing selected), so the tests pass in any
    order; and every test ends with no JavaScript error thrown."""
    page.navigate(server["url"])
    page.wait_for("document.querySelectorAll('[data-entity]').length >= 3", timeout=10)
    yield
    assert not js_errors(page)


def file_entities(path):
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                o = json.loads(line)
                if o.get("type") == "entity":
                    out[o["name"]] = o
    return out


def agent_write(path, entities):
    code = ("import sys, json; sys.path.insert(0, %r); import memory_server as ms; "
            "m = ms.Memory(ms.Settings.from_env({'MEMORY_FILE_PATH': %r}), client='agent'); "
            "text, err = m.call_tool('create_entities', {'entities': json.loads(sys.argv[1])}); "
            "sys.exit(1 if err else 0)" % (str(ROOT), path))
    out = subprocess.run([sys.executable, "-c", code, json.dumps(entities)], cwd=str(ROOT),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def select_entity(page, name):
    page.click(node_js(name))
    page.wait_for("(document.getElementById('entity-name') || {}).textContent === %s" % js(name), timeout=5)


def test_page_loads_with_key_and_draws_entities(page, server):
    assert page.evaluate("location.pathname") == "/"
    assert "key=" not in page.evaluate("location.href"), "the key should not stay in the address bar"
    names = page.evaluate("[...document.querySelectorAll('[data-entity]')].map((n) => n.dataset.entity).sort()")
    assert names == sorted(file_entities(server["path"]))  # other tests may have added some: the file decides
    assert {e["name"] for e in SEED if e["type"] == "entity"} <= set(names)
    assert page.evaluate("document.getElementById('search') !== null && document.getElementById('undo-btn') !== null")
    assert page.evaluate("document.cookie") == "", "the key cookie must be HttpOnly"


def test_hostile_entity_name_renders_as_text(page):
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.querySelectorAll('#nodes script, #entity-panel script, #nodes b, #nodes i').length") == 0
    label = page.evaluate("(%s).textContent" % node_js(XSS))
    assert "<img src=x" in label
    select_entity(page, XSS)
    panel = page.evaluate("document.getElementById('entity-panel').textContent")
    assert XSS in panel
    assert "<script>alert('fact')</script>" in panel
    assert "<b>type</b>" in panel
    assert "<i>pokes</i>" in panel
    assert page.evaluate("document.querySelectorAll('img, #entity-panel script, #entity-panel b, #entity-panel i').length") == 0
    page.pump(0.2)
    assert not page.events_named("Page.javascriptDialogOpening"), "an alert() ran: text was parsed as HTML"


def test_edit_on_the_page_reaches_the_file(page, server):
    select_entity(page, "Alpha")
    text = "added from the browser at %d" % int(time.time())
    page.click("document.getElementById('add-fact-input')")
    page.type_text(text)
    page.click("document.getElementById('add-fact-btn')")
    deadline = time.time() + 5
    while time.time() < deadline:
        if text in file_entities(server["path"])["Alpha"]["observations"]:
            break
        time.sleep(0.05)
    assert text in file_entities(server["path"])["Alpha"]["observations"]
    page.wait_for("[...document.querySelectorAll('#facts-list .fact')].some((li) => li.dataset.fact === %s)" % js(text), timeout=5)
    assert page.evaluate("document.getElementById('status').textContent").strip()
    assert page.evaluate("document.getElementById('add-fact-input').value") == ""


def test_refused_edit_is_shown(page, server):
    select_entity(page, "Alpha")
    page.click("document.getElementById('add-fact-input')")
    page.type_text("w" * 301)
    page.click("document.getElementById('add-fact-btn')")
    page.wait_for("document.getElementById('status').dataset.kind === 'err'", timeout=5)
    assert "w" * 301 not in file_entities(server["path"])["Alpha"]["observations"]
    # the refused text stays in the box so it can be shortened
    assert page.evaluate("document.getElementById('add-fact-input').value") == "w" * 301
    page.evaluate("(() => { const i = document.getElementById('add-fact-input'); i.value = ''; i.dispatchEvent(new Event('input')); })()")


def test_agent_write_shows_live_and_keeps_selection_and_draft(page, server):
    select_entity(page, "Beta")
    page.click("document.getElementById('add-fact-input')")
    page.type_text("half-typed draft")
    agent_write(server["path"], [{"name": "Written By Agent", "entityType": "service", "observations": ["hello from an agent"]}])
    t0 = time.time()
    page.wait_for("!!(%s)" % node_js("Written By Agent"), timeout=2.0)
    assert time.time() - t0 <= 2.0
    assert page.evaluate("document.getElementById('entity-name').textContent") == "Beta"
    assert page.evaluate("document.getElementById('add-fact-input').value") == "half-typed draft"
    assert page.evaluate("document.activeElement && document.activeElement.id") == "add-fact-input"
    page.evaluate("(() => { const i = document.getElementById('add-fact-input'); i.value = ''; i.dispatchEvent(new Event('input')); })()")


def test_search_finds_facts_and_undo_button_works(page, server):
    page.click("document.getElementById('search')")
    page.type_text("8080")
    page.wait_for("[...document.querySelectorAll('#search-results [data-goto]')].some((b) => b.dataset.goto === 'Alpha')", timeout=5)
    page.press("Escape")
    page.evaluate("(() => { const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); })()")
    select_entity(page, "Beta")
    page.click("document.getElementById('add-fact-input')")
    page.type_text("to be undone")
    page.click("document.getElementById('add-fact-btn')")
    page.wait_for("[...document.querySelectorAll('#facts-list .fact')].some((li) => li.dataset.fact === 'to be undone')", timeout=5)
    page.click("document.getElementById('undo-btn')")
    page.wait_for("![...document.querySelectorAll('#facts-list .fact')].some((li) => li.dataset.fact === 'to be undone')", timeout=5)
    assert "to be undone" not in file_entities(server["path"])["Beta"]["observations"]


def test_keyboard_and_theme(page):
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.press("/", "Slash", 191)
    assert page.evaluate("document.activeElement.id") == "search"
    page.type_text("Alpha")
    page.wait_for("document.querySelectorAll('#search-results [data-goto]').length > 0", timeout=5)
    page.press("Enter", "Enter", 13)
    page.wait_for("(document.getElementById('entity-name') || {}).textContent === 'Alpha'", timeout=5)
    page.evaluate("(() => { const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); })()")
    # one entity node is in the tab order, and Enter on it opens it
    assert page.evaluate("document.querySelectorAll('[data-entity][tabindex=\"0\"]').length") == 1
    page.evaluate("(%s).focus()" % node_js("Beta"))
    page.press("Enter", "Enter", 13)
    page.wait_for("(document.getElementById('entity-name') || {}).textContent === 'Beta'", timeout=5)
    page.evaluate("document.getElementById('graph').focus()")
    page.press("Escape", "Escape", 27)
    page.wait_for("document.getElementById('entity-name') === null", timeout=5)
    # theme toggle is remembered
    before = page.evaluate("document.documentElement.dataset.theme || ''")
    page.click("document.getElementById('theme-btn')")
    after = page.evaluate("document.documentElement.dataset.theme")
    assert after in ("light", "dark") and after != before
    assert page.evaluate("localStorage.getItem('graphmem-theme')") == after
    page.click("document.getElementById('theme-btn')")


def test_stale_anchored_fact_can_be_confirmed(page, server):
    fact = "helper lives in anchored.py [@anchored.py]"
    select_entity(page, "Beta")
    page.click("document.getElementById('add-fact-input')")
    page.type_text(fact)
    page.click("document.getElementById('add-fact-btn')")
    row = "[...document.querySelectorAll('#facts-list .fact')].find((li) => li.dataset.fact === %s)" % js(fact)
    page.wait_for("!!(%s)" % row, timeout=5)
    assert page.evaluate("(%s).querySelector('.badge.anchor-current') !== null" % row)
    with open(os.path.join(server["project"], "anchored.py"), "w") as fh:
        fh.write("def helper():\n    return 2 + 40  # body edited\n")
    page.navigate(server["url"])  # code changes do not touch the graph: load the page again
    page.wait_for("document.querySelectorAll('[data-entity]').length >= 3", timeout=10)
    select_entity(page, "Beta")
    page.wait_for("(%s).classList.contains('stale')" % row, timeout=5)
    assert page.evaluate("(%s).querySelector('[data-action=verify]') !== null" % row)
    assert page.evaluate("(%s).querySelector('[data-action=archive]') !== null" % row)
    page.click("(%s).querySelector('[data-action=verify]')" % row)
    page.wait_for("!(%s).classList.contains('stale')" % row, timeout=5)
    assert page.evaluate("document.getElementById('status').dataset.kind") == "ok"


def test_a_probe_is_added_and_removed_on_the_overview(page, server):
    page.click("document.getElementById('tab-overview')")
    page.wait_for("!!document.getElementById('probe-add-btn')", timeout=5)
    for field, value in (("probe-query", "which port does alpha use"), ("probe-entity", "Alpha")):
        page.click("document.getElementById(%s)" % js(field))
        page.type_text(value)
    page.click("document.getElementById('probe-add-btn')")
    item = "[...document.querySelectorAll('#ov-probes li.row')].find((li) => li.textContent.includes('which port'))"
    page.wait_for("!!(%s)" % item, timeout=5)
    remove = "(%s).querySelector('[data-action=remove-probe]')" % item
    page.evaluate("%s.scrollIntoView()" % remove)
    page.click(remove)
    page.wait_for("!(%s)" % item, timeout=5)
    assert page.evaluate("document.getElementById('status').dataset.kind") == "ok"


# A page on another 127.0.0.1 port is same-site: the browser sends it the SameSite=Strict cookie. It tries
# every write a page can make without the UI's token: no-cors fetches (text/plain), a CORS fetch with a
# guessed token header (needs a preflight the UI never grants) and a text/plain form posted into a frame.
ATTACK_PAGE = """<!doctype html><meta charset=utf-8><title>another local app</title>
<iframe name=sink></iframe>
<form id=f method=POST target=sink enctype=text/plain action="%(ui)s/api/op">
<input name='{"op":"add_fact","name":"Alpha","text":"planted by a form","x":"' value='"}'></form>
<script>
window.results = [];
const target = "%(ui)s/api/op";
const tries = [
  () => fetch(target, {method: "POST", mode: "no-cors", credentials: "include",
                       body: JSON.stringify({op: "add_fact", name: "Alpha", text: "planted by no-cors"})}),
  () => fetch(target, {method: "POST", mode: "no-cors", credentials: "include",
                       headers: {"Content-Type": "application/json"},
                       body: JSON.stringify({op: "delete_entity", name: "Beta"})}),
  () => fetch(target, {method: "POST", credentials: "include",
                       headers: {"Content-Type": "application/json", "X-Graphmem-Token": "guess"},
                       body: JSON.stringify({op: "delete_entity", name: "Beta"})}),
  () => fetch("%(ui)s/api/graph", {credentials: "include"}).then((r) => r.text()),
];
(async () => {
  for (const t of tries) {
    try { const r = await t(); window.results.push(typeof r === "string" ? "read:" + r.slice(0, 40) : r.type); }
    catch (e) { window.results.push("blocked"); }
  }
  document.getElementById("f").submit();
  setTimeout(() => { window.done = true; }, 500);
})();
</script>"""


@pytest.fixture
def other_local_app(server):
    """An unrelated web app on another 127.0.0.1 port serving ATTACK_PAGE; yields its URL."""
    ui = "http://127.0.0.1:%d" % urllib.parse.urlsplit(server["url"]).port
    body = (ATTACK_PAGE % {"ui": ui}).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d/" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_a_page_on_another_local_port_cannot_change_the_graph(page, server, other_local_app):
    before = file_entities(server["path"])
    page.navigate(other_local_app)
    page.wait_for("window.done === true", timeout=10)
    results = page.evaluate("window.results")
    assert not [r for r in results if r.startswith("read:")], results  # nothing readable either
    time.sleep(0.3)
    assert file_entities(server["path"]) == before, results
    # the UI itself still works in this browser: the used link (or a reload) keeps its session
    page.navigate(server["url"])
    page.wait_for("document.querySelectorAll('[data-entity]').length >= 3", timeout=10)
    assert page.evaluate("location.pathname + location.search") == "/"


def test_a_partly_saved_edit_names_the_older_fact_it_archived(page, server):
    """A partial save's status line lists what was refused and also what the saved fact replaced (archived):
    the UI user is never left unaware that an older fact left the graph."""
    def run(body):
        status = page.evaluate("window.graphmemOp(%s).then((r) => r.status)" % js(body))
        return status, page.evaluate("document.getElementById('status').textContent")
    run({"op": "create_entity", "name": "deployer", "entityType": "service"})
    assert run({"op": "add_fact", "name": "deployer", "text": "deploy branch is main"})[0] == "done"
    status, text = run({"op": "add_facts", "name": "deployer",
                        "texts": ["deploy branch is prod", "deploy key AKIA" + "IOSFODNN7EXAMPLE"]})
    assert status == "partial" and text.startswith("Partly saved:"), text
    assert "looks like a credential" in text and "replaced \u201cdeploy branch is main\u201d (archived)" in text, text


def test_op_results_are_shown_from_their_data(page, server):
    """The status line says what an op did from the server's data (issue 10 item 7): a name that reads like
    a refusal is shown as done, one of two facts refused as partly saved with its reason, a refusal as such."""
    def run(body):
        status = page.evaluate("window.graphmemOp(%s).then((r) => r.status)" % js(body))
        return status, page.evaluate("document.getElementById('status').dataset.kind"), \
            page.evaluate("document.getElementById('status').textContent")

    status, kind, text = run({"op": "create_entity", "name": "Not found page", "entityType": "page"})
    assert (status, kind, text) == ("done", "ok", "Created 1: Not found page")
    run({"op": "create_entity", "name": "skipped-jobs", "entityType": "queue"})
    status, kind, text = run({"op": "rename", "name": "skipped-jobs", "newName": "refused-orders"})
    assert (status, kind) == ("done", "ok") and text.startswith("Renamed"), text
    status, kind, text = run({"op": "add_facts", "name": "Not found page",
                              "texts": ["served for unknown paths", "deploy key AKIA" + "IOSFODNN7EXAMPLE"]})
    assert (status, kind) == ("partial", "warn"), (status, kind, text)
    assert text.startswith("Partly saved:") and "looks like a credential" in text and "AKIA" not in text, text
    status, kind, text = run({"op": "add_fact", "name": "Not found page", "text": "w" * 301})
    assert (status, kind) == ("refused", "err") and text.startswith("Refused: ") and "300-char limit" in text, text
    status, kind, text = run({"op": "add_fact", "name": "Not found page", "text": "served for unknown paths"})
    assert (status, kind) == ("unchanged", "info") and text.startswith("Nothing changed:") and "duplicate" in text
    ents = file_entities(server["path"])
    assert ents["Not found page"]["observations"] == ["served for unknown paths"] and "refused-orders" in ents

