"""A real install into a fresh venv: the `graphmem` command works, --config names it, and ui.html /
AGENT-PROTOCOL.md / wordtable.tsv.gz ship in the wheel. The README's test command is the one CI runs; the
licence is there."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import ROOT



def test_pip_install_into_a_fresh_venv(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    build = subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT)], capture_output=True, timeout=600)
    if build.returncode != 0 and b"Could not find a version that satisfies" in build.stderr:
        pytest.skip("no package index reachable to fetch the build backend")
    assert build.returncode == 0, build.stderr.decode()[-2000:]
    graphmem = bindir / ("graphmem.exe" if os.name == "nt" else "graphmem")
    env = {"PATH": str(bindir) + os.pathsep + os.environ["PATH"], "HOME": str(tmp_path),
           "MEMORY_FILE_PATH": str(tmp_path / "m" / "memory.jsonl")}
    assert subprocess.run([str(graphmem), "--version"], capture_output=True, env=env).stdout.strip()
    protocol = subprocess.run([str(graphmem), "--protocol"], capture_output=True, env=env, cwd=tmp_path)
    assert protocol.stdout.decode() == (ROOT / "AGENT-PROTOCOL.md").read_text(encoding="utf-8")
    installed_ui = subprocess.run([str(python), "-c", "import memory_server as m; print(m.asset_path('ui.html'))"],
                                  capture_output=True, env=env, cwd=tmp_path, text=True).stdout.strip()
    assert installed_ui.startswith(str(env_dir)) and Path(installed_ui).read_bytes() == (ROOT / "ui.html").read_bytes()
    installed_table = subprocess.run([str(python), "-c", "import memory_server as m; print(m.word_table().path)"],
                                     capture_output=True, env=env, cwd=tmp_path, text=True).stdout.strip()
    assert installed_table.startswith(str(env_dir)) and Path(installed_table).read_bytes() == (ROOT / "wordtable.tsv.gz").read_bytes()
    reply = subprocess.run([str(graphmem)], input=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
                           capture_output=True, env=env, cwd=tmp_path, timeout=30)
    assert json.loads(reply.stdout)["result"] == {}
    # --config names the installed command (survives upgrades); a checkout names its own Python and file
    installed = subprocess.run([str(graphmem), "--config", "claude-code"], capture_output=True, env=env, cwd=tmp_path)
    assert json.loads(installed.stdout)["mcpServers"]["graphmem"]["command"] == str(graphmem)
    assert json.loads(installed.stdout)["mcpServers"]["graphmem"]["args"] == []
    checkout = subprocess.run([sys.executable, str(ROOT / "memory_server.py"), "--config", "claude-code"],
                              capture_output=True, env=env, cwd=tmp_path)
    entry = json.loads(checkout.stdout)["mcpServers"]["graphmem"]
    assert [entry["command"], *entry["args"]] == [sys.executable, str(ROOT / "memory_server.py")]
    assert b"temporary cache" not in installed.stderr + checkout.stderr


def test_readme_test_command_is_what_ci_runs_and_installs_the_test_extra():
    import importlib.util
    import tomllib
    spec = importlib.util.spec_from_file_location("run_tests", ROOT / "tools" / "run_tests.py")
    run_tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_tests)
    command = "python3 tools/run_tests.py"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert command in readme and ci[-1] == command
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["optional-dependencies"]["test"] == [run_tests.PYTEST]
    assert pyproject["project"]["requires-python"] == ">=" + ".".join(map(str, run_tests.MIN_PYTHON))


def test_mit_licence_matches_the_package_metadata():
    import tomllib
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Copyright (c) 2026 graphmem contributors" in text
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["license"] == {"text": "MIT"}
