#!/usr/bin/env python3
"""Interop check: drive a stdio MCP server with the official MCP Python SDK client.

Dev tool, not part of CI. Needs the `mcp` package (tested with 2.3.0), e.g. from
the venv that tools/interop_check.sh --install creates; otherwise stdlib only.

Usage:
    sdk_client_check.py [--memory-file PATH] [--timeout S] -- COMMAND [ARGS...]
    sdk_client_check.py --http URL [--token TOKEN] [--timeout S]
        (a running `graphmem --http` server, over the SDK's Streamable HTTP client; the token defaults
        to $MEMORY_HTTP_TOKEN. Both groups below run against the one server, so client-* sees session-*'s
        writes; the wire-tap probe check is stdio-only)

Runs two groups of checks against a fresh server process each:
  session-*  mcp.ClientSession (legacy handshake: initialize 2025-11-25,
             list_tools, read_graph, create_entities, search_nodes, unknown tool, ping)
  client-*   mcp.Client(mode="auto") (server/discover probe, then either adopt
             the modern era or fall back to initialize; list_tools; call_tool)

The server's stdio traffic is recorded through a small line tap (this script
re-invoked with --tap) so the discover probe path can be shown exactly.
Stdlib-only helper modes (no `mcp` needed):
    sdk_client_check.py --tap LOG -- COMMAND...   line tap; "%p" in LOG -> tap pid
    sdk_client_check.py --tap-summary LOG...      one line per log: method->outcome
    sdk_client_check.py --tap-lint LOG...         stdout framing check over tap logs
                                                  (non-JSON lines, CR, envelope shape)
Prints one "PASS|FAIL|INFO <check> <detail>" line per check; exit 1 if any FAIL.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

TAP_FLAG = "--tap"
TAP_SUMMARY_FLAG = "--tap-summary"
TAP_LINT_FLAG = "--tap-lint"


# --------------------------------------------------------------------------- tap
def run_tap(log_path: str, cmd: list[str]) -> int:
    """Copy stdin->child and child->stdout line by line, logging every line."""
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    log_path = log_path.replace("%p", str(os.getpid()))
    lock = threading.Lock()
    log = open(log_path, "ab", buffering=0)
    t0 = time.monotonic()

    def record(direction: bytes, line: bytes) -> None:
        with lock:
            log.write(b"%s %.3f " % (direction, time.monotonic() - t0) + line.rstrip(b"\n") + b"\n")

    def pump_in() -> None:
        src = sys.stdin.buffer
        try:
            for line in iter(src.readline, b""):
                record(b">", line)
                child.stdin.write(line)
                child.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        finally:
            try:
                child.stdin.close()
            except OSError:
                pass

    threading.Thread(target=pump_in, daemon=True).start()
    out = sys.stdout.buffer
    try:
        for line in iter(child.stdout.readline, b""):
            record(b"<", line)
            out.write(line)
            out.flush()
    except (BrokenPipeError, OSError):
        pass
    rc = child.wait()
    record(b"#", b"server exited rc=%d" % rc)
    return rc


def read_tap(log_path: str) -> list[tuple[str, float, object]]:
    rows = []
    try:
        with open(log_path, "rb") as f:
            for raw in f:
                direction, ts, rest = raw.rstrip(b"\n").split(b" ", 2)
                try:
                    msg: object = json.loads(rest)
                except ValueError:
                    msg = rest.decode("utf-8", "replace")
                rows.append((direction.decode(), float(ts), msg))
    except FileNotFoundError:
        pass
    return rows


def wire_steps(log_path: str):
    """(sent requests, responses by id, human-readable step list) from a tap log."""
    rows = read_tap(log_path)
    sent = [(ts, m) for d, ts, m in rows if d == ">" and isinstance(m, dict)]
    recv = [(ts, m) for d, ts, m in rows if d == "<" and isinstance(m, dict)]
    by_id = {json.dumps(m.get("id")): (ts, m) for ts, m in recv if "id" in m}
    steps = []
    for ts, m in sent:
        meth = m.get("method", "<response>")
        pv = ((m.get("params") or {}).get("_meta") or {}).get("io.modelcontextprotocol/protocolVersion") \
            if isinstance(m.get("params"), dict) else None
        if meth == "initialize":
            pv = (m.get("params") or {}).get("protocolVersion")
        tag = f"[{pv}]" if pv else ""
        mid = m.get("id")
        if mid is None:
            steps.append(f"{meth}{tag}(notif)")
            continue
        rts, resp = by_id.get(json.dumps(mid), (None, None))
        if resp is None:
            out = "no-response"
        elif "error" in resp:
            out = f"error {resp['error'].get('code')}"
        else:
            res = resp.get("result")
            out = "result"
            if isinstance(res, dict) and meth == "initialize":
                out += f"[{res.get('protocolVersion')}]"
        lat = f" {1000 * (rts - ts):.0f}ms" if rts is not None else ""
        steps.append(f"{meth}{tag}->{out}{lat}")
    for d, ts, m in rows:
        if d == "#":
            steps.append(str(m))
    return sent, by_id, steps


def tap_lint(paths: list[str]) -> int:
    """Check every server->client line in the tap logs: one JSON-RPC message per line (doc 1.1 T3/T4, 1.2 J1)."""
    problems: list[str] = []
    lines = 0
    for path in paths:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.startswith(b"< "):
                    continue
                lines += 1
                body = raw.rstrip(b"\n").split(b" ", 2)[2]
                where = os.path.basename(path)
                if body.endswith(b"\r"):
                    problems.append(f"{where}: line ends with CR")
                try:
                    msg = json.loads(body)
                except ValueError:
                    problems.append(f"{where}: non-JSON stdout line {body[:120].decode('utf-8', 'replace')!r}")
                    continue
                if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
                    problems.append(f"{where}: not a JSON-RPC 2.0 object: {short(msg, 120)}")
                    continue
                if "method" not in msg:
                    keys = set(msg) - {"jsonrpc", "id"}
                    if keys not in ({"result"}, {"error"}) or "id" not in msg:
                        problems.append(f"{where}: bad response envelope keys {sorted(msg)}")
    counts: dict[str, set[str]] = {}
    for p in problems:
        where, what = p.split(": ", 1)
        counts.setdefault(what, set()).add(where)
    if counts:
        print(f"FAIL {len(problems)} problem(s) in {lines} server lines over {len(paths)} logs: "
              + " ; ".join(f"{what} (in {len(w)} logs, e.g. {sorted(w)[0]})" for what, w in list(counts.items())[:4]))
        return 1
    print(f"PASS {lines} server lines over {len(paths)} logs, all single-line JSON-RPC")
    return 0


# --------------------------------------------------------------------------- checks
class Report:
    def __init__(self) -> None:
        self.failed = 0
        self.passed = 0

    def ok(self, name: str, detail: str = "") -> None:
        self.passed += 1
        print(f"PASS {name} {detail}".rstrip(), flush=True)

    def fail(self, name: str, detail: str = "") -> None:
        self.failed += 1
        print(f"FAIL {name} {detail}".rstrip(), flush=True)

    def info(self, name: str, detail: str = "") -> None:
        print(f"INFO {name} {detail}".rstrip(), flush=True)


def short(obj: object, n: int = 300) -> str:
    s = obj if isinstance(obj, str) else json.dumps(obj, default=str, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 3] + "..."


def text_of(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in (result.content or []) if getattr(c, "type", "") == "text")


def err(e: BaseException) -> str:
    code = getattr(e, "code", None)
    if code is not None and hasattr(e, "message"):
        return f"MCPError code={code} message={e.message!r} data={short(getattr(e, 'data', None), 120)}"
    return f"{type(e).__name__}: {short(str(e), 300)}"


def server_params(mcp, args, tap_log: str):
    env = {"MEMORY_FILE_PATH": args.memory_file} if args.memory_file else {}
    return mcp.StdioServerParameters(
        command=sys.executable,
        args=[os.path.abspath(__file__), TAP_FLAG, tap_log, "--", *args.cmd],
        env=env,
    )


def http_transport(args):
    """The SDK's Streamable HTTP client transport for --http, with the bearer token header."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {args.token}"})
    return streamable_http_client(args.http, http_client=client)


def transport(mcp, args, tap_log: str):
    """stdio (a fresh server process behind the line tap) or Streamable HTTP (--http)."""
    if args.http:
        return http_transport(args)
    from mcp.client.stdio import stdio_client
    return stdio_client(server_params(mcp, args, tap_log))


async def check_session(mcp, args, rep: Report, tap_log: str) -> None:
    import anyio

    try:
        with anyio.fail_after(args.timeout):
            async with transport(mcp, args, tap_log) as (r, w):
                async with mcp.ClientSession(r, w) as s:
                    # initialize
                    try:
                        init = await s.initialize()
                        pv = init.protocol_version
                        name = init.server_info.name if init.server_info else None
                        has_tools = init.capabilities.tools is not None
                        detail = f"protocolVersion={pv} serverInfo.name={name} capabilities.tools={has_tools}"
                        if pv == "2025-11-25" and has_tools and name:
                            rep.ok("session-initialize", detail)
                        else:
                            rep.fail("session-initialize", detail + " (expected 2025-11-25 echo, tools capability)")
                    except Exception as e:
                        rep.fail("session-initialize", err(e))
                        return
                    # list_tools
                    try:
                        lt = await s.list_tools()
                        names = [t.name for t in lt.tools]
                        want = {"read_graph", "create_entities", "search_nodes"}
                        missing = sorted(want - set(names))
                        detail = f"{len(names)} tools {names} nextCursor={lt.next_cursor!r}"
                        if missing:
                            rep.fail("session-list_tools", detail + f" missing={missing}")
                        elif lt.next_cursor:
                            rep.fail("session-list_tools", detail + " (ClientSession reads page 1 only; doc U9)")
                        else:
                            rep.ok("session-list_tools", detail)
                    except Exception as e:
                        rep.fail("session-list_tools", err(e))
                    # read_graph
                    try:
                        res = await s.call_tool("read_graph", {})
                        detail = f"isError={res.is_error} text={short(text_of(res), 120)!r} structured={short(res.structured_content, 120)}"
                        (rep.fail if res.is_error or not res.content else rep.ok)("session-call-read_graph", detail)
                    except Exception as e:
                        rep.fail("session-call-read_graph", err(e))
                    # create_entities
                    try:
                        res = await s.call_tool(
                            "create_entities",
                            {"entities": [{"name": "Interop_Alice", "entityType": "person",
                                           "observations": ["likes green tea"]}]},
                        )
                        detail = f"isError={res.is_error} text={short(text_of(res), 160)!r}"
                        ok = not res.is_error and "Interop_Alice" in (text_of(res) + json.dumps(res.structured_content, default=str))
                        (rep.ok if ok else rep.fail)("session-call-create_entities", detail)
                    except Exception as e:
                        rep.fail("session-call-create_entities", err(e))
                    # search_nodes
                    try:
                        res = await s.call_tool("search_nodes", {"query": "green tea"})
                        blob = text_of(res) + json.dumps(res.structured_content, default=str)
                        detail = f"isError={res.is_error} text={short(text_of(res), 160)!r}"
                        ok = not res.is_error and "Interop_Alice" in blob
                        (rep.ok if ok else rep.fail)("session-call-search_nodes", detail)
                    except Exception as e:
                        rep.fail("session-call-search_nodes", err(e))
                    # unknown tool: -32602 (doc U6) preferred; isError result tolerated
                    try:
                        res = await s.call_tool("no_such_tool_xyz", {})
                        detail = f"isError={res.is_error} text={short(text_of(res), 160)!r}"
                        if res.is_error:
                            rep.ok("session-call-unknown_tool", "result isError (doc U6 recommends -32602) " + detail)
                        else:
                            rep.fail("session-call-unknown_tool", "unknown tool succeeded: " + detail)
                    except Exception as e:
                        code = getattr(e, "code", None)
                        (rep.ok if code == -32602 else rep.fail)("session-call-unknown_tool", err(e))
                    # ping
                    try:
                        await s.send_ping()
                        rep.ok("session-ping", "")
                    except Exception as e:
                        rep.fail("session-ping", err(e))
    except TimeoutError:
        rep.fail("session-timeout", f"no completion within {args.timeout}s")
    except Exception as e:
        rep.fail("session-transport", err(e))


async def check_client_auto(mcp, args, rep: Report, tap_log: str) -> None:
    import anyio

    t0 = time.monotonic()
    try:
        with anyio.fail_after(args.timeout):
            server = http_transport(args) if args.http else server_params(mcp, args, tap_log)
            async with mcp.Client(server, mode="auto") as c:
                elapsed = time.monotonic() - t0
                s = c.session
                path = "modern(adopted server/discover)" if s.discover_result is not None else (
                    "legacy(fell back to initialize)" if s.initialize_result is not None else "unknown")
                rep.ok("client-auto-connect",
                       f"path={path} protocolVersion={c.protocol_version} "
                       f"serverInfo={c.server_info.name if c.server_info else None} connect={elapsed:.2f}s")
                try:
                    lt = await c.list_tools()
                    names = [t.name for t in lt.tools]
                    (rep.ok if "read_graph" in names else rep.fail)(
                        "client-auto-list_tools", f"{len(names)} tools nextCursor={lt.next_cursor!r}")
                except Exception as e:
                    rep.fail("client-auto-list_tools", err(e))
                try:
                    res = await c.call_tool("read_graph", {})
                    detail = f"isError={res.is_error} text={short(text_of(res), 120)!r}"
                    (rep.fail if res.is_error or not res.content else rep.ok)("client-auto-call-read_graph", detail)
                except Exception as e:
                    rep.fail("client-auto-call-read_graph", err(e))
    except TimeoutError:
        rep.fail("client-auto-connect", f"timeout after {args.timeout}s")
    except Exception as e:
        rep.fail("client-auto-connect", err(e))

    if args.http:  # no wire tap over HTTP; the path above says whether discover was adopted
        return
    # Probe path from the wire tap.
    sent, by_id, steps = wire_steps(tap_log)
    if not sent:
        rep.fail("client-auto-probe", "no client traffic recorded")
        return
    first_ts, first = sent[0]
    rep.info("client-auto-wire", " | ".join(steps))
    if first.get("method") != "server/discover":
        rep.fail("client-auto-probe", f"first request was {first.get('method')!r}, expected server/discover")
        return
    rts, resp = by_id.get(json.dumps(first.get("id")), (None, None))
    if resp is None:
        rep.fail("client-auto-probe", "server/discover got no response (doc 5.1 item 3: answer fast or -32601)")
        return
    lat_ms = 1000 * (rts - first_ts)
    if "error" in resp:
        e = resp["error"]
        # legacy-only server: -32601 is the documented acceptable answer
        (rep.ok if e.get("code") == -32601 else rep.fail)(
            "client-auto-probe", f"server/discover -> error {short(e, 200)} in {lat_ms:.0f}ms")
        return
    res = resp.get("result", {})
    problems = []
    if res.get("resultType") != "complete":
        problems.append("resultType!='complete'")
    if "2026-07-28" not in (res.get("supportedVersions") or []):
        problems.append("supportedVersions lacks 2026-07-28")
    if not isinstance(res.get("capabilities"), dict) or "tools" not in res["capabilities"]:
        problems.append("capabilities.tools missing")
    if not isinstance(res.get("ttlMs"), int) or res.get("ttlMs", -1) < 0:
        problems.append("ttlMs not int>=0")
    if res.get("cacheScope") not in ("public", "private"):
        problems.append("cacheScope invalid")
    if not (res.get("_meta") or {}).get("io.modelcontextprotocol/serverInfo"):
        problems.append("_meta serverInfo missing (SHOULD)")
    fell_back = any(m.get("method") == "initialize" for _, m in sent)
    if fell_back:
        problems.append("SDK fell back to initialize although discover returned a result (result rejected by SDK validation?)")
    # every response to a modern request must carry resultType
    modern_ids = {json.dumps(m.get("id")) for _, m in sent
                  if "id" in m and isinstance(m.get("params"), dict)
                  and "io.modelcontextprotocol/protocolVersion" in (m["params"].get("_meta") or {})}
    for mid in sorted(modern_ids):
        _, r = by_id.get(mid, (None, None))
        if r is not None and "result" in r and r["result"].get("resultType") != "complete":
            problems.append(f"modern response id={mid} lacks resultType")
    detail = f"server/discover -> result in {lat_ms:.0f}ms {short(res, 240)}"
    (rep.fail if problems else rep.ok)("client-auto-probe", detail + (" PROBLEMS: " + "; ".join(problems) if problems else ""))


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == TAP_LINT_FLAG:
        return tap_lint(sys.argv[2:])
    if len(sys.argv) > 2 and sys.argv[1] == TAP_SUMMARY_FLAG:
        for path in sys.argv[2:]:
            print(" | ".join(wire_steps(path)[2]))
        return 0
    if len(sys.argv) > 2 and sys.argv[1] == TAP_FLAG:
        rest = sys.argv[3:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        return run_tap(sys.argv[2], rest)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memory-file", help="MEMORY_FILE_PATH for the server (default: a fresh temp file)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per client group")
    ap.add_argument("--keep-tap", help="directory to keep the wire logs in")
    ap.add_argument("--http", metavar="URL", help="check a running graphmem --http server at URL instead")
    ap.add_argument("--token", default=os.environ.get("MEMORY_HTTP_TOKEN", ""), help="with --http: bearer token")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- server command")
    args = ap.parse_args()
    if args.cmd[:1] == ["--"]:
        args.cmd = args.cmd[1:]
    if not args.cmd and not args.http:
        ap.error("server command required after -- (or --http URL)")

    try:
        import anyio
        import mcp
    except ImportError as e:
        print(f"FAIL sdk-import {e} (run with the venv python from interop_check.sh --install)")
        return 2

    tmp = tempfile.mkdtemp(prefix="sdkcheck-")
    logdir = args.keep_tap or tmp
    os.makedirs(logdir, exist_ok=True)
    if not args.memory_file:
        args.memory_file = os.path.join(tmp, "memory.jsonl")
    try:
        from importlib.metadata import version
        print(f"INFO sdk mcp=={version('mcp')}")
    except Exception:
        pass
    rep = Report()
    anyio.run(check_session, mcp, args, rep, os.path.join(logdir, "session.tap"))
    # fresh graph for the auto client so results don't depend on order
    args.memory_file = os.path.join(tmp, "memory-auto.jsonl")
    anyio.run(check_client_auto, mcp, args, rep, os.path.join(logdir, "client-auto.tap"))
    print(f"SUMMARY sdk {rep.passed} passed, {rep.failed} failed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
