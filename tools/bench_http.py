#!/usr/bin/env python3
"""graphmem over HTTP vs stdio: requests/s and p50/p99 latency with 1, 4 and 16 concurrent clients.

    python tools/bench_http.py [--facts 10000] [--searches 160] [--writes 64] [--clients 1,4,16]

Builds tools/bench.py's generated graph at --facts facts in a temporary folder, then measures, in this one run:
  http   one `memory_server.py --http 127.0.0.1:0` process; each client is a thread with its own keep-alive
         connection sending stateless (2026-07-28) requests.
  stdio  the way several clients share a memory today: one `memory_server.py` process per client on the same
         file, each driven over its stdin/stdout by its own thread.
Calls: search_nodes (a query of two words drawn from the graph) and one-fact writes (create_entities with one
new entity of one fact). Each client sends its share of the calls back to back; req/s is all calls over the
wall time of the batch (calls answered "Not saved" are counted apart, as refused). Figures only; stdlib only;
never touches a user's graph.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "memory_server.py"
sys.path.insert(0, str(ROOT / "tools"))
from bench import generate_graph, write_jsonl  # noqa: E402  (the generator every benchmark shares)

TOKEN = "bench-token-" + "x" * 20
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench-http", "version": "1"}}


def call_message(rid: int, tool: str, arguments: dict, modern: bool) -> dict:
    params = {"name": tool, "arguments": arguments, **({"_meta": META} if modern else {})}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


# ── the HTTP server and its clients ──
class HttpTarget:
    def __init__(self, graph: Path):
        env = {**os.environ, "MEMORY_FILE_PATH": str(graph), "MEMORY_HTTP_TOKEN": TOKEN}
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--http", "127.0.0.1:0"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = None
        for raw in iter(self.proc.stderr.readline, b""):
            line = raw.decode()
            if "MCP over Streamable HTTP at" in line:
                self.port = int(line.split("/mcp")[0].rsplit(":", 1)[1])
            if "graph loaded" in line or "load stopped" in line:
                break
        threading.Thread(target=lambda: self.proc.stderr.read(), daemon=True).start()
        assert self.port, "the HTTP server did not start"
        send, close = self.client()
        send(0, "search_nodes", {"query": "warm up"})  # as the stdio clients do before timing
        close()

    def client(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "Authorization": f"Bearer {TOKEN}", "MCP-Protocol-Version": "2026-07-28",
                   "Mcp-Method": "tools/call"}

        def send(rid: int, tool: str, arguments: dict) -> bool:
            conn.request("POST", "/mcp", body=json.dumps(call_message(rid, tool, arguments, True)),
                         headers={**headers, "Mcp-Name": tool})
            reply = json.loads(conn.getresponse().read())
            return not reply["result"]["isError"]
        return send, conn.close

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# ── one stdio server process per client ──
class StdioTarget:
    def __init__(self, graph: Path):
        self.graph = graph
        self.procs: list[subprocess.Popen] = []

    def client(self):
        env = {**os.environ, "MEMORY_FILE_PATH": str(self.graph)}
        proc = subprocess.Popen([sys.executable, str(SERVER)], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.procs.append(proc)

        def exchange(message: dict) -> dict:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
            return json.loads(proc.stdout.readline())

        exchange({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench-stdio", "version": "1"}}})
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        exchange(call_message(1, "search_nodes", {"query": "warm up"}, False))  # load the graph before timing

        def send(rid: int, tool: str, arguments: dict) -> bool:
            reply = exchange(call_message(rid, tool, arguments, False))
            return not reply["result"]["isError"]

        def close() -> None:
            proc.stdin.close()
            proc.wait(30)
        return send, close

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()


# ── one measured batch ──
def run_batch(target, clients: int, calls: list[tuple[str, dict]]) -> tuple[float, list[float], int]:
    """Split calls over `clients` concurrent clients; (wall seconds, latencies of the calls that succeeded,
    number refused: e.g. "Not saved: the graph is locked by another writer" after the lock wait)."""
    opened = [target.client() for _ in range(clients)]
    shares = [calls[i::clients] for i in range(clients)]
    latencies: list[float] = []
    refused = [0]
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def work(send, share) -> None:
        mine, failed = [], 0
        start.wait()
        for i, (tool, arguments) in enumerate(share):
            t0 = time.perf_counter()
            if send(1000 + i, tool, arguments):
                mine.append(time.perf_counter() - t0)
            else:
                failed += 1
        with lock:
            latencies.extend(mine)
            refused[0] += failed

    threads = [threading.Thread(target=work, args=(send, share)) for (send, _), share in zip(opened, shares)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    for _, close in opened:
        close()
    return wall, latencies, refused[0]


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--facts", type=int, default=10_000)
    ap.add_argument("--searches", type=int, default=160, help="search_nodes calls per batch")
    ap.add_argument("--writes", type=int, default=64, help="one-fact writes per batch")
    ap.add_argument("--clients", default="1,4,16")
    args = ap.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    entities, relations = generate_graph(args.facts, seed=7)
    words = sorted({w for e in entities for o in e["observations"] for w in o.lower().split()
                    if w.isalpha() and len(w) > 4})
    rng = random.Random(7)
    facts = sum(len(e["observations"]) for e in entities)
    print(f"graph: {len(entities)} entities, {facts} facts (tools/bench.py generator); machine: {os.cpu_count()} cores")
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphmem-bench-http-") as tmp:
        for kind in ("http", "stdio"):
            graph = Path(tmp) / kind / "memory.jsonl"
            graph.parent.mkdir()
            write_jsonl(str(graph), entities, relations)
            target = HttpTarget(graph) if kind == "http" else StdioTarget(graph)
            try:
                for clients in counts:
                    searches = [("search_nodes", {"query": " ".join(rng.sample(words, 2))})
                                for _ in range(args.searches)]
                    writes = [("create_entities", {"entities": [{
                        "name": f"bench-{kind}-{clients}-{i}", "entityType": "note",
                        "observations": [f"bench fact {i} {rng.choice(words)}"]}]}) for i in range(args.writes)]
                    for label, calls in (("search_nodes", searches), ("one-fact write", writes)):
                        wall, lat, refused = run_batch(target, clients, calls)
                        rows.append((label, clients, kind, len(lat) / wall, percentile(lat, 50),
                                     percentile(lat, 99), refused))
                        print(f"  {kind:<5} {label:<15} {clients:>2} clients: {len(lat) / wall:7.1f} req/s  "
                              f"p50 {percentile(lat, 50) * 1000:7.1f} ms  p99 {percentile(lat, 99) * 1000:7.1f} ms  "
                              f"refused {refused}/{len(calls)}", flush=True)
            finally:
                target.stop()
    print("\nreq/s counts calls that succeeded; refused = answered 'Not saved' (the graph lock stayed taken).")
    print("| call | clients | HTTP req/s | HTTP p50 / p99 ms | refused | stdio req/s | stdio p50 / p99 ms | refused "
          "| HTTP/stdio req/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label in ("search_nodes", "one-fact write"):
        for clients in counts:
            h = next(r for r in rows if r[:3] == (label, clients, "http"))
            s = next(r for r in rows if r[:3] == (label, clients, "stdio"))
            print(f"| {label} | {clients} | {h[3]:.1f} | {h[4] * 1000:.1f} / {h[5] * 1000:.1f} | {h[6]} | {s[3]:.1f} | "
                  f"{s[4] * 1000:.1f} / {s[5] * 1000:.1f} | {s[6]} | {h[3] / s[3]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
