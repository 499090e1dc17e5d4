#!/usr/bin/env python3
"""Screenshot of the UI on the built-in demo graph: docs/ui-demo.png (1280x800, light theme).

Starts `memory_server.py --ui 0 --no-open --demo`, opens the printed link in headless Chromium
(tools/cdp.py), selects a well-connected entity so the picture shows the entity panel, and saves
the PNG. Usage: python tools/screenshot.py [--out PATH] [--dark] [--select NAME] [--tab overview]
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(Path(__file__).absolute().parent))
import cdp  # noqa: E402


def start_server(extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    proc = subprocess.Popen([sys.executable, str(ROOT / "memory_server.py"), "--ui", "0", "--no-open", "--demo"],
                            cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    prefix = "graphmem UI: "
    if not line.startswith(prefix):
        proc.kill()
        raise SystemExit("server did not print its link; got %r; stderr: %s" % (line, proc.stderr.read()[-2000:]))
    return proc, line[len(prefix):]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "ui-demo.png"))
    ap.add_argument("--dark", action="store_true", help="dark colour scheme")
    ap.add_argument("--select", default="shop-api", help="entity to open in the panel ('' for none)")
    ap.add_argument("--tab", default="entity", choices=["entity", "overview", "history"])
    args = ap.parse_args()
    if not cdp.find_chromium():
        raise SystemExit("no chromium binary found (apt-get install chromium)")
    proc, url = start_server()
    try:
        with cdp.Browser(color_scheme="dark" if args.dark else "light") as b:
            b.navigate(url)
            b.wait_for("document.querySelectorAll('[data-entity]').length > 0")
            if args.select:
                b.click("document.querySelector('[data-entity=\"%s\"]')" % args.select.replace('"', '\\"'))
                b.wait_for("document.getElementById('entity-name') !== null")
            if args.tab != "entity":
                b.click("document.getElementById('tab-%s')" % args.tab)
                b.pump(0.5)
            b.evaluate("document.activeElement && document.activeElement.blur && document.activeElement.blur()")
            b.pump(0.6)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            b.screenshot(args.out)
            errors = b.events_named("Runtime.exceptionThrown")
            if errors:
                print("page raised %d JS exception(s)" % len(errors), file=sys.stderr)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
    print("wrote", args.out)


if __name__ == "__main__":
    main()
