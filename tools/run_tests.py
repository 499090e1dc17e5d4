#!/usr/bin/env python3
"""Run the test suite on a fresh machine with one command: python3 tools/run_tests.py [pytest args...]

Creates .venv in the checkout if it is missing (python3 -m venv), installs pytest into it once, then runs
pytest there with every argument passed through; exits with pytest's exit code. Standard library only, so it
works before anything is installed: Linux and macOS as above, Windows as `py tools\\run_tests.py`.
"""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
PYTEST = "pytest>=7"  # the same requirement as pyproject.toml's `test` extra (tests/test_packaging.py checks)
MIN_PYTHON = (3, 10)  # pyproject.toml's requires-python


def venv_python(folder: Path = VENV) -> Path:
    """The interpreter inside a venv, where each platform puts it."""
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def runs(command: list[str]) -> bool:
    """True when the command exists and exits 0; its output is not shown."""
    try:
        return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except OSError:  # no such program yet
        return False


def ensure_venv(folder: Path = VENV) -> Path:
    """A working venv at folder (made anew when it is missing or broken); returns its Python."""
    python = venv_python(folder)
    if not runs([str(python), "-c", "import sys"]):
        print(f"run_tests: creating {folder}", file=sys.stderr)
        try:
            venv.EnvBuilder(with_pip=True, clear=True).create(folder)
        except (OSError, subprocess.CalledProcessError) as err:
            sys.exit(f"run_tests: could not create {folder} ({err}). On Debian/Ubuntu: apt install python3-venv")
    return python


def ensure_pytest(python: Path) -> None:
    """Install pytest into the venv unless it is there already."""
    if runs([str(python), "-c", "import pytest"]):
        return
    print(f"run_tests: installing {PYTEST} into {python.parent.parent}", file=sys.stderr)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", PYTEST])
    if done.returncode != 0:
        sys.exit(f"run_tests: pip could not install {PYTEST} (exit {done.returncode}); is a package index reachable?")


def main(args: list[str]) -> int:
    if sys.version_info < MIN_PYTHON:
        sys.exit(f"run_tests: graphmem needs Python {'.'.join(map(str, MIN_PYTHON))}+, this is {sys.version.split()[0]}")
    python = ensure_venv()
    ensure_pytest(python)
    return subprocess.run([str(python), "-m", "pytest", *args], cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
