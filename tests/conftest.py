"""Shared helpers: drive the real server as a subprocess over stdio."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import queue
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "memory_server.py"
sys.path.insert(0, str(ROOT))


class StdioServer:
    """A real `python memory_server.py` child: write JSON-RPC lines, read replies with a timeout."""

    def __init__(self, memory_file: Path, extra_env: dict[str, str] | None = None, cwd: Path | None = None):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
               "MEMORY_FILE_PATH": str(memory_file)}
        env.update(extra_env or {})
        self.proc = subprocess.Popen([sys.executable, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd=str(cwd or memory_file.parent))
        self.lines: "queue.Queue[bytes]" = queue.Queue()
        self.stderr: list[bytes] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        self._next_id = 100

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in iter(stream.readline, b""):
            sink(line)

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def read_raw(self, timeout: float = 10.0) -> bytes:
        return self.lines.get(timeout=timeout)

    def read(self, timeout: float = 10.0) -> dict:
        return json.loads(self.read_raw(timeout))

    def no_reply(self, wait: float = 0.3) -> bool:
        try:
            self.lines.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def request(self, method: str, params: dict | None = None, **extra) -> dict:
        self._next_id += 1
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, **extra}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.read()

    def initialize(self, version: str = "2025-11-25") -> dict:
        reply = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                            "clientInfo": {"name": "pytest", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    def call(self, tool: str, arguments: dict | None = None) -> tuple[str, bool]:
        reply = self.request("tools/call", {"name": tool, "arguments": arguments or {}})
        result = reply["result"]
        return result["content"][0]["text"], result.get("isError", False)

    def close(self) -> int:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                return self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return -9
        return self.proc.returncode


# ── in-process helpers shared by the recall and lifecycle tests ──
def write_graph(path, entities, relations=()):
    """entities: (name, type, [facts]); relations: (from, to, type). Written as the reference server writes."""
    lines = [json.dumps({"type": "entity", "name": n, "entityType": t, "observations": list(obs)},
                        ensure_ascii=False, separators=(",", ":")) for n, t, obs in entities]
    lines += [json.dumps({"type": "relation", "from": f, "to": t, "relationType": r}, separators=(",", ":"))
              for f, t, r in relations]
    path.write_text("\n".join(lines), encoding="utf-8")


def make_memory(folder, entities=None, relations=(), **env):
    import memory_server as ms
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "memory.jsonl"
    if entities is not None:
        write_graph(path, entities, relations)
    settings = ms.Settings.from_env({"MEMORY_FILE_PATH": str(path), **{k: str(v) for k, v in env.items()}})
    return ms.Memory(settings, client="t")


def call(mem, tool, args):
    text, is_error = mem.call_tool(tool, args)
    assert not is_error, f"{tool}({args}) failed: {text}"
    return text


@pytest.fixture
def memory_file(tmp_path: Path) -> Path:
    return tmp_path / "mem" / "memory.jsonl"


@pytest.fixture
def server(memory_file: Path):
    memory_file.parent.mkdir(parents=True, exist_ok=True)
    s = StdioServer(memory_file)
    yield s
    s.close()


@pytest.fixture
def mem(memory_file: Path):
    import memory_server as ms
    return ms.Memory(ms.Settings.from_env({"MEMORY_FILE_PATH": str(memory_file)}), client="pytest")
