#!/usr/bin/env python3
"""graphmem: a lean, self-curating MCP memory server for AI coding agents.

Drop-in for @modelcontextprotocol/server-memory: same memory.jsonl, same nine tools,
answers in a fraction of the tokens. Standard library only. One file, sections in the
order data flows (search for the banner "# N." to jump to one):

  1   Settings       MEMORY_* from the environment; which file (tiers) a process serves
  1b  Utilities      log, UTC stamps, atomic writes, surrogates, query words, ToolError
  2   Graph model    Entity, Relation, Graph; JSONL parse and serialise (byte-identical)
  3   GraphStore     the lock, fresh reads, Transaction and _commit, archive, backups
  4   MetaStore      memory.db: per-fact state, activity days, ledger, probes, history
  5   Text           tokens, stems, token estimate, hashing embedder, the word table
  6   Search/recall  SearchIndex, rank_facts (named stages), recall_pipeline
  7   Packer         the most relevant facts under a hard token budget, honest footer
  8   Lifecycle      limits, secrets, duplicates, supersede, decay; class Lifecycle
  8b  Code anchors   [@path::Symbol] fingerprints: current, stale, moved, gone
  9   Guardrail      probes, learned and manual, re-run before --compact changes anything
  9b  Receipts       tokens of each answer next to the reference server's
  10  Tools          the tool table and Memory, whose methods are the tools
  11  MCP loop       JSON-RPC 2.0 on stdio, both protocol eras
  12  UI server      --ui: http.server, one-time key, JSON API over the same Memory
  12b Demo graph     --ui --demo
  13  Team           --init, the git merge driver (--merge), healing conflict markers
  13b Sessions       --context briefing, client hooks, Markdown --export/--import
  14  CLI            --lint, --compact, --report, --config, --probes, main()

A call flows: MCP loop (11) -> Memory.call_tool (10) -> a handler -> GraphStore (3) for the
file, MetaStore (4) for state, SearchIndex (6) and the packer (7) for reads, the lifecycle
rules (8) for writes -> text back to the loop.
"""
from __future__ import annotations

import argparse
import array
import ast
import bisect
import collections
import contextlib
import gc
import dataclasses
import datetime as dt
import difflib
import functools
import hashlib
import heapq
import json
import math
import operator
import os
import posixpath
import random
import re
import secrets
import shutil
import socket
import shlex
import sqlite3
import stat as _stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
import weakref
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

__version__ = "0.1.0"
SERVER_NAME = "graphmem"


# ════════════════════════════════════════════════════════════════════════════
# 1. Settings
# ════════════════════════════════════════════════════════════════════════════

class ConfigError(Exception):
    """A bad setting: reported on stderr at start-up, never as a traceback."""


def default_memory_path(env: dict[str, str]) -> Path:
    """One memory per user, shared by every agent on the machine."""
    if os.name == "nt":
        base = env.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "graphmem" / "memory.jsonl"
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "graphmem" / "memory.jsonl"


TEAM_DIR = ".graphmem"  # a project's shared memory, committed with its code (see section 13)
PROJECTS_DIR = "projects"  # <data dir>/projects/<slug>/: a project's private memory and its project.json
PROJECT_PATHS_KEPT = 5     # work-tree paths a project.json remembers, newest first (a guess: clones per user)
PROJECT_SLUG_CHARS = 48    # readable part of a private project's folder name, before its hash


def work_tree_of(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds .git (a repository, or a linked work tree)."""
    start = start.resolve()
    for folder in [start, *start.parents]:
        if (folder / ".git").exists():
            return folder
    return None


@dataclasses.dataclass(frozen=True)
class Project:
    """A git work tree: where its team memory would be, and the identity its private memory is filed under.
    identity: the normalised origin URL ("github.com/org/repo"), else "commit <root commit>", else "path <root>"."""
    root: Path
    identity: str
    kind: str                # "origin" | "root-commit" | "path"
    origin: str | None       # the origin remote URL as configured, credentials removed
    private_path: Path       # <data dir>/projects/<slug>/memory.jsonl
    has_team: bool           # the work tree has a .graphmem/ folder: the team tier

    @property
    def team_path(self) -> Path:
        """Where the project's team memory lives (.graphmem/memory.jsonl), whether or not it exists yet."""
        return self.root / TEAM_DIR / "memory.jsonl"

    @property
    def tier(self) -> str:
        """The project tier: "team" (.graphmem/ committed with the code) or "private" (the per-user data dir)."""
        return "team" if self.has_team else "private"


def projects_dir(env: dict[str, str]) -> Path:
    """Where private project memories live: beside the global memory.jsonl, in projects/."""
    return default_memory_path(env).parent / PROJECTS_DIR


def resolve_project(start: Path, env: dict[str, str]) -> Project | None:
    """The project holding `start` (None outside any git work tree). The origin URL is parsed from the
    repository's config file (linked work trees too; git reads it when the file has includes); the root
    commit needs the git command (the object store is not parsed), so without git a project without an
    origin is found by the work-tree path its project.json recorded. Never writes anything."""
    root = work_tree_of(start)
    if root is None:
        return None
    origin = git_origin(root)
    commit = None if origin else root_commit(root)
    if origin:
        identity, kind = normalise_remote(origin, root), "origin"
    elif commit:
        identity, kind = f"commit {commit}", "root-commit"
    else:
        identity, kind = f"path {root}", "path"
    folders = projects_dir(env)
    folder = folders / project_slug(identity, kind)
    if not (folder / "project.json").is_file():
        folder = known_project_folder(folders, identity, kind, root) or folder
    return Project(root, identity, kind, without_credentials(origin) if origin else None, folder / "memory.jsonl",
                   (root / TEAM_DIR).is_dir())


def normalise_remote(url: str, root: Path) -> str:
    """One spelling per repository: https://Host/org/repo.git, git@host:org/repo and ssh://git@host:22/org/repo/
    are all "host/org/repo" (host lower-cased; user, port, scheme, trailing .git and slashes dropped). A local
    path (or file:// URL) is "file <absolute path>"."""
    url = url.strip()
    found = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/]*@)?([^/:@]+)(?::\d*)?(/.*)?$", url)
    if found is None and not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", url):
        found = re.match(r"^(?:[^@/:]+@)?([^/:@]{2,}):(?!//)(.*)$", url)  # scp-like; a Windows drive C: is one letter
    if found is None:
        local = url[len("file://"):] if url.lower().startswith("file://") else url
        path = Path(local) if Path(local).is_absolute() else root / local
        return "file " + re.sub(r"(\.git)?/*$", "", os.path.normpath(str(path)).replace("\\", "/"))
    host, path = found.group(1).lower(), (found.group(2) or "").strip("/")
    return f"{host}/{re.sub(r'(/|[.]git)+$', '', path)}".rstrip("/")


def without_credentials(url: str) -> str:
    """A remote URL without the user part of an http(s) URL, nor a user:password@ of any other (a token in a
    URL must not be copied into project.json)."""
    url = re.sub(r"^(https?://)[^@/]*@", r"\1", url.strip(), flags=re.I)
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^@/]*:[^@/]*@", r"\1", url)


def project_slug(identity: str, kind: str) -> str:
    """The folder name of a private project memory: readable, then a short hash of the identity."""
    readable = identity.split(" ", 1)[1] if kind != "origin" else identity
    readable = f"commit-{readable[:12]}" if kind == "root-commit" else (
        f"path-{Path(readable).name}" if kind == "path" else readable)
    readable = re.sub(r"[^A-Za-z0-9._]+", "-", readable).strip("-.")[:PROJECT_SLUG_CHARS] or "project"
    return f"{readable}-{hashlib.sha256(identity.encode('utf-8')).hexdigest()[:8]}"


def git_dir_of(root: Path) -> Path | None:
    """The git folder of a work tree: .git itself, or where a linked work tree's (or submodule's) .git file points."""
    dot = root / ".git"
    if dot.is_dir():
        return dot
    try:
        found = re.match(r"gitdir:\s*(.+)", dot.read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError):
        return None
    if found is None:
        return None
    folder = Path(found.group(1).strip())
    return folder if folder.is_absolute() else (root / folder).resolve()


def common_git_dir(folder: Path) -> Path:
    """Where a linked work tree's shared files (config, refs) live: the main repository's git folder."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        common = folder / "commondir"
        if common.is_file():
            return (folder / common.read_text(encoding="utf-8").strip()).resolve()
    return folder


def git_origin(root: Path) -> str | None:
    """remote.origin.url: parsed from the repository's config file (a git process costs ~7 ms, too much for a
    server that works out tiers per request); git itself reads it when the file has includes or cannot be read."""
    folder = git_dir_of(root)
    try:
        text = (common_git_dir(folder) / "config").read_text(encoding="utf-8") if folder else None
    except (OSError, UnicodeDecodeError):
        text = None
    if text is None or re.search(r"^\s*\[include", text, re.M | re.I):
        return git(root, "config", "--get", "remote.origin.url") or (text and config_origin(text))
    return config_origin(text)


def config_origin(text: str) -> str | None:
    """The url of [remote "origin"] in a git config file's text."""
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = re.sub(r"\s+", " ", line.split("]")[0][1:].strip())
        elif section == 'remote "origin"' and re.match(r"url\s*=", line, re.I):
            return line.split("=", 1)[1].strip().strip('"') or None
    return None


def head_commit(root: Path) -> str | None:
    """The commit HEAD points at, read from the git folder's files (HEAD, the ref, packed-refs); None if unknown."""
    folder = git_dir_of(root)
    if folder is None:
        return None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        head = (folder / "HEAD").read_text(encoding="utf-8").strip()
        if re.fullmatch(r"[0-9a-f]{40,64}", head):
            return head
        ref = head[4:].strip() if head.startswith("ref:") else ""
        common = common_git_dir(folder)
        for base in (folder, common):
            if ref and (base / ref).is_file():
                return (base / ref).read_text(encoding="utf-8").strip() or None
        packed = common / "packed-refs"
        if ref and packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                if line.endswith(f" {ref}"):
                    return line.split()[0]
    return None


def root_commit(root: Path) -> str | None:
    """The oldest root commit of HEAD (git rev-list --max-parents=0), or None (no commits, or no git). A
    commit's history never changes, so the answer is kept per HEAD commit (one git process per new HEAD)."""
    head = head_commit(root)
    return _root_commit_of(str(root), head) if head else _root_commit_of.__wrapped__(str(root), None)


@functools.lru_cache(maxsize=256)
def _root_commit_of(root: str, head: str | None) -> str | None:
    out = git(Path(root), "rev-list", "--max-parents=0", "--reverse", head or "HEAD")
    return out.split()[0] if out else None


def read_project_json(folder: Path) -> dict[str, Any]:
    """A private project's project.json, or {} when missing or unreadable."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((folder / "project.json").read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return data
    return {}


def known_project_folder(folders: Path, identity: str, kind: str, root: Path) -> Path | None:
    """A private project folder recorded under this identity (in its project.json), or one this project grew out
    of: filed by root commit before an origin was added, or by path before the first commit (or without git)."""
    if not folders.is_dir():
        return None
    known = [(folder, read_project_json(folder)) for folder in sorted(folders.iterdir()) if folder.is_dir()]
    for folder, data in known:
        if identity in data.get("identities", [data.get("identity")]):
            return folder
    commit = root_commit(root) if kind == "origin" else None
    for folder, data in known:
        if data.get("kind") == "root-commit" and commit and data.get("identity") == f"commit {commit}":
            return folder
        if (data.get("kind") == "path" or kind == "path") and str(root) in data.get("paths", []):
            return folder
    return None


def record_project(project: Project) -> None:
    """Write the private project's project.json (identity, origin, last seen work-tree paths) for --projects;
    best-effort (a failure is logged, never an error of the call that triggered it)."""
    folder = project.private_path.parent
    data = read_project_json(folder)
    paths = [str(project.root)] + [p for p in data.get("paths", []) if p != str(project.root)]
    identities = list(dict.fromkeys([*data.get("identities", []), data.get("identity") or project.identity,
                                     project.identity]))
    updated = {"identity": data.get("identity") or project.identity, "kind": data.get("kind") or project.kind,
               "identities": identities, "origin": project.origin or data.get("origin"),
               "paths": paths[:PROJECT_PATHS_KEPT], "lastSeen": utc_stamp(fmt="%Y-%m-%dT%H:%M:%SZ")}
    if {k: v for k, v in data.items() if k != "lastSeen"} == {k: v for k, v in updated.items() if k != "lastSeen"}:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "project.json", (json.dumps({**data, **updated}, indent=2) + "\n").encode("utf-8"))
    except OSError as err:
        log(f"could not record {folder / 'project.json'} ({err.strerror or err}); the memory itself is unaffected")


def git(root: Path, *args: str) -> str | None:
    """stdout of a git command in `root`, or None when git is missing or the command fails."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _number_setting(env: dict[str, str], name: str, default: Any, low: Any, high: Any) -> Any:
    """A number from the environment, of the default's type, within [low, high]; a clear error otherwise."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    kind, what = (int, "a whole number") if isinstance(default, int) else (float, "a number")
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not {what} (default {default})") from None
    if not low <= value <= high:  # NaN fails this too
        raise ConfigError(f"{name}={value} is out of range {low}..{high} (default {default})")
    return value


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a process is configured with (MEMORY_* variables, with defaults), frozen and passed explicitly."""
    file_path: Path
    obs_max_chars: int = 300
    obs_max: int = 15
    search_limit: int = 10
    backups_kept: int = 7
    recall_budget: int = 1500
    guardrail_max_drop: float = 0.02
    price_per_mtok: float = 3.0
    price_model: str = "claude-sonnet-4-6"
    project_root: Path | None = None
    global_path: Path | None = None  # the global graph read alongside a project's graph (None: no other tier)
    tier: str = "file"               # what file_path is: "team", "private", "global", or "file" (MEMORY_FILE_PATH)
    project: Project | None = None   # the git work tree the project tier belongs to
    lock_timeout: float = 10.0
    test_only_now: float | None = None  # MEMORY_TEST_ONLY_NOW: a frozen clock for tests of decay (never in use)
    embeddings_url: str = ""     # MEMORY_EMBEDDINGS_URL: an OpenAI-compatible API base (…/v1), optional
    embeddings_model: str = ""   # MEMORY_EMBEDDINGS_MODEL
    embeddings_key: str = dataclasses.field(default="", repr=False)  # never logged, never in an answer
    embeddings_key_from: str = ""  # the environment variable the key came from (for --lint), not the key

    def now(self) -> float:
        """The time the activity clock reads: the real time, unless a test froze it (MEMORY_TEST_ONLY_NOW)."""
        return time.time() if self.test_only_now is None else self.test_only_now

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        """The settings from an environment (os.environ by default): which file and tier this process serves, and every
        limit; a clear ConfigError for a bad value."""
        env = dict(os.environ if env is None else env)
        raw_path = env.get("MEMORY_FILE_PATH", "").strip()
        root = env.get("MEMORY_PROJECT_ROOT", "").strip()
        project = None if raw_path else resolve_project(Path(root).expanduser() if root else Path.cwd(), env)
        if raw_path:  # drop-in mode: exactly this one file, no other tier
            path, tier = Path(raw_path).expanduser(), "file"
        elif project is not None:
            path, tier = (project.team_path if project.has_team else project.private_path), project.tier
        else:
            path, tier = default_memory_path(env), "global"
        if not path.is_absolute():
            path = Path.cwd() / path
        if path.exists() and path.is_dir():
            raise ConfigError(f"MEMORY_FILE_PATH={path} is a folder; give a file path such as {path / 'memory.jsonl'}")
        return cls(
            file_path=path,
            global_path=default_memory_path(env) if project is not None else None,
            tier=tier,
            project=project,
            obs_max_chars=_number_setting(env, "MEMORY_OBS_MAX_CHARS", 300, 20, 100_000),
            obs_max=_number_setting(env, "MEMORY_OBS_MAX", 15, 1, 100_000),
            search_limit=_number_setting(env, "MEMORY_SEARCH_LIMIT", 10, 1, 1000),
            backups_kept=_number_setting(env, "MEMORY_BACKUPS_KEPT", 7, 0, 3650),
            recall_budget=_number_setting(env, "MEMORY_RECALL_BUDGET", 1500, 50, 100_000),
            guardrail_max_drop=_number_setting(env, "MEMORY_GUARDRAIL_MAX_DROP", 0.02, 0.0, 1.0),
            price_per_mtok=_number_setting(env, "MEMORY_PRICE_PER_MTOK", 3.0, 0.0, 10_000.0),
            price_model=env.get("MEMORY_PRICE_MODEL", "").strip() or "claude-sonnet-4-6",
            project_root=Path(root).expanduser().resolve() if root else None,
            test_only_now=_test_clock(env),
            **_embedding_settings(env),
        )


def _embedding_settings(env: dict[str, str]) -> dict[str, str]:
    """MEMORY_EMBEDDINGS_URL (an OpenAI-compatible API base such as http://localhost:11434/v1, or its
    /embeddings URL) with MEMORY_EMBEDDINGS_MODEL; the key, when the endpoint needs one, from the variable
    MEMORY_EMBEDDINGS_KEY_ENV names (e.g. OPENAI_API_KEY), else from MEMORY_EMBEDDINGS_KEY."""
    url = env.get("MEMORY_EMBEDDINGS_URL", "").strip().rstrip("/")
    if not url:
        return {}
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"MEMORY_EMBEDDINGS_URL={_url_label(url)!r} is not an http(s) URL; give the API base, "
                          "e.g. http://localhost:11434/v1 (Ollama)")
    model = env.get("MEMORY_EMBEDDINGS_MODEL", "").strip()
    if not model:
        raise ConfigError("MEMORY_EMBEDDINGS_URL is set but MEMORY_EMBEDDINGS_MODEL is not: name the embedding "
                          "model, e.g. MEMORY_EMBEDDINGS_MODEL=nomic-embed-text (Ollama)")
    key_env = env.get("MEMORY_EMBEDDINGS_KEY_ENV", "").strip()
    if key_env and not env.get(key_env, "").strip():
        raise ConfigError(f"MEMORY_EMBEDDINGS_KEY_ENV names {key_env}, which is not set or empty")
    key_from = key_env or ("MEMORY_EMBEDDINGS_KEY" if env.get("MEMORY_EMBEDDINGS_KEY", "").strip() else "")
    return {"embeddings_url": url, "embeddings_model": model, "embeddings_key_from": key_from,
            "embeddings_key": env.get(key_from, "").strip() if key_from else ""}


def _url_label(url: str) -> str:
    """A URL as it may be shown or logged: without user:password@ or a query string (either may hold a key)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return urllib.parse.urlunsplit((parts.scheme, host + (f":{parts.port}" if parts.port else ""), parts.path, "", ""))


def _test_clock(env: dict[str, str]) -> float | None:
    """MEMORY_TEST_ONLY_NOW=2027-03-01 (or 2027-03-01T12:00:00, UTC): the time the activity clock, fact ages
    and pins read, frozen, so a test can move a graph forward by days without waiting. Said on stderr every
    time a process starts with it: a memory served with a fake clock must never go unnoticed."""
    raw = env.get("MEMORY_TEST_ONLY_NOW", "").strip()
    if not raw:
        return None
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise ConfigError(f"MEMORY_TEST_ONLY_NOW={raw!r} is not an ISO date such as 2027-03-01 (for tests only; "
                          "unset it to use the real clock)") from None
    when = when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    sys.stderr.write(f"graphmem: warning: MEMORY_TEST_ONLY_NOW is set: the clock reads {when.isoformat()} "
                     "(for tests only; unset it in real use)\n")
    return when.timestamp()


# ════════════════════════════════════════════════════════════════════════════
# 1b. Utilities used everywhere: logging, UTC stamps, atomic writes, surrogates, query words, ToolError
# ════════════════════════════════════════════════════════════════════════════

def log(message: str) -> None:
    """Logs go to stderr: stdout carries only the protocol."""
    print(f"graphmem: {message}", file=sys.stderr, flush=True)


def utc_stamp(ts: float | None = None, fmt: str = "%Y-%m-%d %H:%M UTC") -> str:
    """A moment (now by default) in UTC, for people and file names alike."""
    return dt.datetime.fromtimestamp(time.time() if ts is None else ts, dt.timezone.utc).strftime(fmt)


def write_atomic(path: Path, data: bytes, mode: int | None = None,
                 before_replace: Callable[[], None] = lambda: None) -> None:
    """Replace `path` with `data` all at once: a temp file beside it, fsync, before_replace() (a last check;
    it may raise), rename, then fsync the folder so the rename itself is durable. A failure leaves the old
    file and no temp file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if mode is not None:
            with contextlib.suppress(OSError):
                os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        before_replace()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_folder(path.parent)


def fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (POSIX; Windows has no directory handles for this)."""
    if os.name == "nt":
        return
    with contextlib.suppress(OSError):
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _file_size(path: Path) -> int:
    """A file's size in bytes, 0 when it does not exist."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _file_bytes(path: Path) -> bytes | None:
    """A file's bytes, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """Lone surrogates (legal in the JSONL, invalid UTF-8) written as \\uXXXX, as JSON.stringify writes them."""
    return text if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.sub(
        lambda m: "\\u%04x" % ord(m.group()), text)


class ToolError(Exception):
    """A failure the agent can act on: becomes an isError tool result. reason: a stable code for the UI;
    result: what the call found before it refused (nothing of it was saved), when there is one."""

    def __init__(self, message: str, reason: str = "error", result: "WriteResult | None" = None):
        super().__init__(message)
        self.reason = reason
        self.result = result


def query_words(query: str | None) -> list[str]:
    """A query's lower-cased words, split on whitespace: the units the reference server matches as substrings."""
    return (query or "").lower().split()


# ════════════════════════════════════════════════════════════════════════════
# 2. Graph model: entities, relations, JSONL parse and serialise
# ════════════════════════════════════════════════════════════════════════════

ENTITY_KEYS = ("type", "name", "entityType", "observations")
RELATION_KEYS = ("type", "from", "to", "relationType")


@dataclasses.dataclass
class Entity:
    """One entity: a name, a type and its facts (observations); other keys of its JSONL line are kept in `extra`."""
    name: str
    entityType: str
    observations: list[str]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    json_line: str | None = dataclasses.field(default=None, compare=False, repr=False)  # serialised, until touched

    def copy(self) -> "Entity":
        """A copy whose lists can change without touching this one."""
        return Entity(self.name, self.entityType, list(self.observations), dict(self.extra))

    def to_json(self) -> dict[str, Any]:
        """The entity's JSONL object, as the reference server writes it."""
        return {"type": "entity", "name": self.name, "entityType": self.entityType,
                "observations": self.observations, **self.extra}


@dataclasses.dataclass
class Relation:
    """A directed, typed edge between two entity names (`frm` is the JSON key "from")."""
    frm: str
    to: str
    relationType: str
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    json_line: str | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """(from, to, relationType): what makes two relations the same."""
        return (self.frm, self.to, self.relationType)

    def to_json(self) -> dict[str, Any]:
        """The relation's JSONL object, as the reference server writes it."""
        return {"type": "relation", "from": self.frm, "to": self.to,
                "relationType": self.relationType, **self.extra}

    def line(self) -> str:
        """"from -type-> to": how answers list a relation."""
        return f"{self.frm} -{self.relationType}-> {self.to}"


@dataclasses.dataclass
class Graph:
    """A whole memory file: entities and relations in file order, other valid JSON lines kept as they are, unreadable
    lines set aside."""
    entities: list[Entity] = dataclasses.field(default_factory=list)
    relations: list[Relation] = dataclasses.field(default_factory=list)
    other_lines: list[str] = dataclasses.field(default_factory=list)  # valid JSON of unknown type: kept as is
    unreadable: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)  # (line number, raw line)
    _by_name: dict[str, Entity] | None = dataclasses.field(default=None, repr=False)

    def by_name(self) -> dict[str, Entity]:
        """Name -> entity (the first of duplicates), built once until invalidate()."""
        if self._by_name is None:
            index: dict[str, Entity] = {}
            for entity in self.entities:
                index.setdefault(entity.name, entity)  # duplicate names: the first copy is the one edited
            self._by_name = index
        return self._by_name

    def get(self, name: str) -> Entity | None:
        """The entity named `name`, or None."""
        return self.by_name().get(name)

    def invalidate(self) -> None:
        """Forget the name map after entities were added, removed or renamed."""
        self._by_name = None

    def relations_of(self, names: set[str]) -> list[Relation]:
        """Relations with either end among `names`, in file order."""
        return [r for r in self.relations if r.frm in names or r.to in names]

    def fact_count(self) -> int:
        """Facts (observations) over all entities."""
        return sum(len(e.observations) for e in self.entities)


def dump_json_line(obj: Any) -> str:
    """Compact JSON, raw UTF-8, lone surrogates escaped: byte-identical to the reference server."""
    return escape_surrogates(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


def parse_graph_bytes(data: bytes) -> Graph:
    """A graph from JSONL bytes, line by line as the reference server reads it (a BOM and CRLF tolerated, blank lines
    skipped); never raises: a line that is not a valid entity or relation is kept in `unreadable` with its line
    number."""
    graph = Graph()
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark some editors add; JSON has none
        data = data[3:]
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            graph.unreadable.append((number, raw))
            continue
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "entity" and _valid_entity(obj):
            extra = {k: v for k, v in obj.items() if k not in ENTITY_KEYS}
            entity_type = obj.get("entityType")
            graph.entities.append(Entity(obj["name"], entity_type if isinstance(entity_type, str) else "unknown",
                                         list(obj.get("observations") or []), extra))
        elif kind == "relation" and all(isinstance(obj.get(k), str) for k in ("from", "to", "relationType")):
            extra = {k: v for k, v in obj.items() if k not in RELATION_KEYS}
            graph.relations.append(Relation(obj["from"], obj["to"], obj["relationType"], extra))
        elif isinstance(obj, dict) and kind not in ("entity", "relation"):
            graph.other_lines.append(line.decode("utf-8"))
        else:
            graph.unreadable.append((number, raw))
    return graph


def _valid_entity(obj: dict[str, Any]) -> bool:
    observations = obj.get("observations", [])
    return (isinstance(obj.get("name"), str)
            and (observations is None or (isinstance(observations, list)
                                          and all(isinstance(o, str) for o in observations))))


def serialise_graph(graph: Graph) -> str:
    """Entities, then relations, then lines of unknown type; no trailing newline (as the reference)."""
    for item in [*graph.entities, *graph.relations]:
        if item.json_line is None:
            item.json_line = dump_json_line(item.to_json())
    return "\n".join([e.json_line for e in graph.entities] + [r.json_line for r in graph.relations] + graph.other_lines)


CONFLICT_MARKER = re.compile(rb"^(?:<{7}|\|{7}|={7}|>{7})(?: |\r?$)")  # git's conflict markers


def heal_conflict_markers(graph: Graph) -> int:
    """A file git merged without graphmem's driver: its marker lines are dropped (they were read as unreadable
    lines) and both sides' copies of an entity fold into one, every fact kept. Returns the markers dropped."""
    markers = [u for u in graph.unreadable if CONFLICT_MARKER.match(u[1])]
    if markers:
        graph.unreadable = [u for u in graph.unreadable if not CONFLICT_MARKER.match(u[1])]
        fold_duplicates(graph)
    return len(markers)


def fold_duplicates(graph: Graph) -> None:
    """Entities of the same name (both sides of a healed conflict) become one, every fact kept in order;
    repeated relations and lines become one."""
    first: dict[str, Entity] = {}
    for entity in graph.entities:
        keep = first.setdefault(entity.name, entity)
        if keep is not entity:
            keep.observations += [o for o in entity.observations if o not in keep.observations]
            keep.extra = {**entity.extra, **keep.extra}
            keep.json_line = None
    graph.entities = list(first.values())
    kept: dict[tuple[str, str, str], Relation] = {}
    for r in graph.relations:
        kept.setdefault(r.key, r)
    graph.relations = list(kept.values())
    graph.other_lines = list(dict.fromkeys(graph.other_lines))
    graph.invalidate()


DATE_PREFIX = re.compile(r"^\s*(\d{4}-\d{2}-\d{2})\b")


def fact_date(text: str) -> str | None:
    """A fact starting with an ISO date is dated (history); others are identity facts."""
    m = DATE_PREFIX.match(text)
    return m.group(1) if m else None


# ════════════════════════════════════════════════════════════════════════════
# 3. GraphStore: lock, cache, transactions, archive, backups, unreadable lines
# ════════════════════════════════════════════════════════════════════════════

class StoreError(Exception):
    """A store problem the agent can act on (lock timeout, unwritable folder)."""


# The writer lock. A lock whose owner runs on this machine is broken only when that process is gone
# (never for its age: a compact may run long, a laptop sleeps, a debugger pauses). The owner touches its
# lock every LOCK_HEARTBEAT_SECONDS while it holds it, so a waiter on another machine (a shared or synced
# folder) sees it is alive; another machine's lock that has not changed for FOREIGN_LOCK_SILENT_SECONDS,
# as measured by the waiter's own clock (the two clocks may disagree), is broken with a message.
LOCK_HEARTBEAT_SECONDS = 2.0        # a guess: cheap (one utime) and far below the silent bound
FOREIGN_LOCK_SILENT_SECONDS = 60.0  # 30 missed heartbeats: a sleeping or dead machine, not a slow one
EMPTY_LOCK_SECONDS = 2.0            # a lock with no owner record: its writer died between create and write
WRITE_ATTEMPTS = 3                  # re-reads and re-applies when the lock or the file changed under a write
WINDOWS_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
_SAFE_FILE_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


def encode_entity_filename(name: str) -> str:
    """Reversible, case-safe, traversal-safe file stem for any entity name.

    Lower-case letters, digits and '-' stay; every other UTF-8 byte becomes _XX. Upper case
    is escaped too, so "Alice" and "alice" never share a file on case-insensitive disks."""
    out = []
    for ch in name:
        if ch in _SAFE_FILE_CHARS:
            out.append(ch)
        else:
            out.extend(f"_{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
    stem = "".join(out) or "_"
    if stem.split("_", 1)[0] in WINDOWS_RESERVED or stem[:4] in WINDOWS_RESERVED:
        stem = f"_{ord(stem[0]):02x}{stem[1:]}"
    if len(stem) > 180:  # file systems cap names at 255 bytes; the heading inside keeps the full name
        stem = stem[:160] + "~" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return stem


def decode_entity_filename(stem: str) -> str | None:
    """The entity name an archive file stem encodes (encode_entity_filename's inverse); None for a stem it never
    produced."""
    if "~" in stem or not re.fullmatch(r"(?:[a-z0-9-]|_[0-9a-f]{2})*", stem):
        return None if stem != "_" else ""
    data = bytearray()
    i = 0
    while i < len(stem):
        if stem[i] == "_":
            data.append(int(stem[i + 1:i + 3], 16))
            i += 3
        else:
            data.extend(stem[i].encode())
            i += 1
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


@dataclasses.dataclass
class ArchivedFact:
    """One fact in an entity's archive file: its text, why it left the active graph, and when."""
    text: str
    why: str
    when: str


class Transaction:
    """One change to the graph: records entity snapshots (for history and undo) and archive moves."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.before: dict[str, Entity | None] = {}
        self.relations_before: list[tuple[str, str, str]] | None = None
        self.archive_adds: list[tuple[str, list[str], str]] = []
        self.archive_removes: list[tuple[str, list[str]]] = []
        self.archive_renames: list[tuple[str, str]] = []
        self.fact_moves: list[tuple[tuple[str, str], tuple[str, str]]] = []  # metadata to move once saved
        self.notes: list[str] = []  # what a saved change could not do on the side (said in the answer)
        self.read_key: tuple[int, int, int] | None = None  # the file version the change was made on
        self.changed = False
        self.added = self.refused = 0  # facts, for "did anything go in?"

    def touch(self, name: str) -> None:
        """Call before changing entity `name` (or creating it): snapshots it for history and undo."""
        if name not in self.before:
            current = self.graph.get(name)
            self.before[name] = current.copy() if current else None
            if current is not None:
                current.json_line = None
        self.changed = True
        self.graph.invalidate()

    def touch_relations(self) -> None:
        """The relations are about to change: keep their keys as they were, for the history."""
        if self.relations_before is None:
            self.relations_before = [r.key for r in self.graph.relations]
        self.changed = True


    def archive(self, name: str, facts: list[str], why: str) -> None:
        """Queue `facts` of entity `name` for its archive file (written before the graph: see _commit)."""
        if facts:
            self.archive_adds.append((name, list(facts), why))

    def unarchive(self, name: str, facts: list[str]) -> None:
        """Queue `facts` to leave the archive (restored into the graph)."""
        if facts:
            self.archive_removes.append((name, list(facts)))

    def rename_archive(self, old: str, new: str) -> None:
        """The archive file follows an entity renamed from `old` to `new`."""
        self.archive_renames.append((old, new))

    def move_facts(self, moves: list[tuple[tuple[str, str], tuple[str, str]]]) -> None:
        """Keep facts' metadata (pins, use) across a rename or an edit, once the change is saved."""
        self.fact_moves += moves

    def changes(self) -> dict[str, Any]:
        """Before/after of every touched entity and the relation diff: the history record."""
        entities = []
        for name, before in self.before.items():
            after = self.graph.get(name)
            b = before.to_json() if before else None
            a = after.to_json() if after else None
            if a != b:
                entities.append({"name": name, "before": b, "after": a})
        added: list[list[str]] = []
        removed: list[list[str]] = []
        if self.relations_before is not None:
            old = set(self.relations_before)
            new = {r.key for r in self.graph.relations}
            added = [list(k) for k in sorted(new - old)]
            removed = [list(k) for k in sorted(old - new)]
        return {"entities": entities, "relationsAdded": added, "relationsRemoved": removed,
                "archived": [[n, f, w] for n, f, w in self.archive_adds],
                "unarchived": [[n, f] for n, f in self.archive_removes],
                "renamed": [list(p) for p in self.archive_renames]}


class WriteConflict(Exception):
    """The lock stopped being ours, or the file changed, between our read and our replace: re-read and re-apply."""


def side_file_names(path: Path) -> tuple[Path, Path]:
    """(metadata database, archive folder) of the graph file `path`: each graph has its own.

    memory.jsonl keeps memory.db and archive/ (the layout users know); another .jsonl file keeps
    <stem>.db and archive-<stem>/; any other file name (memory.json, notes) gets names from its whole
    name (memory.json.db, archive-memory.json/), so memory.jsonl and memory.json in one folder never share."""
    folder, stem = path.parent, path.stem
    if path.suffix == ".jsonl":
        return folder / f"{stem}.db", folder / ("archive" if stem == "memory" else f"archive-{stem}")
    return folder / f"{path.name}{'.meta' if path.suffix == '.db' else ''}.db", folder / f"archive-{path.name}"


class GraphStore:
    """The graph file and its side files: lock, cache, transactions, archive, backups, unreadable lines."""

    def __init__(self, settings: Settings):
        self.settings = settings
        # A symlinked memory.jsonl (dotfiles, a synced folder) stays a symlink: everything works on the real
        # file, and lock, temp files, archive and backups sit beside it, so two links share one lock.
        self.path = Path(os.path.realpath(settings.file_path))
        self.folder = self.path.parent
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.unreadable_path = self.path.with_name(self.path.name + ".unreadable")
        self.meta_path, self.archive_dir = side_file_names(self.path)
        self.backup_dir = self.folder / "backups"
        self._cache_key: tuple[int, int, int] | None = None
        self._cache: Graph | None = None
        self.generation = 0  # bumps whenever the cached graph is replaced
        self._lock_seen: tuple[Any, float] | None = None  # (the lock's state, when we first saw it): silence

    # ── reading (never locks, never writes) ──
    def stat_key(self) -> tuple[int, int, int] | None:
        """(mtime_ns, size, inode) of the graph file, None when it does not exist: what says it changed."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def read(self) -> Graph:
        """The current graph, cached until another process (or we) replace the file."""
        for _ in range(5):
            key = self.stat_key()
            if key is not None and key == self._cache_key and self._cache is not None:
                return self._cache
            data = self._read_bytes()
            if key == self.stat_key():
                break
        graph = parse_graph_bytes(data)
        self._cache, self._cache_key = graph, key
        self.generation += 1
        return graph

    def cached_key(self) -> tuple[int, int, int] | None:
        """The file version of the graph read() last returned."""
        return self._cache_key

    def _read_bytes(self) -> bytes:
        return _file_bytes(self.path) or b""

    def read_fresh(self) -> tuple[Graph, tuple[int, int, int] | None]:
        """The file's graph parsed anew (never the cache) and the file version it came from."""
        for _ in range(5):
            key = self.stat_key()
            data = self._read_bytes()
            if key == self.stat_key():
                break
        return parse_graph_bytes(data), key

    def _fresh_under_lock(self) -> tuple[Graph, tuple[int, int, int] | None]:
        """The current file's graph, to change: a copy of the cache when nobody wrote since, else parsed anew."""
        key = self.stat_key()
        if self._cache is not None and self._cache_key is not None and key == self._cache_key:
            g = self._cache  # entities are shared with the cache; a failed change drops the cache (transaction)
            return Graph(list(g.entities), list(g.relations), list(g.other_lines), list(g.unreadable)), key
        return self.read_fresh()

    # ── the writer lock ──
    @contextlib.contextmanager
    def lock(self) -> Iterator[str]:
        """Hold the writer lock (yields its token). Waits up to settings.lock_timeout for another writer."""
        self.folder.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.settings.lock_timeout
        token = f"{os.getpid()}-{secrets.token_hex(6)}"
        record = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(), "token": token,
                  "started": process_start_id(os.getpid())}
        while not self._create_lock(record):
            if self._break_stale_lock():
                continue
            if time.monotonic() > deadline:
                raise StoreError(f"the graph is locked by another writer ({self._describe_lock()}); "
                                 "try again in a moment") from None
            time.sleep(random.uniform(0.003, 0.02))
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(token, stop), daemon=True, name="graphmem-lock")
        beat.start()
        try:
            yield token
        finally:
            stop.set()
            with contextlib.suppress(FileNotFoundError):
                if self._lock_token() == token:
                    os.unlink(self.lock_path)

    def _create_lock(self, record: dict[str, Any]) -> bool:
        """Create the lock file exclusively; False when another writer holds it."""
        try:
            fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except PermissionError:
            if os.name == "nt" and self.lock_path.exists():  # Windows reports a lock being deleted as EACCES
                return False
            raise StoreError(f"cannot create the lock file {self.lock_path} (permission denied): "
                             "the folder is read-only for this user") from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        return True

    def _heartbeat(self, token: str, stop: threading.Event) -> None:
        """While we hold the lock, touch it now and then: a waiter on another machine sees we are alive."""
        while not stop.wait(LOCK_HEARTBEAT_SECONDS):
            with contextlib.suppress(OSError):
                if self._lock_token() == token:
                    os.utime(self.lock_path)

    def _lock_info(self) -> dict[str, Any] | None:
        try:
            info = json.loads(self.lock_path.read_text(encoding="utf-8"))
            return info if isinstance(info, dict) else None
        except (OSError, ValueError):
            return None

    def _lock_token(self) -> str | None:
        info = self._lock_info()
        return info.get("token") if info else None

    def _describe_lock(self) -> str:
        info = self._lock_info() or {}
        where = info.get("host", "?")
        text = f"pid {info.get('pid', '?')} on {where}"
        if where not in ("?", socket.gethostname()):
            state = self._lock_state()
            silent = self._silent_for(state[0] if state else None)
            text += (f", another machine: broken once it shows no sign of life for {FOREIGN_LOCK_SILENT_SECONDS:.0f} s"
                     f" (silent {silent:.0f} s so far)")
        return text

    def _lock_state(self) -> tuple[tuple[Any, ...], dict[str, Any] | None] | None:
        """(what changes with every heartbeat, the owner record), or None when there is no lock."""
        try:
            st = os.stat(self.lock_path)
        except FileNotFoundError:
            return None
        info = self._lock_info()
        return (st.st_mtime_ns, st.st_size, st.st_ino, json.dumps(info, sort_keys=True)), info

    def _silent_for(self, state: tuple[Any, ...] | None) -> float:
        """How long (our monotonic clock) the lock has stayed exactly as it is now: no heartbeat seen."""
        now = time.monotonic()
        if state is None:
            self._lock_seen = None
            return 0.0
        if self._lock_seen is None or self._lock_seen[0] != state:
            self._lock_seen = (state, now)
        return now - self._lock_seen[1]

    def _stale_reason(self) -> str | None:
        """Why the current lock may be broken, or None while its owner may be alive."""
        found = self._lock_state()
        if found is None:
            return "gone"
        state, info = found
        silent = self._silent_for(state)
        age = time.time() - state[0] / 1e9  # by our clock; another machine's clock may disagree
        if info is None:  # no owner record: its writer died between creating and writing it
            return "empty" if max(age, silent) > EMPTY_LOCK_SECONDS else None
        pid = info.get("pid") if isinstance(info.get("pid"), int) else 0
        if info.get("host") == socket.gethostname():
            if not _pid_alive(pid):
                return f"pid {pid} is no longer running"
            started = info.get("started")
            if started and process_start_id(pid) not in (None, started):
                return f"pid {pid} is another process now (the lock's owner is gone)"
            return None  # a live owner on this machine: never broken, however long it takes
        heartbeat_missed = silent > 3 * LOCK_HEARTBEAT_SECONDS
        if (heartbeat_missed and age > FOREIGN_LOCK_SILENT_SECONDS) or silent > FOREIGN_LOCK_SILENT_SECONDS:
            return f"pid {pid} on {info.get('host')} showed no sign of life for {max(silent, min(age, 1e9)):.0f} s"
        return None

    def _break_stale_lock(self) -> bool:
        """Break a lock whose owner is gone; True when the lock is gone or was broken."""
        reason = self._stale_reason()
        if reason is None:
            return False
        if reason == "gone":
            return True
        info = self._lock_info()
        aside = self.lock_path.with_name(f"{self.lock_path.name}.stale-{os.getpid()}-{secrets.token_hex(3)}")
        try:
            os.replace(self.lock_path, aside)
        except OSError:
            return False
        moved = None
        with contextlib.suppress(OSError, ValueError):
            moved = json.loads(aside.read_text(encoding="utf-8"))
        if info is not None and moved != info:  # a live writer took the lock meanwhile: give it back
            with contextlib.suppress(OSError):
                os.link(aside, self.lock_path)
        with contextlib.suppress(OSError):
            os.unlink(aside)
        log(f"broke the lock on {self.path.name}: {reason}")
        return True

    def _check_still_ours(self, token: str, read_key: tuple[int, int, int] | None) -> None:
        """Right before the replace: the lock is still ours and the file is the one we read."""
        if self._lock_token() != token:
            raise WriteConflict(f"the lock on {self.path.name} was taken by {self._describe_lock()} meanwhile")
        if self.stat_key() != read_key:
            raise WriteConflict(f"{self.path.name} was changed by another program meanwhile")

    # ── transactions: lock, re-read, change, archive, atomic write ──
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Lock, read the current file, let the caller change it, then write it (raises WriteConflict to retry)."""
        with self.lock() as token:
            graph, read_key = self._fresh_under_lock()
            tx = Transaction(graph)
            tx.read_key = read_key
            try:
                yield tx
                if tx.changed or tx.graph.unreadable:
                    self._commit(tx, token, read_key)
            except BaseException:
                self._cache_key = None  # the change may have half-edited entities shared with the cache: re-read
                raise

    def _commit(self, tx: Transaction, token: str, read_key: tuple[int, int, int] | None) -> None:
        """Write a change. Facts moving between graph and archive are written first where they arrive and
        removed last where they leave, so a failure or a crash in between duplicates a fact, never loses one."""
        self._backup_daily()
        undo = self._archive_gains(tx)
        try:
            if heal_conflict_markers(tx.graph):
                log(f"{self.path.name} had git conflict markers: removed, both sides' facts kept")
            if tx.graph.unreadable:
                self._set_aside_unreadable(tx.graph)
            self._write_atomic(serialise_graph(tx.graph).encode("utf-8"),
                               before_replace=lambda: self._check_still_ours(token, read_key))
        except BaseException:
            self._restore_files(undo)
            raise
        self._cache, self._cache_key = tx.graph, self.stat_key()
        self.generation += 1
        self._archive_losses(tx)
        self._remove_dead_temp_files()

    def _remove_dead_temp_files(self) -> None:
        """Temp files are only made under the lock we hold: any left are from a writer that was killed."""
        leftovers = [*self.folder.glob(f".{self.path.name}.*.tmp"), *self.folder.glob(f"{self.path.name}.*.tmp")]
        for leftover in leftovers:  # (the second pattern: temp files of earlier versions)
            with contextlib.suppress(OSError):
                leftover.unlink()

    def _write_atomic(self, data: bytes, before_replace: Callable[[], None] = lambda: None) -> None:
        """Replace the graph file; it keeps its mode (a new one gets 0644, as the reference server leaves it)."""
        mode = (os.stat(self.path).st_mode & 0o777) if self.path.exists() else 0o644
        write_atomic(self.path, data, mode, before_replace)

    def _set_aside_unreadable(self, graph: Graph) -> None:
        stamp = utc_stamp(fmt="%Y-%m-%dT%H:%M:%SZ")
        with open(self.unreadable_path, "ab") as handle:
            for number, raw in graph.unreadable:
                handle.write(f"# {stamp} line {number}\n".encode() + raw.rstrip(b"\r") + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        log(f"moved {len(graph.unreadable)} unreadable line(s) to {self.unreadable_path}")
        graph.unreadable = []

    def unreadable_set_aside(self) -> int:
        """How many unreadable lines were moved to the .unreadable file so far."""
        try:
            return sum(1 for line in self.unreadable_path.read_bytes().split(b"\n") if line.startswith(b"# "))
        except FileNotFoundError:
            return 0

    # ── backups ──
    def _backup_daily(self) -> None:
        if self.settings.backups_kept <= 0 or not self.path.exists():
            return
        today = utc_stamp(fmt="%Y-%m-%d")
        target = self.backup_dir / f"{self.path.stem}-{today}{self.path.suffix}"
        if target.exists():
            return
        self.backup_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.path, target)
        self.prune_backups()

    def backup_now(self, label: str) -> Path:
        """A copy of the graph now, named by time and label; the caller prunes (prune_backups) after its lock."""
        self.backup_dir.mkdir(parents=True, exist_ok=True)
        stamp = utc_stamp(fmt="%Y-%m-%d-%H%M%S")
        target = self.backup_dir / f"{self.path.stem}-{stamp}-{label}{self.path.suffix}"
        if self.path.exists():
            shutil.copy2(self.path, target)
        else:
            target.write_bytes(b"")
        return target

    def prune_backups(self) -> None:
        """Keep the newest MEMORY_BACKUPS_KEPT (at least one) of each kind: the daily copies, and each label's
        (before-compact, ...)."""
        pattern = re.compile(re.escape(self.path.stem) + r"-\d{4}-\d{2}-\d{2}(?:-\d{6}-(?P<label>[\w-]+))?"
                             + re.escape(self.path.suffix) + "$")
        kinds: dict[str, list[Path]] = {}
        for path in self.backup_dir.iterdir():
            found = pattern.match(path.name)
            if found:
                kinds.setdefault(found["label"] or "", []).append(path)
        for label, paths in kinds.items():
            for old in sorted(paths)[:-max(1, self.settings.backups_kept)]:
                with contextlib.suppress(OSError):
                    old.unlink()

    # ── archive: archive/<encoded name>.md, Markdown a person can read ──
    def archive_path(self, name: str) -> Path:
        """The archive file of entity `name` (its name encoded to be safe on every file system)."""
        return self.archive_dir / (encode_entity_filename(name) + ".md")

    def read_archive(self, name: str) -> list[ArchivedFact]:
        """The archived facts of entity `name`, oldest first; [] without an archive."""
        try:
            return parse_archive(read_archive_text(self.archive_path(name)))
        except FileNotFoundError:
            return []

    def archived_count(self, name: str) -> int:
        """How many facts entity `name` has in its archive."""
        return len(self.read_archive(name)) if self.archive_dir.exists() else 0

    def _archive_gains(self, tx: Transaction) -> list[tuple[Path, bytes | None]]:
        """Write the archive files that gain facts (archived facts, a rename's new name), before the graph.
        A fact already in the file is not added twice (a rerun of an interrupted compact). Returns what
        each file held before, to put back if the graph write fails."""
        gains: dict[str, list[ArchivedFact]] = {}
        stamp = utc_stamp()
        for old, new in tx.archive_renames:
            gains.setdefault(new, []).extend(self.read_archive(old))
        for name, texts, why in tx.archive_adds:
            gains.setdefault(name, []).extend(ArchivedFact(t, why, stamp) for t in texts)
        before: list[tuple[Path, bytes | None]] = []
        try:
            for name, arriving in gains.items():
                current = self.read_archive(name)
                known = {f.text for f in current}
                fresh = [f for f in arriving if f.text not in known and not known.add(f.text)]
                if fresh:
                    before.append((self.archive_path(name), _file_bytes(self.archive_path(name))))
                    self.write_archive(name, current + fresh)
        except BaseException:
            self._restore_files(before)
            raise
        return before

    def _archive_losses(self, tx: Transaction) -> None:
        """After the graph is written: remove restored facts and a rename's old file. A failure here leaves a
        duplicate (the fact in the graph and in the archive), said in the answer, never a loss."""
        losses: dict[str, list[str] | None] = {}  # None: the whole file (renamed away)
        for old, _new in tx.archive_renames:
            losses[old] = None
        for name, texts in tx.archive_removes:
            if losses.get(name, []) is not None:
                losses.setdefault(name, []).extend(texts)
        for name, texts in losses.items():
            try:
                if texts is None:
                    with contextlib.suppress(FileNotFoundError):
                        self.archive_path(name).unlink()
                    continue
                remaining = self.read_archive(name)
                for text in texts:
                    for i, fact in enumerate(remaining):
                        if fact.text == text:
                            del remaining[i]
                            break
                self.write_archive(name, remaining)
            except OSError as err:
                tx.notes.append(f"the archive of {_q(name)} still lists what moved out of it ({err.strerror or err}); "
                                "harmless, the next change to it tidies it")

    def _restore_files(self, before: list[tuple[Path, bytes | None]]) -> None:
        """Best effort: put files back as they were (after a failed graph write). Failing leaves a duplicate."""
        for path, data in reversed(before):
            with contextlib.suppress(OSError):
                if data is None:
                    path.unlink()
                else:
                    write_atomic(path, data)

    def write_archive(self, name: str, facts: list[ArchivedFact]) -> None:
        """Replace entity `name`'s archive file with `facts` (atomically; no facts: the file is removed)."""
        path = self.archive_path(name)
        if not facts:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        self.archive_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(path, render_archive(name, facts).encode("utf-8", "surrogatepass"))




def read_archive_text(path: Path) -> str:
    """Exactly what was written: no newline translation (a fact may hold \\r), lone surrogates kept."""
    return path.read_bytes().decode("utf-8", "surrogatepass")


def render_archive(name: str, facts: list[ArchivedFact]) -> str:
    """An entity's archive file: a Markdown heading, a comment line naming the entity exactly, then its facts grouped
    under why and when they were archived."""
    heading = json.dumps(name, ensure_ascii=False)[1:-1]  # one line, whatever the name holds
    lines = [f"# Archived facts of {heading}", f"<!-- graphmem archive; entity: {json.dumps(name)} -->"]
    section = None
    for fact in facts:
        if (fact.why, fact.when) != section:
            section = (fact.why, fact.when)
            lines += ["", f"## {fact.why} · {fact.when}"]
        first, *rest = fact.text.split("\n")
        lines.append(f"- {first}")
        lines += [f"  {more}" for more in rest]
    return "\n".join(lines) + "\n"


def parse_archive(text: str) -> list[ArchivedFact]:
    """The facts of an archive file (render_archive's inverse): after the first "## why · when" heading, each
    "- " line is a fact and indented lines continue it."""
    facts: list[ArchivedFact] = []
    why, when = "archived", ""
    started = False
    for line in text.split("\n"):
        if not started and not line.startswith("## "):
            continue  # the heading and comment: never facts
        started = True
        if line.startswith("## "):
            why, _, when = line[3:].partition(" · ")
        elif line.startswith("- "):
            facts.append(ArchivedFact(line[2:], why, when))
        elif line.startswith("  ") and facts:
            facts[-1].text += "\n" + line[2:]
    return facts


def archive_entity_name(path: Path) -> str | None:
    """The entity an archive file belongs to (from its comment line; the file name as fallback)."""
    try:
        with open(path, encoding="utf-8") as handle:
            for _ in range(3):
                line = handle.readline()
                if line.startswith("<!-- graphmem archive; entity: "):
                    return json.loads(line[len("<!-- graphmem archive; entity: "):].rsplit(" -->", 1)[0])
    except (OSError, ValueError):
        pass
    return decode_entity_filename(path.stem)


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine (Windows: asked without signalling it)."""
    if pid <= 0:
        return False
    if os.name == "nt":
        return _windows_pid_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _windows_pid_alive(pid: int) -> bool:
    import ctypes  # Windows only: os.kill there would terminate the process
    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return ctypes.get_last_error() == 5 or kernel32.GetLastError() == 5  # access denied: it exists
    try:
        code = ctypes.c_ulong()
        return not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)) or code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def process_start_id(pid: int) -> str | None:
    """When process `pid` started (Linux: /proc), so a lock is not kept alive by a reused pid; None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        return fields[19].decode()  # field 22, starttime; fields after the name start at field 3
    except (OSError, IndexError):
        return None





# ════════════════════════════════════════════════════════════════════════════
# 4. MetaStore: SQLite beside the graph (per-fact state, ledger, probes, history)
# ════════════════════════════════════════════════════════════════════════════

NEW_FACT_STABILITY_H = 168.0  # a new fact's half-life: 7 days of use (24 h of active time per day used)
MAX_STABILITY_H = 8760.0      # at most a year of days of use
FADING_RETENTION = 0.3     # shown dimmed and counted as fading
FADED_RETENTION = 0.05     # --compact may archive an unpinned dated fact this faded: 4.3 half-lives, 31 days of
                           # use without it for a new fact (a guess: a month of work never needing an event)
DAY_SECONDS = 86400.0

SCHEMA = [
    # version 1
    """
    CREATE TABLE IF NOT EXISTS facts(
        entity TEXT NOT NULL, text TEXT NOT NULL,
        created REAL NOT NULL, last_used REAL NOT NULL, uses INTEGER NOT NULL DEFAULT 0,
        stability REAL NOT NULL, importance REAL NOT NULL DEFAULT 0.5, pinned INTEGER NOT NULL DEFAULT 0,
        client TEXT, PRIMARY KEY(entity, text)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS ledger(
        id INTEGER PRIMARY KEY, ts REAL NOT NULL, tool TEXT NOT NULL, client TEXT,
        tokens INTEGER NOT NULL, reference_tokens INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS probes(
        id INTEGER PRIMARY KEY, query TEXT NOT NULL, entity TEXT NOT NULL, fact TEXT NOT NULL DEFAULT '',
        source TEXT NOT NULL, created REAL NOT NULL, UNIQUE(query, entity, fact));
    CREATE TABLE IF NOT EXISTS history(
        id INTEGER PRIMARY KEY, ts REAL NOT NULL, client TEXT, summary TEXT NOT NULL,
        changes TEXT NOT NULL, undone INTEGER NOT NULL DEFAULT 0);
    """,
    # version 2: code anchors
    """
    CREATE TABLE IF NOT EXISTS anchors(
        entity TEXT NOT NULL, text TEXT NOT NULL, root TEXT NOT NULL, path TEXT NOT NULL,
        symbol TEXT NOT NULL DEFAULT '', fingerprint TEXT NOT NULL, verified REAL NOT NULL,
        mtime_ns INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL DEFAULT -1,
        PRIMARY KEY(entity, text)) WITHOUT ROWID;
    """,
    # version 3: bounded growth: the ledger kept per (UTC day, tool, client) instead of a row per call, same totals.
    # `saved` sums each call's max(reference - tokens, 0), as the daily series of the receipts always did.
    """
    CREATE TABLE IF NOT EXISTS ledger_days(
        day TEXT NOT NULL, tool TEXT NOT NULL, client TEXT NOT NULL DEFAULT '',
        calls INTEGER NOT NULL DEFAULT 0, tokens INTEGER NOT NULL DEFAULT 0,
        reference_tokens INTEGER NOT NULL DEFAULT 0, saved INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY(day, tool, client)) WITHOUT ROWID;
    INSERT INTO ledger_days(day, tool, client, calls, tokens, reference_tokens, saved)
        SELECT date(ts, 'unixepoch'), tool, coalesce(client, ''), count(*), sum(tokens), sum(reference_tokens),
               sum(max(reference_tokens - tokens, 0)) FROM ledger GROUP BY 1, 2, 3;
    DROP TABLE ledger;
    """,
    # version 4: the activity clock: the UTC days (days since 1970-01-01) on which the graph was used
    """
    CREATE TABLE IF NOT EXISTS active_days(day INTEGER PRIMARY KEY);
    """,
    # version 5: session briefings (--context), so a briefing says what changed since the last one
    """
    CREATE TABLE IF NOT EXISTS briefings(ts REAL NOT NULL);
    """,
    # version 6: vectors from the optional embeddings endpoint (MEMORY_EMBEDDINGS_URL), by fact text and model:
    # `fact` is fact_hash(text), `vector` a packed array('f') of `dim` unit-length floats
    """
    CREATE TABLE IF NOT EXISTS embeddings(
        fact TEXT NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
        PRIMARY KEY(fact, model)) WITHOUT ROWID;
    """,
]

# ── bounded growth: what memory.db keeps (MetaStore.prune). The ledger needs no cap: one row per UTC day,
# tool and client (4 read tools x a few clients x 365 = a few thousand small rows a year).
PRUNE_EVERY_WRITES = 100   # prune on a process's first metadata write, then every 100th (ledger, history, probe):
                           # a prune is a few DELETEs, 2-7 ms (tools/bench_growth.py), off the per-call path
HISTORY_KEEP_DAYS = 90     # issue 9: a quarter, longer than anyone reaches back to undo or audit a change
HISTORY_MAX_ROWS = 1000    # issue 9; the UI lists at most 200. ~0.7 KB a row in tools/bench_growth.py -> ~0.7 MB;
                           # at worst two copies of a 15-fact entity of 300-char facts, ~9 KB -> ~9 MB
HISTORY_MIN_ROWS = 50      # kept whatever their age: undo steps back from the newest change, one per call
PROBES_AUTO_KEPT = 500     # newest learned probes: --compact runs each twice, 12.8 ms a run on the 4,122 facts of
                           # tools/bench_growth.py -> ~13 s at most; one probe is 0.2% of the hit rate, well under
                           # the default 2% max drop, so the guardrail still sees a single lost answer
PROBES_MANUAL_KEPT = 2000  # added by a person with --probe: a cap only against a script gone wrong
# VACUUM only when over 1 MB (4 KB pages) and a quarter of the file is free: once, after a migration trims a long
# history (a steady prune frees far less); a guess: VACUUM copies the file
RECLAIM_FREE_PAGES = 256


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a memory.db up to the newest schema (PRAGMA user_version counts the scripts applied)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    for number, script in enumerate(SCHEMA, start=1):
        if version < number:
            conn.executescript(f"BEGIN IMMEDIATE; {script}; PRAGMA user_version={number}; COMMIT;")
    conn.execute("SELECT count(*) FROM facts").fetchone()


def describe_db_error(path: Path, err: BaseException) -> str:
    """What went wrong with memory.db, in words an agent can act on."""
    text = str(err)
    if "locked" in text or "busy" in text:
        return f"{path.name} is busy (another process holds it)"
    if "readonly" in text or "read-only" in text or isinstance(err, PermissionError):
        return f"{path.name} is read-only"
    if "unable to open" in text:
        return f"{path.name} cannot be opened (is its folder writable?)"
    return f"{path.name} failed ({text})"


def db_text(text: str) -> str:
    """SQLite wants valid UTF-8: lone surrogates (legal in the JSONL) are stored escaped, as the file stores them."""
    return escape_surrogates(text)


@dataclasses.dataclass
class FactState:
    """What memory.db keeps per fact: when it was created and last used, uses, stability (hours), importance, pinned,
    and the client that wrote it."""
    created: float
    last_used: float
    uses: int = 0
    stability: float = NEW_FACT_STABILITY_H
    importance: float = 0.5
    pinned: bool = False
    client: str | None = None

    def retention(self, clock: "ActivityClock") -> float:
        """0.5 ^ (active hours since last use / stability): time counts only on days the memory was used."""
        if self.pinned:
            return 1.0
        return 0.5 ** (clock.active_hours_since(self.last_used) / max(self.stability, 1.0))


@dataclasses.dataclass(frozen=True)
class ActivityClock:
    """Decay's clock: 24 active hours for each day the memory was used (any tool call), none for days away.
    A fact last used on day d has aged one day for each day of use after d, up to today."""
    days: tuple[int, ...]  # sorted UTC day numbers of use
    now: float

    def active_hours_since(self, when: float) -> float:
        """Hours of use since `when`: 24 for each day the graph was used after it, nothing for days away."""
        first, today = int(when // DAY_SECONDS), int(self.now // DAY_SECONDS)
        if today <= first:
            return 0.0
        return 24.0 * (bisect.bisect_right(self.days, today) - bisect.bisect_right(self.days, first))


META_BUSY_SECONDS = 1.0   # a call waits this long for memory.db held by another process, then goes on without it
META_REOPEN_SECONDS = 5.0  # an unavailable memory.db is tried again this often


SKIPPED_WORDS = {"reconcile": "fact ages", "mark_active": "the day of use (activity clock)",
                 "save_states": "usage and pins", "move_facts": "pins of moved facts",
                 "record_call": "receipts", "add_probe": "guardrail probes", "probes": "guardrail probes",
                 "record_history": "history (undo)", "history": "history",
                 "vectors": "cached embeddings", "save_vectors": "cached embeddings",
                 "forget_vectors": "cached embeddings", "reconcile_own_change": "fact ages",
                 "changes_since": "history", "last_briefing": "the last briefing's time"}


def best_effort(default: Any = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """MetaStore methods that never fail a call: on a busy, read-only or damaged memory.db they return
    `default` (called, when callable) and leave a note that the answer will carry."""
    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def run(self: "MetaStore", *args: Any, **kwargs: Any) -> Any:
            if not self.busy:
                try:
                    return method(self, *args, **kwargs)
                except (sqlite3.Error, OSError) as err:
                    self.failed(err)
            self.skipped.add(method.__name__)
            return default() if callable(default) else default
        return run
    return wrap


class MetaStore:
    """Derived state keyed by (entity, fact text). The JSONL stays the truth: deleting this loses history, not facts.

    Best-effort: a busy (locked by another process), read-only or damaged memory.db never fails a read and
    never turns a saved write into an error; `note()` says what was not read or recorded. No write-ahead log:
    a damaged -shm file of a WAL database kills a process with SIGBUS, which no Python code can catch."""

    def __init__(self, path: Path, now: Callable[[], float] = time.time):
        self.path = path
        self.now = now                   # the clock fact ages read (Settings.now)
        self.days: tuple[int, ...] = ()  # the activity clock's days of use, as of the last reconcile
        self._marked_day = -1            # the last day this process recorded as a day of use
        self.problem: str | None = None  # why memory.db could not be used in this call
        self.busy = False                # this call already gave up waiting for memory.db: skip the rest
        self.skipped: set[str] = set()   # what was skipped in this call
        self.unavailable: str | None = None  # memory.db could not be opened: kept in memory only
        self._reopen_at = 0.0
        self.conn = self._open()
        self.states: dict[tuple[str, str], FactState] = {}
        self._data_version = -1
        self._reconciled_generation = -1
        self._writes = 0  # ledger, history and probe writes by this process: paces prune()

    # ── opening, and what to say when it fails ──
    def _open(self) -> sqlite3.Connection:
        try:
            return self._open_file()
        except (sqlite3.Error, OSError) as err:
            self.unavailable = describe_db_error(self.path, err)
            self._reopen_at = time.monotonic() + META_REOPEN_SECONDS
            log(f"warning: {self.unavailable}; pins, history and receipts are kept in memory until it works again")
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            _migrate(conn)
            return conn

    def _open_file(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._connect_and_migrate()
        except sqlite3.OperationalError:
            raise  # busy, read-only, cannot open: not damage, never moved aside
        except sqlite3.DatabaseError as err:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            log(f"warning: {self.path.name} is unreadable ({err}); moved to {aside.name} and rebuilt from the graph")
            for suffix in ("", "-journal", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.replace(str(self.path) + suffix, str(aside) + suffix)
            return self._connect_and_migrate()

    def _connect_and_migrate(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=META_BUSY_SECONDS, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(META_BUSY_SECONDS * 1000)}")
            conn.execute("PRAGMA mmap_size=0")  # no memory-mapped pages a truncation could turn into SIGBUS
            with contextlib.suppress(sqlite3.OperationalError):  # another process may still hold it in WAL mode
                conn.execute("PRAGMA journal_mode=DELETE")
            conn.execute("PRAGMA synchronous=OFF")  # pins and history commit with NORMAL (write(durable=True))
            _migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def begin_call(self) -> None:
        """A new tool call: forget the last call's problems; try an unavailable memory.db again now and then."""
        self.problem, self.busy, self.skipped = None, False, set()
        if self.unavailable and time.monotonic() >= self._reopen_at:
            try:
                conn = self._open_file()
            except (sqlite3.Error, OSError):
                self._reopen_at = time.monotonic() + META_REOPEN_SECONDS
            else:
                log(f"{self.path.name} works again; metadata is recorded from now on")
                self.conn.close()
                self.conn, self.unavailable, self._data_version = conn, None, -1

    def failed(self, err: BaseException) -> None:
        """Remember why memory.db failed in this call; a busy one is not waited for again in the same call."""
        self.problem = describe_db_error(self.path, err)
        self.busy = self.busy or "locked" in str(err) or "busy" in str(err)
        log(f"warning: {self.problem}")

    def note(self) -> str:
        """One line for the answer when metadata could not be read or recorded in this call, else ''."""
        problem = self.problem or self.unavailable
        if not problem:
            return ""
        missed = sorted({SKIPPED_WORDS.get(name, name) for name in self.skipped}) or ["pins, history and receipts"]
        where = "kept in memory only" if self.unavailable and not self.problem else "not read or recorded"
        return f"Note: {problem}: the graph was read and written as usual; {where}: {', '.join(missed)}."

    # ── fact state ──
    @best_effort()
    def reconcile(self, graph: Graph, generation: int, client: str | None) -> None:
        """Bring fact state in line with the graph: facts added or removed by other tools or people."""
        dv = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if generation == self._reconciled_generation and dv == self._data_version:
            return
        if dv != self._data_version or not self.states:
            self.states = {}
            for row in self.conn.execute(
                    "SELECT entity, text, created, last_used, uses, stability, importance, pinned, client FROM facts"):
                self.states[(row[0], row[1])] = FactState(row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8])
            self.days = tuple(day for (day,) in self.conn.execute("SELECT day FROM active_days ORDER BY day"))
        live = {(db_text(e.name), db_text(o)) for e in graph.entities for o in e.observations}
        self._track(live.difference(self.states), [key for key in self.states if key not in live], client)
        self._reconciled_generation = generation
        self._data_version = self.conn.execute("PRAGMA data_version").fetchone()[0]

    @best_effort()
    def reconcile_own_change(self, changes: dict[str, Any], generation: int, client: str | None) -> None:
        """After our own write: track exactly the facts it added and removed, instead of a whole pass over the
        graph (that pass was most of a write's time at 10k facts). Falls back to reconcile when anything else
        happened since the last one."""
        dv = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if generation - 1 != self._reconciled_generation or dv != self._data_version:
            return
        before: set[tuple[str, str]] = set()
        after: set[tuple[str, str]] = set()
        for item in changes["entities"]:
            for side, keys in ((item["before"], before), (item["after"], after)):
                if side:
                    keys.update((db_text(side["name"]), db_text(o)) for o in side["observations"])
        self._track(after - before - self.states.keys(), [k for k in before - after if k in self.states], client)
        self._reconciled_generation = generation
        self._data_version = self.conn.execute("PRAGMA data_version").fetchone()[0]

    def _track(self, missing: set[tuple[str, str]], gone: list[tuple[str, str]], client: str | None) -> None:
        """Start the state of facts new to memory.db (as of now) and drop the state of facts that left."""
        if not (missing or gone):
            return
        now = self.now()
        with self.write():
            for key in missing:
                self.states[key] = FactState(now, now, client=client)
            self.conn.executemany(
                "INSERT OR IGNORE INTO facts(entity, text, created, last_used, stability, client) VALUES (?,?,?,?,?,?)",
                [(e, t, now, now, NEW_FACT_STABILITY_H, client) for e, t in missing])
            self.conn.executemany("DELETE FROM facts WHERE entity=? AND text=?", gone)
            self.conn.executemany("DELETE FROM anchors WHERE entity=? AND text=?", gone)  # a re-added fact starts anew
        for key in gone:
            del self.states[key]

    @contextlib.contextmanager
    def write(self, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction. durable: synced to disk at commit (pins); else the OS writes it when it likes
        (usage, receipts, history: a power cut may lose the last few, or need a rebuild from the graph)."""
        if self.busy:
            raise sqlite3.OperationalError("database is locked (gave up waiting earlier in this call)")
        if durable:
            self.conn.execute("PRAGMA synchronous=NORMAL")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        finally:
            if durable:
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("PRAGMA synchronous=OFF")

    def state(self, entity: str, text: str) -> FactState:
        """A fact's state, made fresh (created now) the first time it is asked for."""
        key = (db_text(entity), db_text(text))
        if key not in self.states:
            now = self.now()
            self.states[key] = FactState(now, now)
        return self.states[key]

    @best_effort()
    def save_states(self, keys: Iterable[tuple[str, str]], durable: bool = False) -> None:
        """Write the states of `keys` to memory.db (durable: synced, for pins)."""
        rows = []
        for entity, text in keys:
            s = self.state(entity, text)
            rows.append((db_text(entity), db_text(text), s.created, s.last_used, s.uses, s.stability, s.importance,
                         int(s.pinned), s.client))
        if rows:
            with self.write(durable):
                self.conn.executemany(
                    "INSERT OR REPLACE INTO facts(entity, text, created, last_used, uses, stability, importance,"
                    " pinned, client) VALUES (?,?,?,?,?,?,?,?,?)", rows)
            self._data_version = self.conn.execute("PRAGMA data_version").fetchone()[0]

    def reinforce(self, keys: Iterable[tuple[str, str]]) -> None:
        """A fact returned to an agent: its clock resets and it grows sturdier (faster when important)."""
        now = self.now()
        keys = list(dict.fromkeys(keys))
        for key in keys:
            s = self.state(*key)
            s.stability = min(MAX_STABILITY_H, s.stability * (1.0 + 0.5 * (0.5 + s.importance)))
            s.last_used, s.uses = now, s.uses + 1
        self.save_states(keys)

    @best_effort()
    def move_facts(self, renames: list[tuple[tuple[str, str], tuple[str, str]]]) -> None:
        """Keep a fact's state when its entity is renamed or its text edited."""
        renames = [((db_text(a), db_text(b)), (db_text(c), db_text(d))) for (a, b), (c, d) in renames]
        for old, new in renames:
            if old in self.states:
                self.states[new] = self.states.pop(old)
        with self.write():
            for (oe, ot), (ne, nt) in renames:
                self.conn.execute("DELETE FROM facts WHERE entity=? AND text=?", (ne, nt))
                self.conn.execute("UPDATE facts SET entity=?, text=? WHERE entity=? AND text=?", (ne, nt, oe, ot))
                self.conn.execute("UPDATE OR REPLACE anchors SET entity=?, text=? WHERE entity=? AND text=?",
                                  (ne, nt, oe, ot))

    # ── the activity clock ──
    @best_effort()
    def mark_active(self) -> None:
        """Count today as a day of use (once per process and day: one tiny row a day)."""
        today = int(self.now() // DAY_SECONDS)
        if today == self._marked_day:
            return
        with self.write():
            self.conn.execute("INSERT OR IGNORE INTO active_days(day) VALUES (?)", (today,))
        self._marked_day = today
        if today not in self.days:
            self.days = tuple(sorted((*self.days, today)))

    def clock(self) -> ActivityClock:
        """The activity clock as of now."""
        return ActivityClock(self.days, self.now())

    # ── ledger ──
    @best_effort()
    def record_call(self, tool: str, client: str | None, tokens: int, reference_tokens: int) -> None:
        """Add a read call to its day's row for this tool and client (UTC day, as the receipts' series)."""
        with self.write():
            self.conn.execute(
                "INSERT INTO ledger_days(day, tool, client, calls, tokens, reference_tokens, saved)"
                " VALUES (date(?, 'unixepoch'), ?, ?, 1, ?, ?, ?) ON CONFLICT(day, tool, client) DO UPDATE SET"
                " calls=calls+1, tokens=tokens+excluded.tokens,"
                " reference_tokens=reference_tokens+excluded.reference_tokens,"
                " saved=saved+excluded.saved",
                (time.time(), tool, db_text(client) if client else "", tokens, reference_tokens,
                 max(reference_tokens - tokens, 0)))
        self._wrote()

    def calls_recorded(self) -> int:
        """Read calls in the ledger: grows by one with every call, so the UI's version sees each one."""
        return self.conn.execute("SELECT coalesce(sum(calls), 0) FROM ledger_days").fetchone()[0]

    def change_stamp(self) -> tuple[int, int, int]:
        """(sqlite data_version, newest history id, read calls recorded): moves with any process's change."""
        dv = self.conn.execute("PRAGMA data_version").fetchone()[0]
        last = self.conn.execute("SELECT coalesce(max(id), 0) FROM history").fetchone()[0]
        return dv, last, self.calls_recorded()

    def ledger_totals(self) -> tuple[int, int, int]:
        """(read calls, tokens returned, tokens the reference server would have returned), all time."""
        return self.conn.execute("SELECT coalesce(sum(calls),0), coalesce(sum(tokens),0),"
                                 " coalesce(sum(reference_tokens),0) FROM ledger_days").fetchone()

    def ledger_series(self) -> list[tuple[str, int]]:
        """(day, tokens saved) per day of use, oldest first."""
        return self.conn.execute("SELECT day, sum(saved) FROM ledger_days GROUP BY day ORDER BY day").fetchall()

    def ledger_by(self, what: str) -> list[tuple[str, int, int, int]]:
        """(tool or client, calls, tokens, reference tokens), most saved first; `what` is "tool" or "client"."""
        column = {"tool": "tool", "client": "coalesce(nullif(client, ''), '?')"}[what]
        return self.conn.execute(f"SELECT {column}, sum(calls), sum(tokens), sum(reference_tokens) FROM ledger_days"
                                 " GROUP BY 1 ORDER BY sum(reference_tokens) - sum(tokens) DESC").fetchall()

    # ── code anchors (section 8b reads and writes them through these) ──
    def anchor_row(self, entity: str, text: str) -> tuple[Any, ...] | None:
        """(root, path, symbol, fingerprint, verified, mtime_ns, size) of a fact's anchor, or None."""
        return self.conn.execute("SELECT root, path, symbol, fingerprint, verified, mtime_ns, size FROM anchors"
                                 " WHERE entity=? AND text=?", (entity, text)).fetchone()

    def save_anchor(self, entity: str, text: str, row: tuple[Any, ...]) -> None:
        """Store a fact's anchor fingerprint (`row` in anchor_row's order)."""
        with self.write() as conn:
            conn.execute("INSERT OR REPLACE INTO anchors(entity, text, root, path, symbol, fingerprint, verified,"
                         " mtime_ns, size) VALUES (?,?,?,?,?,?,?,?,?)", (entity, text, *row))

    # ── probes ──
    @best_effort(False)
    def add_probe(self, query: str, entity: str, fact: str, source: str) -> bool:
        """Store a probe once (True when new). Seen again, it becomes the newest; a manual one stays manual.
        Queries differing only in case or spacing are one probe (recall reads them the same)."""
        key, now = (db_text(" ".join(query_words(query))), db_text(entity), db_text(fact)), time.time()
        with self.write():
            cur = self.conn.execute("INSERT OR IGNORE INTO probes(query, entity, fact, source, created)"
                                    " VALUES (?,?,?,?,?)", (*key, source, now))
            added = cur.rowcount > 0
            if not added:
                self.conn.execute("UPDATE probes SET created=?, source=CASE source WHEN 'manual' THEN source ELSE ? END"
                                  " WHERE query=? AND entity=? AND fact=?", (now, source, *key))
        self._wrote()
        return added

    @best_effort(list)
    def probes(self) -> list[tuple[str, str, str, str]]:
        """Every probe: (query, entity, fact, source), oldest first."""
        return list(self.conn.execute("SELECT query, entity, fact, source FROM probes ORDER BY id"))

    def probe_rows(self) -> list[tuple[int, str, str, str, str]]:
        """(id, query, entity, fact, source) of every probe, oldest first: for a person to review (raises on a
        broken memory.db: a listing that silently shows nothing would mislead)."""
        return list(self.conn.execute("SELECT id, query, entity, fact, source FROM probes ORDER BY id"))

    def remove_probe(self, probe_id: int) -> bool:
        """Delete one probe by id (True when it existed)."""
        with self.write(durable=True):
            return self.conn.execute("DELETE FROM probes WHERE id=?", (probe_id,)).rowcount > 0

    # ── history ──
    @best_effort()
    def record_history(self, client: str | None, summary: str, changes: dict[str, Any]) -> None:
        """One change in the history that undo and the UI read (who, what, the before and after)."""
        with self.write():  # not synced: undo history may lose its last entries to a power cut, never facts
            self.conn.execute("INSERT INTO history(ts, client, summary, changes) VALUES (?,?,?,?)",
                              (time.time(), db_text(client) if client else None, db_text(summary), json.dumps(changes)))
        self._wrote()

    @best_effort(list)
    def changes_since(self, since: float) -> list[tuple[float, dict[str, Any]]]:
        """(time, changes) of every change not undone after `since`, newest first."""
        return [(ts, json.loads(changes)) for ts, changes in self.conn.execute(
            "SELECT ts, changes FROM history WHERE ts > ? AND undone = 0 ORDER BY id DESC", (since,))]

    @best_effort(None)
    def last_briefing(self, record: bool = True) -> float | None:
        """When the last --context briefing ran (None: never); records this one."""
        row = self.conn.execute("SELECT max(ts) FROM briefings").fetchone()
        if record:
            with self.write():
                self.conn.execute("DELETE FROM briefings")
                self.conn.execute("INSERT INTO briefings(ts) VALUES (?)", (time.time(),))
        return row[0] if row else None

    @best_effort(list)
    def history(self, limit: int) -> list[tuple[int, float, str | None, str, int]]:
        """The newest `limit` changes: (id, time, client, summary, undone)."""
        return list(self.conn.execute(
            "SELECT id, ts, client, summary, undone FROM history ORDER BY id DESC LIMIT ?", (limit,)))

    # ── the embeddings cache (MEMORY_EMBEDDINGS_URL): a vector per fact text and model ──
    @best_effort(dict)
    def vectors(self, model: str, hashes: list[str]) -> dict[str, array.array]:
        """The cached vectors among these fact hashes, for this model."""
        found: dict[str, array.array] = {}
        for start in range(0, len(hashes), 500):  # SQLite's limit on bound parameters
            chunk = hashes[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for fact, dim, blob in self.conn.execute(
                    f"SELECT fact, dim, vector FROM embeddings WHERE model=? AND fact IN ({marks})", (model, *chunk)):
                vec = array.array("f")
                vec.frombytes(blob)
                if len(vec) == dim:
                    found[fact] = vec
        return found

    @best_effort()
    def save_vectors(self, model: str, rows: list[tuple[str, array.array]]) -> None:
        """Cache fact vectors of `model` (fact hash, vector) in memory.db."""
        with self.write():
            self.conn.executemany("INSERT OR REPLACE INTO embeddings(fact, model, dim, vector) VALUES (?,?,?,?)",
                                  [(fact, model, len(vec), vec.tobytes()) for fact, vec in rows])

    @best_effort(0)
    def forget_vectors(self, model: str, live: set[str]) -> int:
        """Drop this model's vectors of facts no longer in the graph (the cache stays the graph's size)."""
        stored = [fact for (fact,) in self.conn.execute("SELECT fact FROM embeddings WHERE model=?", (model,))]
        gone = [(fact, model) for fact in stored if fact not in live]
        if gone:
            with self.write():
                self.conn.executemany("DELETE FROM embeddings WHERE fact=? AND model=?", gone)
        return len(gone)

    # ── bounded growth ──
    def _wrote(self) -> None:
        """Count a ledger, history or probe write; prune on the first and every PRUNE_EVERY_WRITES-th.
        Runs after the write committed: a prune that fails is logged and costs the call nothing."""
        self._writes += 1
        if (self._writes - 1) % PRUNE_EVERY_WRITES:
            return
        try:
            self.prune()
        except sqlite3.Error as err:
            log(f"warning: could not trim {self.path.name} ({err}); will try again later")

    def prune(self, now: float | None = None) -> tuple[int, int]:
        """Trim history and probes to their bounds (constants above); (history rows, probes) deleted."""
        cutoff = (time.time() if now is None else now) - HISTORY_KEEP_DAYS * 86400.0
        with self.write():
            history = self.conn.execute(PRUNE_HISTORY, (HISTORY_MIN_ROWS - 1, cutoff, HISTORY_MAX_ROWS)).rowcount
            probes = self.conn.execute(PRUNE_PROBES, (PROBES_MANUAL_KEPT, PROBES_AUTO_KEPT)).rowcount
        if history or probes:
            self._reclaim()
        return history, probes

    def _reclaim(self) -> None:
        """Give freed pages back to the disk when much of the file is free (after a long old history is trimmed);
        otherwise SQLite reuses them, and the file stays at its bounded size."""
        free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
        if free > RECLAIM_FREE_PAGES and 4 * free > self.conn.execute("PRAGMA page_count").fetchone()[0]:
            self.conn.execute("VACUUM")


# Older than the newest HISTORY_MIN_ROWS, and older than the age limit or beyond HISTORY_MAX_ROWS.
PRUNE_HISTORY = """
DELETE FROM history WHERE id < (SELECT id FROM history ORDER BY id DESC LIMIT 1 OFFSET ?)
    AND (ts < ? OR id <= (SELECT id FROM history ORDER BY id DESC LIMIT 1 OFFSET ?))"""
# Beyond the newest N of their kind, newest by when a probe was last learned or added.
PRUNE_PROBES = """
DELETE FROM probes WHERE id IN (SELECT id FROM (
    SELECT id, source, row_number() OVER (PARTITION BY source = 'manual' ORDER BY created DESC, id DESC) AS n
    FROM probes)
    WHERE n > CASE source WHEN 'manual' THEN ? ELSE ? END)"""


# ════════════════════════════════════════════════════════════════════════════
# 5. Text: tokens, stems, token estimate, hashing embedder
# ════════════════════════════════════════════════════════════════════════════

STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
him his how i if in into is it its itself just me more most my no nor not of off on once only or other our ours
out over own same she should so some such than that the their theirs them then there these they this those
through to too under until up very was we were what when where which while who whom why will with would you
your yours yourself also did does get got know tell us let want need use used using one ones thing things
s t d m ll re ve
""".split())

_WORD = re.compile(r"[^\W_]+")
_SUFFIXES = ("ations", "ation", "ments", "ment", "ings", "ing", "ies", "ied", "ers", "er", "ed", "es", "ly", "s")


def tokenize(text: str) -> list[str]:
    """Lower-cased words of a text: runs of letters and digits (underscores and punctuation split words)."""
    return _WORD.findall(text.lower())


def stem(word: str) -> str:
    """Light suffix stripping, enough for deploy/deploys/deployed/deployment to meet."""
    cached = _STEM_CACHE.get(word)
    if cached is not None:
        return cached
    result = word
    if len(word) > 4 and not word.isdigit():
        for suffix in _SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                result = word[:-len(suffix)]
                if suffix in ("ies", "ied"):
                    result += "y"
                break
        if len(result) > 3 and result[-1] == result[-2] and result[-1] not in "aeiouls":
            result = result[:-1]  # running -> run, planned -> plan
        if result.endswith("e") and len(result) > 4:
            result = result[:-1]
    if len(_STEM_CACHE) < 500_000:
        _STEM_CACHE[word] = result
    return result


_STEM_CACHE: dict[str, str] = {}


def stems_line(text: str) -> str:
    """' s1 s2 s3 ': substring search for ' term' is a fast word-prefix match."""
    return " " + " ".join(stem(w) for w in tokenize(text)) + " "


CHARS_PER_TOKEN = 4  # the one token estimate: characters / 4, the figure peers publish


def tokens_for_chars(chars: int) -> int:
    """Tokens that `chars` characters cost, rounded up."""
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def chars_for_tokens(tokens: int) -> int:
    """Characters that fit in `tokens` tokens."""
    return tokens * CHARS_PER_TOKEN


def estimate_tokens(text: str) -> int:
    """Tokens a text costs (CHARS_PER_TOKEN characters each, rounded up)."""
    return tokens_for_chars(len(text))


# Small groups of words agents use interchangeably in software work (jargon WordNet lacks). No word of a
# paraphrase question of tools/bench_corpus.py may appear here (tests/test_recall.py checks): that corpus
# measures what the word table finds, not what this list was written to find.
SYNONYM_GROUPS = [
    "deploy rollout publish", "db postgres postgresql mysql sqlite", "bug defect issue",
    "error failure exception crash", "config configuration setting settings", "auth authentication login signin",
    "test tests testing spec", "doc docs documentation readme", "dependency dependencies dep deps package",
    "start launch boot", "halt kill", "delete remove drop", "create add new", "fast speed latency performance",
    "slow latency lag", "prod production", "staging preprod", "dev development local", "meeting sync",
    "owner maintainer responsible", "price pay payment invoice", "secret credential token key", "branch git",
    "ci pipeline", "cache caching redis memcached", "queue broker kafka rabbitmq", "email mail smtp",
    "schedule cron timer", "job task", "month monthly", "endpoint route", "ui frontend interface",
    "backend service", "log logs logging", "version tag", "upgrade update bump",
]
SYNONYMS: dict[str, tuple[str, ...]] = {}
for _group in SYNONYM_GROUPS:
    _stems = [stem(w) for w in _group.split()]
    for _s in _stems:
        SYNONYMS[_s] = tuple(dict.fromkeys(x for x in SYNONYMS.get(_s, ()) + tuple(_stems) if x != _s))


# ── the word table: related words from WordNet 3.0, shipped beside the server (tools/build_wordtable.py) ──
WORD_TABLE_FILE = "wordtable.tsv.gz"
# WordNet's detachment rules (morphy): an inflected word's possible base forms, checked against the table.
_DETACH = (("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"), ("ies", "y"),
           ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", ""), ("est", ""), ("er", ""),
           ("s", ""))


def fold_accents(word: str) -> str:
    """'café' -> 'cafe': the table's words are plain ASCII."""
    import unicodedata
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))


def stem_phrase(words: str) -> str:
    """A table word or phrase as the index sees it: its stems joined by single spaces."""
    return " ".join(stem(w) for w in tokenize(words))


class WordTable:
    """Related words from WordNet 3.0, read lazily from wordtable.tsv.gz (gzipped TSV, keys sorted:
    `key<TAB>word|percent...`; sections [query] related words, [index] broader words, [forms] irregular forms).

    Lines are kept raw and parsed on first lookup: loading costs ~50 ms and ~10 MB, a lookup microseconds.
    Neighbours come back as stem phrases, to be matched as whole stems, never as prefixes. Without the file
    every lookup is empty and recall works as before, only less well at paraphrases."""

    def __init__(self, path: Path | None):
        self.path = path
        self._sections: dict[str, dict[str, str]] | None = None
        self._parsed: dict[tuple[str, str], tuple[tuple[str, float], ...]] = {}
        self._narrower: dict[str, str] | None = None
        self._lock = threading.Lock()

    def sections(self) -> dict[str, dict[str, str]]:
        """section -> key -> raw neighbour text; empty when the file is missing or unreadable."""
        if self._sections is None:
            with self._lock:
                if self._sections is None:
                    self._sections = self._read()
        return self._sections

    def _read(self) -> dict[str, dict[str, str]]:
        import gzip
        sections: dict[str, dict[str, str]] = {}
        if self.path is None:
            return sections
        try:
            text = gzip.decompress(self.path.read_bytes()).decode("utf-8")
        except (OSError, EOFError, ValueError) as err:
            log(f"word table {self.path} unreadable ({err}); recall works without it")
            return sections
        current: dict[str, str] = {}
        for line in text.split("\n"):
            if line.startswith("[") and line.endswith("]"):
                current = sections.setdefault(line[1:-1], {})
            elif line and not line.startswith("#"):
                key, _, rest = line.partition("\t")
                current[key] = rest
        return sections

    @property
    def available(self) -> bool:
        """Whether the word table file could be read and has query-side entries."""
        return bool(self.sections().get("query"))

    def header(self) -> str:
        """The file's first line: what it was built from."""
        import gzip
        try:
            with gzip.open(self.path, "rt", encoding="utf-8") as fh:  # type: ignore[arg-type]
                return fh.readline().lstrip("# ").strip()
        except (OSError, TypeError, EOFError):
            return ""

    def _lookup(self, section: str, key: str) -> tuple[tuple[str, float], ...]:
        cache_key = (section, key)
        found = self._parsed.get(cache_key)
        if found is None:
            raw = self.sections().get(section, {}).get(key)
            found = ()
            if raw:
                pairs = (item.rpartition("|") for item in raw.split("\t"))
                found = tuple((stem_phrase(w), int(v) / 100) for w, _, v in pairs if stem_phrase(w))
            if len(self._parsed) < 200_000:
                self._parsed[cache_key] = found
        return found

    def base_forms(self, word: str) -> list[str]:
        """The word and the table keys it may be an inflection of (WordNet's rules and exception lists)."""
        word = fold_accents(word)
        keys = self.sections().get("query", {})
        forms = [word] + self._lookup_forms(word)
        forms += [word[:-len(end)] + base for end, base in _DETACH
                  if word.endswith(end) and len(word) - len(end) >= 2 and word[:-len(end)] + base in keys]
        return list(dict.fromkeys(forms))

    def _lookup_forms(self, word: str) -> list[str]:
        raw = self.sections().get("forms", {}).get(word)
        return [item.rpartition("|")[0] for item in raw.split("\t")] if raw else []

    def related(self, phrase: str) -> dict[str, float]:
        """Stem phrase -> best weight of the words related to `phrase` (a word or 2-3 words): its synonyms,
        derived, broader and narrower words, and the places that are part of it (read from [index] backwards:
        "south africa" finds "cape town", so a fact is generalised without any cost when it is written)."""
        found: dict[str, float] = {}
        forms = self.base_forms(phrase) if " " not in phrase else [fold_accents(phrase)]
        for form in forms:
            self.narrower()
            for words, weight in self._lookup("query", form) + self._lookup("narrower", form):
                if found.get(words, 0.0) < weight:
                    found[words] = weight
        return found

    def narrower(self) -> dict[str, str]:
        """[index] inverted, as raw lines like the others: broader word -> the words that generalise to it."""
        if self._narrower is None:
            with self._lock:
                if self._narrower is None:
                    inverse: dict[str, list[str]] = {}
                    for key, raw in self.sections().get("index", {}).items():
                        for item in raw.split("\t"):
                            word, _, percent = item.rpartition("|")
                            inverse.setdefault(word, []).append(f"{key}|{percent}")
                    self._narrower = {w: "\t".join(items) for w, items in inverse.items()}
                    self.sections()["narrower"] = self._narrower
        return self._narrower

    def is_phrase(self, words: str) -> bool:
        """A 2-3 word key of the table ("south africa", "give back")."""
        return words in self.sections().get("query", {}) or words in self.narrower()


def word_table_status() -> str:
    """One line for --lint: is the word table there, and what it was built from."""
    table = word_table()
    if not table.available:
        return (f"word table: {WORD_TABLE_FILE} not found or unreadable; recall works, but finds paraphrases "
                "(a question in other words than the fact) less often. Reinstall graphmem to restore it.")
    return f"word table: {table.path} ({len(table.sections()['query']):,} words and phrases; {table.header()[:80]}…)"


@functools.lru_cache(maxsize=None)
def word_table() -> WordTable:
    """The one word table, found beside the server or where the package installs its data."""
    return WordTable(asset_path(WORD_TABLE_FILE))


EMBED_DIM = 1 << 18


def _feature_bucket(feature: str) -> tuple[int, float]:
    h = zlib.crc32(feature.encode("utf-8", "surrogatepass"))
    return h % EMBED_DIM, (1.0 if (h >> 31) & 1 else -1.0)


def embed(text: str) -> dict[int, float]:
    """Deterministic hashing embedder: stemmed words, word bigrams and character 3-grams, L2-normalised.

    No model, no network: partial words and near-phrasings land near each other."""
    words = [stem(w) for w in tokenize(text) if w not in STOP_WORDS]
    vec: dict[int, float] = {}
    for w in words:
        for bucket, value in _word_features(w):
            vec[bucket] = vec.get(bucket, 0.0) + value
    for a, b in zip(words, words[1:]):
        bucket, sign = _feature_bucket(f"b:{a}_{b}")
        vec[bucket] = vec.get(bucket, 0.0) + sign * 0.7
    norm = math.sqrt(sum(v * v for v in vec.values())) or 1.0
    return {k: v / norm for k, v in vec.items()}


_WORD_FEATURES: dict[str, list[tuple[int, float]]] = {}


def _word_features(word: str) -> list[tuple[int, float]]:
    """A word's own hashed features (the word and its character 3-grams): words repeat, so they are cached."""
    cached = _WORD_FEATURES.get(word)
    if cached is None:
        padded = f"#{word}#"
        grams = [padded[i:i + 3] for i in range(len(padded) - 2)]
        bucket, sign = _feature_bucket("w:" + word)
        cached = [(bucket, sign)]
        for g in grams:
            bucket, sign = _feature_bucket("c:" + g)
            cached.append((bucket, sign * 0.6 / math.sqrt(len(grams))))
        if len(_WORD_FEATURES) < 200_000:
            _WORD_FEATURES[word] = cached
    return cached


def cosine(a: dict[int, float], b: dict[int, float]) -> float:
    """Cosine of two sparse vectors that are already unit length (the hashing embedder's)."""
    if len(a) > len(b):
        a, b = b, a
    return sum(v * b.get(k, 0.0) for k, v in a.items())


def short(text: str, limit: int = 160) -> str:
    """A text on one line, cut with an ellipsis past `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


# ── optional real embeddings: an OpenAI-compatible /v1/embeddings endpoint (MEMORY_EMBEDDINGS_URL), urllib ──
EMBED_QUERY_TIMEOUT = 2.0   # s to connect and per read, for a query's vector (issue 11: short; a local Ollama
                            # answers in tens of ms when warm, and a read must never wait long)
EMBED_BATCH_TIMEOUT = 10.0  # s for one batch of facts (a guess: 64 short facts take ~1 s on a CPU model)
EMBED_QUERIES_KEPT = 256    # query vectors kept (a guess: an agent's session repeats far fewer)
EMBED_BATCH = 64            # facts per request (a guess; OpenAI takes up to 2,048 inputs, Ollama any number)
EMBED_BACKOFF = 60.0        # s without calling an endpoint after it failed (a guess: a model server restarting)
EMBED_FILL_SECONDS = 3.0    # s per call spent embedding facts that have no vector yet; later calls do the rest
EMBED_MAX_CHARS = 2000      # characters sent per text (facts are <= MEMORY_OBS_MAX_CHARS, 300 by default)
EMBED_MAX_ANSWER = 64 << 20  # bytes read from one answer: 64 facts x 4,096 dimensions as JSON is ~6 MB
EMBED_MAX_DIM = 16384


class EmbeddingError(Exception):
    """No vectors from the endpoint: unreachable, slow, an HTTP error, or an answer that is not vectors."""

    def __init__(self, message: str, slow: bool = False):
        super().__init__(message)
        self.slow = slow  # no answer in time (it may be working): a smaller batch may do


def fact_hash(text: str) -> str:
    """The key of a fact's text in the embeddings cache."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def unit_vector(values: Any, dim: int = 0) -> array.array:
    """A list of numbers as a unit-length array('f'); EmbeddingError when it is not one (of `dim` numbers)."""
    if not isinstance(values, list) or not 0 < len(values) <= EMBED_MAX_DIM or (dim and len(values) != dim):
        size = len(values) if isinstance(values, list) else type(values).__name__
        raise EmbeddingError(f"a vector of {size} numbers" + (f", where earlier ones had {dim}" if dim else ""))
    if not all(type(v) in (int, float) for v in values):
        raise EmbeddingError("a vector holding something other than numbers")
    norm = math.sqrt(math.fsum(v * v for v in values))
    if not math.isfinite(norm) or norm == 0.0:
        raise EmbeddingError("a vector of zero or infinite length")
    return array.array("f", [v / norm for v in values])


def dot(a: array.array, b: array.array) -> float:
    """Cosine of two unit vectors."""
    return sum(map(operator.mul, a, b))


class EmbeddingClient:
    """Calls the embeddings endpoint with urllib. After a failure it is left alone for EMBED_BACKOFF seconds:
    reads rank by words meanwhile, and say so once per answer. The key is sent, never logged or shown."""

    def __init__(self, settings: Settings):
        parts = urllib.parse.urlsplit(settings.embeddings_url)
        path = parts.path.rstrip("/")
        path = path if path.endswith("/embeddings") else path + "/embeddings"
        # urllib would take user:password@ for part of the host name ("Name or service not known"): send it as
        # Basic auth instead, as curl does, and keep it out of the URL
        netloc = parts.netloc.rpartition("@")[2]
        self.url = urllib.parse.urlunsplit(parts._replace(path=path, netloc=netloc))
        userinfo = parts.netloc.rpartition("@")[0]
        import base64
        self._basic = base64.b64encode(urllib.parse.unquote(userinfo).encode()).decode() if userinfo else ""
        self.label = _url_label(self.url)
        self.model = settings.embeddings_model
        self._key = settings.embeddings_key
        self.dim = 0             # dimensions of the first vectors received; others are refused
        self.problem = ""        # why the last request failed
        self.failed_at = 0.0     # time.monotonic() of that failure
        host = urllib.parse.urlsplit(self.url).hostname or ""
        loopback = host in ("localhost", "::1") or host.startswith("127.")
        handlers = [urllib.request.ProxyHandler({})] if loopback else []  # a proxy setting must not catch localhost
        self._opener = urllib.request.build_opener(*handlers)

    def available(self) -> bool:
        """Whether the endpoint may be called now (not within EMBED_BACKOFF of a failure)."""
        return not self.problem or time.monotonic() - self.failed_at >= EMBED_BACKOFF

    def embed(self, texts: list[str], timeout: float) -> list[array.array]:
        """Unit vectors for texts, in order; EmbeddingError (and a back-off) when the endpoint fails."""
        if not self.available():
            raise EmbeddingError(self.problem)
        try:
            vectors = self._parse(self._post(texts, timeout), len(texts))
        except EmbeddingError as err:
            self.problem, self.failed_at = str(err), time.monotonic()
            log(f"warning: embeddings endpoint {self.label}: {err} ({len(texts)} texts); ranking by words only "
                f"for {EMBED_BACKOFF:.0f} s")
            raise
        self.problem = ""
        return vectors

    def _post(self, texts: list[str], timeout: float) -> bytes:
        body = json.dumps({"model": self.model, "input": [t[:EMBED_MAX_CHARS] for t in texts]})
        body = body.encode("utf-8", "replace")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        elif self._basic:
            headers["Authorization"] = f"Basic {self._basic}"
        request = urllib.request.Request(self.url, body, headers, method="POST")
        try:
            with self._opener.open(request, timeout=timeout) as answer:
                return answer.read(EMBED_MAX_ANSWER)
        except urllib.error.HTTPError as err:
            raise EmbeddingError(f"HTTP {err.code} {err.reason}") from None
        except (TimeoutError, socket.timeout):
            raise EmbeddingError(f"no answer within {timeout:g} s", slow=True) from None
        except urllib.error.URLError as err:
            reason = err.reason
            if isinstance(reason, (TimeoutError, socket.timeout)):
                raise EmbeddingError(f"no answer within {timeout:g} s", slow=True) from None
            raise EmbeddingError(f"unreachable ({reason})") from None
        except Exception as err:  # the network boundary: a broken answer is a failed call, never a crash
            raise EmbeddingError(f"{type(err).__name__}: {err}") from None

    def _parse(self, raw: bytes, count: int) -> list[array.array]:
        try:
            data = json.loads(raw)["data"]
            items = sorted(data, key=lambda d: d.get("index", 0)) if all(isinstance(d, dict) for d in data) else None
        except (ValueError, KeyError, TypeError, AttributeError):
            raise EmbeddingError("the answer is not an embeddings list (JSON with data[].embedding)") from None
        if items is None or len(items) != count:
            raise EmbeddingError(f"{len(data) if isinstance(data, list) else 'no'} vectors for {count} texts")
        vectors = [unit_vector(item.get("embedding"), self.dim) for item in items]
        self.dim = self.dim or len(vectors[0])
        return vectors


# ════════════════════════════════════════════════════════════════════════════
# 6. Search and recall: index, term matching, ranking, did-you-mean
# ════════════════════════════════════════════════════════════════════════════

# ── tuned constants of recall, in one block: each with where its value came from ──
# "LoCoMo tune half" = LoCoMo-10 files 26, 30, 41, 42, 43 (tools/bench.py --section locomo); files 44, 47-50
# are only reported. Values marked (LoCoMo-10) were chosen on all ten files before the split existed.
PREFIX_WEIGHT = 0.6       # "configuration" meeting "config" through a 5-letter prefix (a guess, kept: corpus keyword)
SYNONYM_WEIGHT = 0.7      # "rollout" meeting "deploy" through SYNONYM_GROUPS (a guess)
BM25_K1, BM25_B = 1.2, 0.5  # BM25's usual k1; b halved: facts are short and alike in length (LoCoMo-10)
EMBED_WEIGHT = 0.25       # share of the hashing embedder's cosine in a fact's score (LoCoMo-10)
ANSWER_TYPE_BOOST = 0.3   # "when ..." facts carrying a time score this much more (LoCoMo-10)
RANK_POOL = 400           # candidates scored in full (embedder, strength); the rest only counted (latency at 100k)
# Share of a strong match's score given to a matching fact 1 and 2 places after / before it. LoCoMo-10 turn
# recall: 0.7 next to it only, both ways, 0.561; also two away 0.579; stronger after 0.597; three away: no gain.
LIFT_AFTER = (0.85, 0.8)
LIFT_BEFORE = (0.6, 0.6)
GATE_RATIO = 0.35         # a fact scoring under this share of the best match is padding, not an answer (LoCoMo-10)
NAME_ONLY_SHARE = 0.3     # a fact matching only the entity a question names, not its specific words, scores at most
                          # this share of the best other fact: under GATE_RATIO, so it only fills (issue 10)
CONTEXT_ENTITIES = 2      # the leading entities whose other facts may fill budget left over (LoCoMo-10)
CONTEXT_FACTS = 6
ANSWER_CONTEXT_FACTS = 3  # facts of the leading entity carrying what the question asks for (LoCoMo-10)
# The word table (notes/relevance.md: measured in a spike on data outside the project, then checked on the
# LoCoMo tune half and the corpus; none changed for the report half).
TABLE_WEIGHT = 0.6        # a related word counts 0.6 x its table weight (spike: 0.6 best of 0.4 / 0.6 / 0.8)
TABLE_IN_GRAPH = 0.5      # ... and half that when the graph has the query word itself (spike: without it, LoCoMo fell)
TABLE_NEIGHBOURS = 24     # related words kept per query word (table: <= 20 per key, plus narrower places)
TABLE_MIN_WEIGHT = 0.15   # weaker relations add noise, not answers (tune half)
# Saying when nothing matches well: the best fact covers under this share of the query's weight (idf) with
# the query's own words (a related word counts at its weight).
# corpus: flags 13 of 18 misses, 12 of 108 hits; LoCoMo tune half: 52 of 256 misses, 34 of 504 hits
STRONG_COVERAGE = 0.35
# Optional real embeddings (MEMORY_EMBEDDINGS_URL), measured with all-MiniLM-L6-v2 served by tools/embed_server.py:
DENSE_WEIGHT = 0.5        # share of the cosine (query vs fact vector) in a fact's score. LoCoMo tune half, turn
                          # recall at 200 tokens: words only 0.602; 0.3 0.614, 0.4 0.617, 0.5 0.627, 0.6 0.626,
                          # 0.7 0.624; corpus paraphrases 16 -> 19/22/24/25/29 of 32 at 403/427/458/526/624 tokens
DENSE_POOL = 40           # facts with the highest cosine added to the scored pool even when no word matches (a guess)
DENSE_SCAN_MAX = 5000     # facts compared with the query in pure Python (5k facts: recall p50 362 ms, busy machine);
                          # a bigger graph compares only the lexical pool: no fact found by meaning alone


@dataclasses.dataclass
class EntityDoc:
    """What search needs of one entity, rebuilt only when that entity changes."""
    name: str
    etype: str
    head: list[str]            # stems of name and type
    rels: list[str]            # stems of connected relation types
    facts: list[str]
    fact_stems: list[str]      # ' s1 s2 ': substring ' term' is a word-prefix match
    fact_lens: list[int]
    blob: str                  # lower-case name, type and facts: substring search
    rels_blob: str             # lower-case connected relation types
    fids: list[int] = dataclasses.field(default_factory=list)
    _ref_size: int = -1

    @property
    def ref_size(self) -> int:
        """Characters this entity takes in the reference server's pretty JSON."""
        if self._ref_size < 0:
            self._ref_size = pretty_item_size({"name": self.name, "entityType": self.etype, "observations": self.facts})
        return self._ref_size

    @classmethod
    def build(cls, entity: Entity, rel_types: list[str]) -> "EntityDoc":
        """The index's view of one entity: stems of its name, type and facts, and the blob substring search reads."""
        fact_stems = [stems_line(o) for o in entity.observations]
        blob = "\n".join([entity.name, entity.entityType, *entity.observations]).lower()
        return cls(entity.name, entity.entityType, stems_line(f"{entity.name} {entity.entityType}").split(),
                   stems_line(" ".join(rel_types)).split(), list(entity.observations), fact_stems,
                   [max(1, st.count(" ") - 1) for st in fact_stems], blob, "\n".join(rel_types).lower())


@dataclasses.dataclass
class Term:
    """A query word (or a 2-3 word phrase the word table knows) and the ways a fact can match it."""
    word: str
    variants: list[tuple[str, float]]   # (stem prefix, weight): exact stem, shorter prefix, software synonyms
    related: list[tuple[str, float]] = dataclasses.field(default_factory=list)  # word table: whole stem phrases
    idf: float = 0.0
    phrase: bool = False                # a phrase term adds to its words; it is not one of the query's words
    names: bool = False                 # matched an entity's name, type or relation types (set by _lexical)

    def weight_in(self, stems: str) -> float:
        """Best weight of any way this term matches a fact's ' s1 s2 ' stems line."""
        best = 0.0
        for prefix, weight in self.variants:
            if weight > best and " " + prefix in stems:
                best = weight
        for words, weight in self.related:
            if weight > best and " " + words + " " in stems:
                best = weight
        return best


# What a question asks for, read from its question words: "when ..." wants a fact that carries a time,
# "how many ..." one with a number, "where ..." a place, path or address. Among the facts that match the
# question's words, those that carry what it asks for score ANSWER_TYPE_BOOST higher; nothing else is added.
_TIME_WORDS = (r"yesterday|today|tonight|tomorrow|ago|last|next|recently|earlier|later|since|until|before|after|"
               r"morning|evening|night|noon|midnight|day|days|week|weeks|weekend|month|months|year|years|decade|"
               r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|may|june|"
               r"july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|"
               r"spring|summer|autumn|fall|winter|quarter|q[1-4]|daily|weekly|monthly|yearly|annually")
ANSWER_TYPES = [  # (the question asks for, a fact carries it)
    (re.compile(r"^\s*when\b|\b(?:what|which)\s+(?:time|date|day|year|month|week)\b|\bhow\s+long\s+ago\b", re.I),
     re.compile(rf"\b(?:{_TIME_WORDS})\b|\b\d{{4}}-\d\d|\b\d{{1,2}}[:/.]\d\d|\b(?:19|20)\d\d\b", re.I)),
    (re.compile(r"\bhow\s+(?:many|much|often|long|far|big|old)\b", re.I),
     re.compile(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|"
                r"fifty|hundred|thousand|million|billion|dozen|once|twice|half)\b", re.I)),
    (re.compile(r"^\s*where\b|\b(?:what|which)\s+(?:city|country|place|town|state|folder|directory|path|file|"
                r"url|host|server)\b", re.I),
     re.compile(r"\b(?:in|at|to|from|near|around|under|inside|visit(?:ed|ing)?)\s+(?:the\s+)?[A-Z][\w-]+|"
                r"\w/[\w.-]|\w://|\b[\w-]+\.(?:com|org|net|io|dev|local|internal)\b")),
]


def wanted_mention(query: str) -> re.Pattern[str] | None:
    """What a fact answering this question carries (a time, a number, a place), if its question words say."""
    return next((carries for asks, carries in ANSWER_TYPES if asks.search(query)), None)


def query_terms(query: str, occurs: Callable[[str], bool] = lambda s: False) -> list[Term]:
    """The query's content words, each with its variants and related words. Two adjacent words that join
    into a word with synonyms ("roll out" -> rollout -> deploy) also count as that word; 2-3 adjacent words
    the word table knows as one ("south africa") are a phrase term of their own. `occurs(stem)`: the graph
    has the word itself, so its related words count for less."""
    tokens = tokenize(query)
    words = list(dict.fromkeys(tokens))
    content = [w for w in words if w not in STOP_WORDS] or words
    compounds = [a + b for a, b in zip(tokens, tokens[1:]) if len(a) > 1 and len(b) > 1]
    content += [c for c in dict.fromkeys(compounds) if c not in content and stem(c) in SYNONYMS]
    terms = []
    for word in content:
        s = stem(word)
        variants = [(s, 1.0)]
        if len(s) >= 7:
            variants.append((s[:5], PREFIX_WEIGHT))
        variants += [(syn, SYNONYM_WEIGHT) for syn in SYNONYMS.get(s, ())]
        terms.append(Term(word, variants, related_words(word, {v for v, _ in variants}, occurs(s))))
    for phrase, key in table_phrases(tokens):
        own = stem_phrase(phrase)
        terms.append(Term(phrase, [], [(own, 1.0)] + related_words(key, {own}, occurs(own)), phrase=True))
    return terms


def related_words(word: str, own: set[str], in_graph: bool) -> list[tuple[str, float]]:
    """The word table's neighbours of a query word, strongest first, at TABLE_WEIGHT x their weight (times
    TABLE_IN_GRAPH when the graph has the word itself), without the word's own forms and stop words."""
    factor = TABLE_WEIGHT * (TABLE_IN_GRAPH if in_graph else 1.0)
    picked = [(words, factor * w) for words, w in word_table().related(word).items()
              if words not in own and words not in STOP_WORDS and factor * w >= TABLE_MIN_WEIGHT]
    return sorted(picked, key=lambda item: (-item[1], item[0]))[:TABLE_NEIGHBOURS]


def table_phrases(tokens: list[str]) -> list[tuple[str, str]]:
    """(words, table key) for runs of 2-3 adjacent query words the word table knows as one ("south africa";
    "giving back" as "give back", "purchase records" as "purchase record": first or last word inflected)."""
    table = word_table()
    found = []
    for n in (2, 3):
        for i in range(len(tokens) - n + 1):
            run = tokens[i:i + n]
            if run[0] in STOP_WORDS or run[-1] in STOP_WORDS:
                continue  # "go to", "set up": a particle phrase relates to too much (LoCoMo tune half)
            keys = [" ".join([base] + run[1:]) for base in table.base_forms(run[0])] + \
                [" ".join(run[:-1] + [base]) for base in table.base_forms(run[-1])[1:]]
            key = next((k for k in keys if table.is_phrase(k)), None)
            if key:
                found.append((" ".join(run), key))
    return list(dict.fromkeys(found))


@dataclasses.dataclass
class ScoredFact:
    """A fact with its score from rank_facts, and which query words it matched."""
    entity: str
    text: str
    score: float
    lexical: float
    matched: list[str]
    coverage: float = 0.0      # share of the query's weight (idf) its words and related words match here
    name_only: bool = False    # matched only by the name of its entity, which has facts with the query's other words


@dataclasses.dataclass
class Ranking:
    """What rank_facts found: the best candidate facts, the query's terms, and how many facts matched at all."""
    facts: list[ScoredFact]    # the best candidates, best first
    terms: list[Term]
    total: int                 # every fact that matched at least one term
    weak: int                  # matched, but under the relevance gate
    unranked: int = 0          # matched above the gate but past the scored pool: counted as left out
    wanted: re.Pattern[str] | None = None  # what the question asks for (a time, a number, a place)
    coverage: float = 0.0      # share of the query's weight the best facts match (STRONG_COVERAGE)

    @property
    def strong(self) -> bool:
        """Some fact matches the query well, not just one of its words or through related words."""
        return bool(self.facts) and self.coverage >= STRONG_COVERAGE





def lift_neighbours(place: dict[tuple[int, int], ScoredFact], liftable: set[tuple[int, int]]) -> None:
    """A fact written up to two places after or before a strong match, that matches the query itself too, is
    likely part of the same answer (facts are written in batches: a question and its reply, a decision and
    its reason; the reply comes after, hence the stronger lift): it scores at least LIFT_AFTER[d - 1] (or
    LIFT_BEFORE[d - 1]) x that match. Facts matching no query word are never lifted."""
    original = {key: fact.score for key, fact in place.items()}
    for (doc, i), score in original.items():
        for distance, (after, before) in enumerate(zip(LIFT_AFTER, LIFT_BEFORE), 1):
            for j, lift in ((i + distance, after), (i - distance, before)):
                neighbour = place.get((doc, j)) if (doc, j) in liftable else None
                if neighbour is not None and neighbour.score < lift * score:
                    neighbour.score = lift * score


class PrefixIndex:
    """word -> ids, with a sorted vocabulary so a prefix finds its words by bisection."""

    def __init__(self) -> None:
        self.postings: dict[str, set[int]] = {}
        self._vocab: list[str] = []
        self._sorted = True

    def add(self, word: str, ident: int) -> None:
        """Index `ident` under `word`."""
        bucket = self.postings.get(word)
        if bucket is None:
            bucket = self.postings[word] = set()
            self._sorted = False
        bucket.add(ident)

    def discard(self, word: str, ident: int) -> None:
        """Remove `ident` from `word`'s postings."""
        bucket = self.postings.get(word)
        if bucket is not None:
            bucket.discard(ident)

    def words_with_prefix(self, prefix: str) -> Iterator[str]:
        """The indexed words that start with `prefix`, in sorted order."""
        if not self._sorted:
            self._vocab = sorted(self.postings)
            self._sorted = True
        i = bisect.bisect_left(self._vocab, prefix)
        while i < len(self._vocab) and self._vocab[i].startswith(prefix):
            yield self._vocab[i]
            i += 1

    def match(self, term: "Term") -> dict[int, float]:
        """id -> best weight of any variant of the term (a variant matches the words it is a prefix of)."""
        found: dict[int, float] = {}
        for prefix, weight in term.variants:
            for word in self.words_with_prefix(prefix):
                for i in self.postings[word]:
                    if found.get(i, 0.0) < weight:
                        found[i] = weight
        return found


class SearchIndex:
    """Inverted index over fact stems, updated per entity when the graph changes."""

    def __init__(self) -> None:
        self.docs: list[EntityDoc] = []
        self._cache: dict[tuple[str, int], tuple[tuple, EntityDoc]] = {}
        self._generation = -1
        self.facts_ix = PrefixIndex()      # fact stems -> fact ids
        self.heads_ix = PrefixIndex()      # name and type stems -> entity ids
        self.rels_ix = PrefixIndex()       # relation type stems -> entity ids
        self.fact_of: dict[int, tuple[EntityDoc, int]] = {}
        self.doc_of: dict[int, EntityDoc] = {}
        self._next_id = 0
        self.fact_total = 0
        self.len_total = 0
        self._named: dict[str, list[EntityDoc]] = {}
        self._named_generation = -2
        self._vectors: dict[tuple[str, str], dict[int, float]] = {}
        self._finder: tuple[dict[str, Entity], NameFinder] | None = None
        self._touching: tuple[int, dict[str, list[int]]] | None = None

    @property
    def generation(self) -> int:
        """The graph version (GraphStore.generation) the index was last refreshed with."""
        return self._generation

    @property
    def avg_len(self) -> float:
        return self.len_total / self.fact_total if self.fact_total else 1.0

    def refresh(self, graph: Graph, generation: int) -> None:
        """Bring the index up to `graph` at `generation`: only entities that changed are re-indexed."""
        if generation == self._generation:
            return
        rel_types: dict[str, list[str]] = {}
        for r in graph.relations:
            rel_types.setdefault(r.frm, []).append(r.relationType)
            if r.to != r.frm:
                rel_types.setdefault(r.to, []).append(r.relationType)
        docs, cache, seen = [], {}, {}
        for entity in graph.entities:
            key = (entity.name, seen.get(entity.name, 0))
            seen[entity.name] = key[1] + 1
            rels = rel_types.get(entity.name, [])
            signature = (entity.entityType, tuple(entity.observations), tuple(rels))
            hit = self._cache.pop(key, None)
            if hit and hit[0] == signature:
                doc = hit[1]
            else:
                if hit:
                    self._remove(hit[1])
                doc = EntityDoc.build(entity, rels)
                self._add(doc)
            cache[key] = (signature, doc)
            docs.append(doc)
        for _, doc in self._cache.values():  # entities that are gone
            self._remove(doc)
        self.docs, self._cache, self._generation = docs, cache, generation
        if len(self._vectors) > 4 * max(self.fact_total, 1000):
            self._vectors.clear()

    def _add(self, doc: EntityDoc) -> None:
        doc_id = self._next_id
        self._next_id += 1
        self.doc_of[doc_id] = doc
        doc.fids = [doc_id]
        for stem_ in set(doc.head):
            self.heads_ix.add(stem_, doc_id)
        for stem_ in set(doc.rels):
            self.rels_ix.add(stem_, doc_id)
        for i, stems in enumerate(doc.fact_stems):
            fid = self._next_id
            self._next_id += 1
            doc.fids.append(fid)
            self.fact_of[fid] = (doc, i)
            for stem_ in set(stems.split()):
                self.facts_ix.add(stem_, fid)
            self.fact_total += 1
            self.len_total += doc.fact_lens[i]

    def _remove(self, doc: EntityDoc) -> None:
        doc_id, fids = doc.fids[0], doc.fids[1:]
        self.doc_of.pop(doc_id, None)
        for stem_ in set(doc.head):
            self.heads_ix.discard(stem_, doc_id)
        for stem_ in set(doc.rels):
            self.rels_ix.discard(stem_, doc_id)
        for i, fid in enumerate(fids):
            for stem_ in set(doc.fact_stems[i].split()):
                self.facts_ix.discard(stem_, fid)
            self.fact_of.pop(fid, None)
            self.fact_total -= 1
            self.len_total -= doc.fact_lens[i]

    def vector(self, entity: str, text: str) -> dict[int, float]:
        """The hashing embedder's vector of one fact, cached by (entity, text)."""
        key = (entity, text)
        vec = self._vectors.get(key)
        if vec is None:
            vec = self._vectors[key] = embed(f"{text} {entity}")
        return vec

    # ── fact ranking (recall, and the order of search_nodes): four named stages ──
    def rank_facts(self, query: str, strength: Callable[[str, str], float],
                   penalty: Callable[[str, str], float] | None = None, dense: "Dense | None" = None) -> Ranking:
        """Lexical match (words, related words, then entity name/type and relation types as context), the
        facts nearest in meaning when real embeddings are on (dense), a scored pool, re-ranked with the
        embedders, each fact's strength and its anchor's state, then the relevance gate."""
        terms = query_terms(query, self.has_stem)
        if not terms or not self.fact_total:
            return Ranking([], terms, 0, 0)
        acc, own = self._lexical(terms)
        pool = self._pool(acc) if acc else []
        if dense:
            near = self._semantic(dense, self.fact_of if self.fact_total <= DENSE_SCAN_MAX else
                                  [fid for fid, _, _ in pool])
        else:
            near = {}
        if not acc and not near:
            return Ranking([], terms, 0, 0)
        in_pool = {fid for fid, _, _ in pool}
        extra = [(fid, 0.0, 0.0) for fid in heapq.nlargest(DENSE_POOL, near, key=near.__getitem__)
                 if fid not in in_pool and fid not in acc and near[fid] > 0.0]
        scored = self._rescore(query, terms, pool + extra, own, strength, penalty, near if dense else None)
        ranking = self._gate(scored, terms, acc, pool, wanted_mention(query))
        ranking.total += len(extra)
        ranking.coverage = max(f.coverage for f in scored[:5])
        return ranking

    def has_stem(self, stem_: str) -> bool:
        """The graph's facts have this word (a stem) or phrase (stems joined by spaces)."""
        return bool(self.facts_ix.postings.get(stem_)) if " " not in stem_ else bool(self._whole(stem_))

    def _whole(self, words: str) -> set[int]:
        """Facts that have these stems as whole, consecutive words: never as a prefix."""
        parts = words.split()
        found = self.facts_ix.postings.get(parts[0], set())
        if len(parts) == 1 or not found:
            return found
        for part in parts[1:]:
            found = found & self.facts_ix.postings.get(part, set())
        needle = f" {words} "
        return {fid for fid in found if needle in self._stems_of(fid)}

    def _stems_of(self, fid: int) -> str:
        doc, i = self.fact_of[fid]
        return doc.fact_stems[i]

    def _lexical(self, terms: list[Term]) -> tuple[dict[int, float], list[dict[int, float]]]:
        """Stage 1: fid -> sum of idf x best weight per term, and per term the fact's own best weight (its words
        or related words, not its entity's name). idf counts only the term's own matches, so a rare word with
        common related words stays rare."""
        n = self.fact_total
        acc: dict[int, float] = {}
        own: list[dict[int, float]] = []
        for term in terms:
            weights = self.facts_ix.match(term) if term.variants else {}
            found = len(self._whole(term.related[0][0])) if term.phrase else len(weights)  # a phrase scores
            term.idf = math.log(1.0 + (n - found + 0.5) / (found + 0.5))                    # only through its relatives
            for words, w in term.related[1:] if term.phrase else term.related:
                for fid in self._whole(words):
                    if weights.get(fid, 0.0) < w:
                        weights[fid] = w
            own.append(dict(weights))
            self._add_context(term, weights)
            idf = term.idf
            for fid, w in weights.items():
                acc[fid] = acc.get(fid, 0.0) + idf * w
        return acc, own

    def _add_context(self, term: Term, weights: dict[int, float]) -> None:
        """Facts of an entity whose name or type (0.5) or relation types (0.3) match the term."""
        for context, factor in ((self.heads_ix, 0.5), (self.rels_ix, 0.3)):
            named = context.match(term) if term.variants else {}
            if len(named) > max(50, len(self.doc_of) // 50):
                continue  # a word in a fifth of all names or types ("service") says nothing about a fact
            term.names = term.names or bool(named)
            for doc_id, w in named.items():
                doc = self.doc_of.get(doc_id)
                for fid in doc.fids[1:] if doc else ():
                    if weights.get(fid, 0.0) < factor * w:
                        weights[fid] = factor * w

    def _semantic(self, dense: "Dense", fids: Iterable[int]) -> dict[int, float]:
        """Stage 1b (real embeddings only): fid -> cosine of the query's vector and the fact's, for these facts
        (all of them up to DENSE_SCAN_MAX) that have a vector of the query's size (facts still waiting for
        theirs rank by words only)."""
        qvec, vector_of = dense
        size, near = len(qvec), {}
        for fid in fids:
            doc, i = self.fact_of[fid]
            vec = vector_of(doc.facts[i])
            if vec is not None and len(vec) == size:
                near[fid] = dot(qvec, vec)
        return near

    def _pool(self, acc: dict[int, float]) -> list[tuple[int, float, float]]:
        """Stage 2: BM25 length normalisation for the raw top (it moves a score by well under 3x), then the
        RANK_POOL best, scored in full: (fid, normalised, raw). Updates acc in place."""
        k1, b, avg = BM25_K1, BM25_B, self.avg_len
        raw_top = heapq.nlargest(3 * RANK_POOL, acc.items(), key=lambda kv: kv[1]) if len(acc) > 3 * RANK_POOL \
            else list(acc.items())
        for fid, value in raw_top:
            doc, i = self.fact_of[fid]
            acc[fid] = value * (k1 + 1) / (1 + k1 * (1 - b + b * doc.fact_lens[i] / avg))
        return heapq.nlargest(RANK_POOL, ((fid, acc[fid], raw) for fid, raw in raw_top), key=lambda kv: kv[1])

    def _rescore(self, query: str, terms: list[Term], pool: list[tuple[int, float, float]], own: list[dict[int, float]],
                 strength: Callable[[str, str], float], penalty: Callable[[str, str], float] | None,
                 near: dict[int, float] | None = None) -> list[ScoredFact]:
        """Stage 3: blend in the hashing embedder (and the real one's cosine, when on), strength and the
        stale-anchor penalty; lift the neighbours of strong matches; favour facts carrying what the question
        asks for. Best first."""
        best = pool[0][1] or 1.0
        weight = sum(t.idf for t in terms) or 1.0
        qvec = embed(query)
        wanted = wanted_mention(query)
        scored = []
        place: dict[tuple[int, int], ScoredFact] = {}
        own_match: set[tuple[int, int]] = set()  # the fact's own words match (not just its entity's name)
        for fid, lexical, raw in pool:
            doc, i = self.fact_of[fid]
            text = doc.facts[i]
            similarity = max(cosine(qvec, self.vector(doc.name, text)), 0.0)
            score = (1 - EMBED_WEIGHT) * lexical / best + EMBED_WEIGHT * similarity
            if near is not None:
                score = (1 - DENSE_WEIGHT) * score + DENSE_WEIGHT * max(near.get(fid, 0.0), 0.0)
            score *= 0.8 + 0.2 * strength(doc.name, text)
            if penalty:
                score *= penalty(doc.name, text)
            matched = [t.word for t, mine in zip(terms, own) if not t.phrase and (mine.get(fid, 0.0) >= 0.5
                       or any(p in doc.head for p, w in t.variants if w >= 0.6))]
            scored.append(ScoredFact(doc.name, text, score, lexical, matched, raw / weight))
            place[(id(doc), i)] = scored[-1]
            if any(fid in mine for mine in own):
                own_match.add((id(doc), i))
        fids = [fid for fid, _, _ in pool]
        name_only = self._name_only(terms, own, fids, near)
        lift_neighbours(place, own_match - {key for key, fid in zip(place, fids) if fid in name_only})
        if wanted:  # after the lift: a lifted reply that carries the answer counts as one
            for fact in scored:
                if wanted.search(fact.text):
                    fact.score *= 1 + ANSWER_TYPE_BOOST
        if name_only:
            cap = NAME_ONLY_SHARE * max(f.score for fid, f in zip(fids, scored) if fid not in name_only)
            for fid, fact in zip(fids, scored):
                if fid in name_only:
                    fact.score, fact.name_only = min(fact.score, cap), True
        scored.sort(key=lambda f: (-f.score, f.entity, f.text))
        return scored

    def _name_only(self, terms: list[Term], own: list[dict[int, float]], fids: list[int],
                   near: dict[int, float] | None) -> set[int]:
        """Stage 3a: a question that names an entity and asks something specific ("billing-engine retry
        backoff"): facts matching the specific words (the query words naming no entity) come first. The facts
        returned here belong to an entity that has such a fact, match only through their entity's name (no
        query word in their own text) and are no nearer in meaning than the best specific match (real
        embeddings; an entity where no fact has the specific words keeps its ranking: the answer may be
        there in other words): they score at most
        NAME_ONLY_SHARE of the best other fact, under the gate, so the named entity's other facts only fill room
        left over (as context, with_context) and never crowd out specific matches elsewhere (issue 10: a
        question returned 17 facts of one entity because its name matched them all)."""
        specific = [mine for term, mine in zip(terms, own) if not term.phrase and not term.names]
        if not specific or not any(t.names and not t.phrase for t in terms):
            return set()
        hits = {fid for fid in fids if any(mine.get(fid, 0.0) >= 0.5 for mine in specific)}
        if not hits:
            return set()
        answered = {id(self.fact_of[fid][0]) for fid in hits}  # entities with a fact that has the specific words
        closest = max((near.get(fid, 0.0) for fid in hits), default=0.0) if near else math.inf
        return {fid for fid in fids if fid not in hits and id(self.fact_of[fid][0]) in answered
                and not any(fid in mine for mine in own) and (not near or near.get(fid, 0.0) < closest)}

    def _gate(self, scored: list[ScoredFact], terms: list[Term], acc: dict[int, float],
              pool: list[tuple[int, float, float]], wanted: re.Pattern[str] | None) -> Ranking:
        """Stage 4: count what falls under the relevance gate, inside the pool and past it."""
        gate = GATE_RATIO * scored[0].score
        weak = sum(1 for f in scored if f.score < gate)
        unranked = 0
        if len(acc) > len(pool):  # not scored in full: weak unless lexically as strong as a gated fact
            floor = GATE_RATIO * pool[0][1]
            outside_weak = sum(1 for v in acc.values() if v < floor) - sum(1 for _, v, _ in pool if v < floor)
            weak += outside_weak
            unranked = len(acc) - len(pool) - outside_weak
        return Ranking(scored, terms, len(acc), weak, unranked, wanted)

    def docs_named(self, name: str) -> list[EntityDoc]:
        """The indexed entities with exactly this name (more than one only in a hand-edited file)."""
        if self._named_generation != self._generation:
            self._named = {}
            for doc in self.docs:
                self._named.setdefault(doc.name, []).append(doc)
            self._named_generation = self._generation
        return self._named.get(name, [])

    def name_finder(self, graph: Graph) -> NameFinder:
        """The did-you-mean index of graph's names, built once per version of its name map."""
        names = graph.by_name()
        if self._finder is None or self._finder[0] is not names:
            self._finder = (names, NameFinder(names))
        return self._finder[1]

    def touching(self, graph: Graph) -> dict[str, list[int]]:
        """Entity name -> indices of the relations with it at either end, built once per graph version
        (`graph` is the one the index was last refreshed with)."""
        if self._touching is None or self._touching[0] != self._generation:
            touching: dict[str, list[int]] = {}
            for i, r in enumerate(graph.relations):
                touching.setdefault(r.frm, []).append(i)
                if r.to != r.frm:
                    touching.setdefault(r.to, []).append(i)
            self._touching = (self._generation, touching)
        return self._touching[1]

    # ── entity matching (search_nodes): every term must match somewhere ──
    def match_entities(self, query: str) -> list[EntityDoc]:
        """search_nodes' matches: entities where every query word occurs in a name, type, fact or relation type."""
        words = query_words(query)
        return [d for d in self.docs if all(w in d.blob or w in d.rels_blob for w in words)]

    def reference_matches(self, query: str) -> list[EntityDoc]:
        """The reference's search: the whole query as one substring of name, type or a fact."""
        q = query.lower()
        if "\n" in q:
            return [d for d in self.docs
                    if q in d.name.lower() or q in d.etype.lower() or any(q in f.lower() for f in d.facts)]
        return [d for d in self.docs if q in d.blob]




# ── did you mean: a few candidates per unknown name, from an index of the names' character 3-grams ──
# Measured on 5,000 generated entity names with 300 one-typo names (tests/test_recall.py): difflib over every
# name took 34-43 s per call; through the index 0.1 s, with the same hints on the typo table.
HINT_GRAM = 3                # a dropped, swapped or added letter leaves most 3-grams of a name intact
HINT_POSTINGS = 20_000       # 3-gram postings counted per unknown name, rarest grams first: a gram most names
                             # share ("ser" of "-service") says little and costs the most
HINT_POOL = 100              # names with the most shared 3-grams, re-ranked by their share of both names' grams
HINT_CANDIDATES = 12         # of those, the names difflib scores (about 65 us each, per case); 8 lost
                             # "Kira Fox" for "Kria Fox" among 30 "* Fox" names
HINT_CUTOFF = 0.6            # difflib's own default: what "close" meant before the index
HINT_MAX_CHARS = 400         # an unknown name longer than twice the longest allowed name is no typo of one
HINTS_PER_CALL = 20          # unknown names per tool call that get suggestions; past that, just "unknown"


def name_grams(folded: str, padded: bool = False) -> set[str]:
    """A name's character 3-grams; padded adds its first and last letters as grams of their own, so names that
    start or end alike meet even when short."""
    text = f"\0{folded}\0" if padded else folded
    return {text[i:i + HINT_GRAM] for i in range(len(text) - HINT_GRAM + 1)}


class NameFinder:
    """Did-you-mean over a fixed set of names, built once per graph version. Names that contain the unknown
    name or are contained in it come first (found through the index, in graph order, as before); then
    difflib's close matches, case-sensitive and case-folded, among the names sharing the most 3-grams."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(dict.fromkeys(names))
        self.folded = [n.lower() for n in self.names]
        self.ids_of: dict[str, list[int]] = {}       # folded name -> ids (graph order)
        self.grams: dict[str, list[int]] = {}        # 3-gram -> ids of the folded names holding it
        self.by_length: dict[int, list[int]] = {}    # for unknown names too short to have a 3-gram
        self.gram_count: list[int] = []
        for i, folded in enumerate(self.folded):
            self.ids_of.setdefault(folded, []).append(i)
            self.by_length.setdefault(len(folded), []).append(i)
            grams = name_grams(folded, padded=True)  # holds the unpadded grams too
            self.gram_count.append(len(grams))
            for gram in grams:
                self.grams.setdefault(gram, []).append(i)

    def suggest(self, name: str, limit: int = 5) -> list[str]:
        """Up to `limit` known names close to `name`, for did-you-mean: names containing it or contained in it,
        then, among names sharing character 3-grams with it, the most similar (difflib; also ignoring case)."""
        low = name.lower()
        if len(low) > HINT_MAX_CHARS:
            return []
        contains = self._containing(low, limit) | self._contained(low)
        candidates = self._candidates(low)
        close = difflib.get_close_matches(name, [self.names[i] for i in candidates], n=limit, cutoff=HINT_CUTOFF)
        folded = {self.folded[i]: self.names[i] for i in candidates}
        close += [folded[m] for m in difflib.get_close_matches(low, list(folded), n=limit, cutoff=HINT_CUTOFF)]
        return list(dict.fromkeys([self.names[i] for i in sorted(contains)] + close))[:limit]

    def _containing(self, low: str, limit: int) -> set[int]:
        """The first `limit` names (graph order) that contain low: all of them hold its rarest 3-gram."""
        grams = name_grams(low)
        if not low:
            return set()
        pool = min((self.grams.get(g, []) for g in grams), key=len) if grams else range(len(self.names))
        found: set[int] = set()
        for i in pool:
            if low in self.folded[i]:
                found.add(i)
                if len(found) == limit:
                    break
        return found

    def _contained(self, low: str) -> set[int]:
        """Names that are a substring of low: its substrings of every length a name has, looked up."""
        found: set[int] = set()
        for length in self.by_length:
            for start in range(len(low) - length + 1):
                found.update(self.ids_of.get(low[start:start + length], ()))
        return found

    def _candidates(self, low: str) -> list[int]:
        """The HINT_CANDIDATES names sharing the largest share of 3-grams with low (Dice, rarest grams counted
        first); for a name too short to have one, the names short enough to be within difflib's cutoff."""
        grams = name_grams(low, padded=True)
        if not grams:
            longest = math.ceil(len(low) * (2 / HINT_CUTOFF - 1))
            return [i for length in range(1, longest + 1) for i in self.by_length.get(length, ())]
        shared: collections.Counter[int] = collections.Counter()
        counted = 0
        for posting in sorted((self.grams.get(g, []) for g in grams), key=len):
            if counted and counted + len(posting) > HINT_POSTINGS:
                break
            counted += len(posting)
            shared.update(posting)
        pool = [i for i, _ in shared.most_common(HINT_POOL)]
        dice = {i: 2 * shared[i] / (len(grams) + self.gram_count[i]) for i in pool}
        return heapq.nlargest(HINT_CANDIDATES, pool, key=dice.__getitem__)


def did_you_mean(name: str, names: Iterable[str], limit: int = 5) -> list[str]:
    """Suggestions for one unknown name among names (for many lookups, keep a NameFinder)."""
    return NameFinder(names).suggest(name, limit)


# ── real embeddings for the dense stage: fact vectors in memory, cached in memory.db, filled in batches ──
Dense = tuple  # (the query's unit vector, fact text -> its unit vector or None): rank_facts' dense stage


class FactVectors:
    """The graph's fact vectors from the embeddings endpoint (MEMORY_EMBEDDINGS_URL): kept in memory, cached
    in memory.db by fact text and model, computed in batches after a write and on first use (at most
    EMBED_FILL_SECONDS a call; later calls do the rest). A failing endpoint leaves ranking by words, with one
    note in the answer, and is not called again for EMBED_BACKOFF seconds."""

    def __init__(self, client: EmbeddingClient, meta: MetaStore):
        self.client, self.meta = client, meta
        self.vecs: dict[str, array.array] = {}       # fact text -> unit vector
        self._queries: dict[str, array.array] = {}   # the last queries' vectors (guardrail probes repeat them)
        self.queries_kept = EMBED_QUERIES_KEPT       # raised to the probe count by --compact (prepare_queries)
        self._complete: int | None = None            # a graph generation whose every fact has a vector
        self._filled: Callable[[], Graph | None] = lambda: None  # a graph without generation filled whole
        self._pruned = False                         # memory.db's vectors of facts gone dropped (once a process)
        self.batch = EMBED_BATCH                     # facts per request; halved while the endpoint is too slow

    def _usable(self, vec: array.array | None) -> bool:
        return vec is not None and (not self.client.dim or len(vec) == self.client.dim)

    def fill(self, texts: Iterable[str], seconds: float | None = None) -> int:
        """Vectors for these fact texts: from memory, then memory.db, then the endpoint in batches while time is
        left and it works. Returns how many are still without one. Never raises for the endpoint's sake."""
        want = [t for t in dict.fromkeys(texts) if not self._usable(self.vecs.get(t))]
        if not want:
            return 0
        hashes = [fact_hash(t) for t in want]
        cached = self.meta.vectors(self.client.model, hashes)
        still = []
        for text, key in zip(want, hashes):
            if self._usable(cached.get(key)):
                self.vecs[text] = cached[key]
            else:
                still.append((text, key))
        deadline, fresh = time.monotonic() + (EMBED_FILL_SECONDS if seconds is None else seconds), []
        for start in range(0, len(still), self.batch):
            left = deadline - time.monotonic()
            if left <= 0 or not self.client.available():
                break
            batch = still[start:start + self.batch]
            try:  # never past the call's time for this (plus a second): a slow model must not hold up a call
                vectors = self.client.embed([text for text, _ in batch], min(EMBED_BATCH_TIMEOUT, left + 1.0))
            except EmbeddingError as err:
                if err.slow and self.batch > 8:  # too slow for this many at once: smaller batches next call
                    self.batch //= 2
                    self.client.problem = ""
                break
            for (text, key), vec in zip(batch, vectors):
                self.vecs[text] = vec
                fresh.append((key, vec))
        if fresh:
            self.meta.save_vectors(self.client.model, fresh)
        return sum(1 for text, _ in still if not self._usable(self.vecs.get(text)))

    def query_vector(self, query: str) -> array.array | None:
        """The query's vector (the last queries_kept are kept), or None when the endpoint failed."""
        vec = self._queries.get(query)
        if vec is None and self.client.available():
            try:
                vec = self.client.embed([query], EMBED_QUERY_TIMEOUT)[0]
            except EmbeddingError:
                return None
            self._keep_query(query, vec)
        return vec

    def _keep_query(self, query: str, vec: array.array) -> None:
        if len(self._queries) >= self.queries_kept:
            self._queries.pop(next(iter(self._queries)))
        self._queries[query] = vec

    def prepare_queries(self, queries: list[str]) -> None:
        """The guardrail's probe queries, all kept and fetched in batches: --compact runs each one twice (on the
        graph now and after the plan), which a smaller cache would ask the endpoint for every time."""
        self.queries_kept = max(self.queries_kept, len(set(queries)))
        missing = [q for q in dict.fromkeys(queries) if q not in self._queries]
        for start in range(0, len(missing), self.batch):
            if not self.client.available():
                return
            batch = missing[start:start + self.batch]
            try:
                vectors = self.client.embed(batch, EMBED_BATCH_TIMEOUT)
            except EmbeddingError:
                return  # query_vector says so, per probe
            for query, vec in zip(batch, vectors):
                self._keep_query(query, vec)

    def for_query(self, graph: Graph, query: str, generation: int | None = None) -> tuple[Dense | None, str]:
        """What the dense stage needs for this query on this graph, and a note when it could not be (fully)
        used: the endpoint failed (ranked by words only), or some facts have no vector yet."""
        qvec = self.query_vector(query)
        if qvec is None:
            return None, self._failed_note("ranked by words only")
        missing = 0
        done = graph is self._filled() if generation is None else generation == self._complete
        if not done:  # (a graph without generation: a guardrail's, asked once per probe)
            texts = [text for entity in graph.entities for text in entity.observations]
            missing = self.fill(texts)
            if not missing and generation is not None:
                self._complete = generation
                self._forget_gone(texts)
            elif not missing:
                self._filled = weakref.ref(graph)
        if not missing:
            return (qvec, self.vecs.get), ""
        if self.client.problem:
            return (qvec, self.vecs.get), self._failed_note(f"{missing:,} facts without a vector were ranked by "
                                                            "words only")
        return (qvec, self.vecs.get), (f"Note: {missing:,} facts have no embedding yet (more are computed with "
                                       "each call); they were ranked by words only.")

    def _failed_note(self, what: str) -> str:
        wait = max(0.0, EMBED_BACKOFF - (time.monotonic() - self.client.failed_at))
        return (f"Note: embeddings endpoint {self.client.label} failed ({self.client.problem}); {what}; "
                f"next try in {wait:.0f} s.")

    def _forget_gone(self, texts: list[str]) -> None:
        """Vectors of facts no longer in the graph: out of memory when they pile up, out of memory.db once."""
        if len(self.vecs) > 1.25 * len(texts) + 100:
            live = set(texts)
            self.vecs = {text: vec for text, vec in self.vecs.items() if text in live}
        if not self._pruned:
            self._pruned = True
            self.meta.forget_vectors(self.client.model, {fact_hash(text) for text in texts})


EMBEDDINGS_HELP = """optional embeddings (find facts by meaning as well as by words; off unless set):
    MEMORY_EMBEDDINGS_URL=http://localhost:11434/v1   an OpenAI-compatible API base (here Ollama's)
    MEMORY_EMBEDDINGS_MODEL=nomic-embed-text          the embedding model it serves
  a key, when the endpoint needs one: from the variable MEMORY_EMBEDDINGS_KEY_ENV names (e.g. OPENAI_API_KEY),
  else MEMORY_EMBEDDINGS_KEY. Fact vectors are cached in memory.db; an endpoint that fails costs a note, never
  a read or a write. --lint checks it."""


def embeddings_status(memory: "Memory") -> str:
    """One line for --lint: are real embeddings on, does the endpoint answer, how many vectors are cached."""
    settings, vectors = memory.settings, memory.vectors
    if vectors is None:
        return ("embeddings: off (recall ranks by words and the word table; set MEMORY_EMBEDDINGS_URL and "
                "MEMORY_EMBEDDINGS_MODEL, e.g. Ollama's http://localhost:11434/v1, to also find facts by meaning)")
    client = vectors.client
    key = f", key from {settings.embeddings_key_from}" if settings.embeddings_key_from else ""
    try:
        cached = memory.meta.conn.execute("SELECT count(*) FROM embeddings WHERE model=?",
                                          (client.model,)).fetchone()[0]
    except sqlite3.Error:
        cached = "?"
    started = time.monotonic()
    try:
        dim = len(client.embed(["graphmem lint"], EMBED_QUERY_TIMEOUT)[0])
        answer = f"answers ({dim} dimensions, {1000 * (time.monotonic() - started):.0f} ms)"
    except EmbeddingError as err:
        answer = f"FAILED ({err}): recall and search_nodes rank by words only while it fails"
    return f"embeddings: {client.label} model {client.model}{key}: {answer}; {cached} fact vectors cached in memory.db"


# ════════════════════════════════════════════════════════════════════════════
# 7. Packer: the most relevant facts under a hard token budget, with an honest footer
# ════════════════════════════════════════════════════════════════════════════

@dataclasses.dataclass
class Packed:
    """A packed recall answer: its text, the facts it shows (in order) and how many facts matched the query."""
    text: str
    shown: list[ScoredFact]
    matched: int


def pack_facts(query: str, ranking: Ranking, budget: int, types: dict[str, str],
               notes: Callable[[ScoredFact], str],
               flags: Callable[[list[ScoredFact]], Callable[[ScoredFact], str]] | None = None) -> Packed:
    """Greedy by relevance under a hard budget; a relevance gate keeps padding out."""
    scored = ranking.facts
    gate = GATE_RATIO * scored[0].score if scored else 0.0
    gated = [f for f in scored if f.score >= gate]
    all_words = {t.word for t in ranking.terms}
    small = budget < 400  # marks and types would crowd out facts

    def partial(fact: ScoredFact) -> bool:
        return not small and len(all_words) > 1 and set(fact.matched) != all_words

    def line(fact: ScoredFact, extra: Callable[[ScoredFact], str] | None = None) -> str:
        mark = f" «{','.join(fact.matched) or '~'}»" if partial(fact) else ""
        return f"- {fact.text}{mark}{notes(fact)}{extra(fact) if extra else ''}\n"

    def header(entity: str) -> str:
        return f"## {entity}\n" if small else f"## {entity} [{types.get(entity, '?')}]\n"

    def left_by_budget(shown: list[ScoredFact]) -> int:  # nearby facts (lexical < 0) were never matches
        return sum(1 for f in gated if f.lexical >= 0) - sum(1 for f in shown if f.lexical >= 0) + ranking.unranked

    def footer(shown: list[ScoredFact], used: int, hint: bool = True) -> str:
        if not scored:
            return f"recall: nothing matched {_q(query, 60)}. {TRY_OTHER_WORDS} search_nodes lists entities by name."
        nearby = sum(1 for f in shown if f.lexical < 0)
        parts = [f"[{ranking.total} matched, " + (f"{len(shown) - nearby} shown + {nearby} nearby" if nearby
                                                   else f"{len(shown)} shown") + f", ~{used}/{budget} tokens"]
        if left_by_budget(shown):
            parts.append(f"{left_by_budget(shown)} over budget")
        if ranking.weak:
            parts.append(f"{ranking.weak} below gate")
        return "; ".join(parts) + "]" + (" «» = query words a fact matched." if any(map(partial, shown)) else "") \
            + ("" if ranking.strong or not hint else " " + weak_match_hint(ranking))

    def render(shown: list[ScoredFact], hint: bool = True, extra: Callable[[ScoredFact], str] | None = None) -> str:
        """The answer; the weak-match hint only where it fits: facts come first (LoCoMo tune half: reserving
        room for it cost 0.015 turn recall at 200 tokens)."""
        groups: dict[str, list[ScoredFact]] = {}
        for fact in shown:
            groups.setdefault(fact.entity, []).append(fact)
        body = "".join(header(e) + "".join(line(f, extra) for f in fs) for e, fs in groups.items())
        text = body + footer(shown, estimate_tokens(body), hint)
        return text if estimate_tokens(text) <= budget else body + footer(shown, estimate_tokens(body), hint=False)

    # Count characters, not per-line tokens: the answer's tokens are its characters / 4, rounded up once.
    shown: list[ScoredFact] = []
    seen_entities: set[str] = set()

    def cost(fact: ScoredFact) -> int:
        return len(line(fact)) + (0 if fact.entity in seen_entities else len(header(fact.entity)))

    def fits(fact: ScoredFact, used: int, limit: int) -> bool:
        """used + the fact's line (and header) within limit; its text alone is checked first, so the notes of
        facts that cannot fit anyway (most candidates, once the budget is full) are never worked out."""
        floor = len(fact.text) + 3 + (0 if fact.entity in seen_entities else len(header(fact.entity)))
        return used + floor <= limit and used + cost(fact) <= limit

    def take(fact: ScoredFact) -> None:
        shown.append(fact)
        seen_entities.add(fact.entity)

    # 8 characters: a generous reserve for the footer
    room, used = chars_for_tokens(budget) - len(footer(gated, budget, hint=False)) - 8, 0
    for fact in gated:
        if fits(fact, used, room):
            used += cost(fact)
            take(fact)
    text = render(shown, hint=False)
    taken = {id(f) for f in shown}
    for fact in gated:  # the real footer came out shorter: fill what it left, in rank order
        if id(fact) in taken or not fits(fact, len(text), chars_for_tokens(budget)):
            continue
        trial = render(shown + [fact], hint=False)
        if estimate_tokens(trial) <= budget:
            take(fact)
            taken.add(id(fact))
            text = trial
    text = render(shown)
    while estimate_tokens(text) > budget and shown:  # the hard guarantee, whatever the estimates said
        shown.pop()
        text = render(shown)
    if flags is not None and shown:  # notes about the shown facts together, where they fit
        flagged = render(shown, extra=flags(shown))
        if estimate_tokens(flagged) <= budget:
            text = flagged
    return Packed(text, shown, ranking.total)



def _names_the_entity(terms: list[Term], entity: Entity) -> bool:
    """The query names this entity (its name or type): its other facts are on topic, not padding."""
    head = stems_line(f"{entity.name} {entity.entityType}")
    return any(t.weight_in(head) >= 1.0 for t in terms)


def with_context(ranking: Ranking, graph: Graph) -> Ranking:
    """Budget left after every relevant fact goes to the other facts of a leading entity the query names
    (asking about "shop-api deploys" is asking about shop-api), nearest the best match first: facts are
    written in batches. They rank last, just at the gate, are counted as "nearby" in the footer and marked
    «~» (no query word) where marks are shown. Of the one leading entity the query does not name, only facts
    carrying what the question asks for (a time for "when ...") are added; otherwise it adds no padding."""
    if not ranking.facts:
        return ranking
    gate = GATE_RATIO * ranking.facts[0].score
    wanted = ranking.wanted
    shown = {(f.entity, f.text) for f in ranking.facts if not f.name_only}  # matches keep their place and count
    extra: list[ScoredFact] = []
    leaders = list(dict.fromkeys(f.entity for f in ranking.facts))[:CONTEXT_ENTITIES]
    for name in leaders:
        entity = graph.get(name)
        if entity is None:
            continue
        named = _names_the_entity(ranking.terms, entity)
        if not named and not (wanted and name == leaders[0]):
            continue
        best = next(f.text for f in ranking.facts if f.entity == name)
        anchor = entity.observations.index(best) if best in entity.observations else 0
        nearby = sorted(range(len(entity.observations)), key=lambda i: (abs(i - anchor), i))
        wanted_here = (lambda text: True) if named else wanted.search
        picked = [text for text in (entity.observations[i] for i in nearby)
                  if (name, text) not in shown and wanted_here(text)][:CONTEXT_FACTS if named else ANSWER_CONTEXT_FACTS]
        extra += [ScoredFact(name, text, gate, -1.0, []) for text in picked]  # lexical -1: context
    if not extra:
        return ranking
    added = {(f.entity, f.text) for f in extra}
    kept = [f for f in ranking.facts if f.score >= gate]
    weak = [f for f in ranking.facts if f.score < gate and (f.entity, f.text) not in added]
    moved = len(ranking.facts) - len(kept) - len(weak)  # matched by the entity's name only: context instead
    return dataclasses.replace(ranking, facts=kept + extra + weak, weak=ranking.weak - moved,
                               total=ranking.total - moved)


TRY_OTHER_WORDS = "Try other words (those a stored fact would use) or a broader query."


def weak_match_hint(ranking: Ranking) -> str:
    """Said when no fact matches the query well: which of its words nothing matched, and what to try.
    The reader is a language model; told so, it rephrases well."""
    best = ranking.facts[0] if ranking.facts else None
    missing = [t.word for t in ranking.terms if not t.phrase and best and t.word not in best.matched]
    unmatched = f" (none has {', '.join(missing[:4])})" if missing else ""
    return f"Weak match: no fact matches most of the query{unmatched}. {TRY_OTHER_WORDS}"


def recall_pipeline(index: SearchIndex, graph: Graph, query: str, budget: int, strength: Callable[[str, str], float],
                    penalty: Callable[[str, str], float] | None, notes: Callable[[ScoredFact], str],
                    keep: Callable[[str, str], bool] | None = None,
                    flags: Callable[[list[ScoredFact]], Callable[[ScoredFact], str]] | None = None,
                    dense: Dense | None = None) -> Packed:
    """The one recall: rank (four stages), add the leading entities' context, pack under the hard budget with
    each fact's notes (flags, anchors). The recall tool and the guardrail's probes both run exactly this.
    keep(entity, fact): only such facts (recall's since/until); flags: notes worked out for the shown facts
    only (conflicts among them), added where the budget leaves room; dense: real embeddings, when on."""
    ranking = with_context(index.rank_facts(query, strength, penalty, dense), graph)
    if keep is not None:
        ranking.facts = [f for f in ranking.facts if keep(f.entity, f.text)]
    types = {f.entity: graph.get(f.entity).entityType for f in ranking.facts if graph.get(f.entity)}
    return pack_facts(query, ranking, budget, types, notes, flags)


# ── the reference server's exact answers: for the savings ledger and the benchmark ──

def _pretty_json(obj: Any) -> str:
    return escape_surrogates(json.dumps(obj, indent=2, ensure_ascii=False))


def _reference_graph_json(entities: list[Entity], relations: list[Relation]) -> str:
    return _pretty_json({
        "entities": [{"name": e.name, "entityType": e.entityType, "observations": e.observations} for e in entities],
        "relations": [{"from": r.frm, "to": r.to, "relationType": r.relationType} for r in relations]})


def _json_string_size(text: str) -> int:
    if text.isprintable() and '"' not in text and "\\" not in text:
        return len(text) + 2  # nothing to escape (the usual case)
    encoded = json.dumps(text, ensure_ascii=False)
    return len(encoded) + 5 * len(_SURROGATE.findall(encoded))  # a lone surrogate is written as \uXXXX


def pretty_item_size(obj: dict[str, str | list[str]]) -> int:
    """Length of obj (string and string-list values, as entities and relations are) inside the reference's
    {"entities": [...]} at two levels of indent, counted without rendering it: json.dumps with indent
    builds reference cycles for every call, garbage the cyclic collector then has to find."""
    lines = 2                                  # "{" and "}"
    size = 2
    for position, (key, value) in enumerate(obj.items()):
        comma = 1 if position < len(obj) - 1 else 0
        head = 2 + _json_string_size(key) + 2  # '  "key": '
        if isinstance(value, str):
            size += head + _json_string_size(value) + comma
            lines += 1
        elif not value:
            size += head + 2 + comma           # []
            lines += 1
        else:
            size += head + 1 + sum(4 + _json_string_size(item) for item in value) + len(value) - 1 + 3 + comma
            lines += len(value) + 2
    return size + (lines - 1) + 4 * lines      # newlines, then 4 more spaces of indent on every line


def reference_size(entity_sizes: list[int], relation_sizes: list[int]) -> int:
    """len(reference pretty JSON) from per-item sizes, without rendering it (exact; tested)."""
    def section(name: str, sizes: list[int]) -> int:
        if not sizes:
            return len(f'  "{name}": []')
        return len(f'  "{name}": [\n') + sum(sizes) + 2 * (len(sizes) - 1) + len("\n  ]")
    return (len("{\n") + section("entities", entity_sizes) + len(",\n") + section("relations", relation_sizes)
            + len("\n}"))


def reference_answer_text(graph: Graph, tool: str, args: dict[str, Any]) -> str:
    """What @modelcontextprotocol/server-memory 2026.8.31 answers for the same call on the same graph."""
    if tool == "read_graph":
        return _reference_graph_json(graph.entities, graph.relations)
    if tool == "search_nodes":
        q = str(args.get("query", "")).lower()
        found = [e for e in graph.entities
                 if q in e.name.lower() or q in e.entityType.lower() or any(q in o.lower() for o in e.observations)]
    elif tool == "open_nodes":
        wanted = set(args.get("names") or [])
        found = [e for e in graph.entities if e.name in wanted]
    else:
        raise ValueError(f"no reference rendering for {tool}")
    names = {e.name for e in found}
    return _reference_graph_json(found, graph.relations_of(names))


# ════════════════════════════════════════════════════════════════════════════
# 8. Lifecycle: length limit, secrets, duplicates, supersede, cap and archive
# ════════════════════════════════════════════════════════════════════════════

SECRET_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private key block", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("AWS access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("API secret key", re.compile(r"\bsk-(?:proj-|ant-|live-)?[A-Za-z0-9_-]{20,}")),
    ("Stripe key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("connection string with a password", re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?![$*<{%])[^\s@/]{3,}@")),
    ("password or key assignment", re.compile(
        r"(?i)\b(?:pass(?:word|wd)?|pwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token|access[_-]?token|"
        r"client[_-]?secret|private[_-]?key)\b\s*[:=]\s*[\"']?(?![$<{%*])"
        r"(?=[^\s\"']*[0-9!@#^&+/=_-]|[^\s\"']{12,})[^\s\"']{6,}")),
]
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
# A long hex, UUID or base64 value is a secret when the nearest cue word before it, in its sentence and at most
# SECRET_CUE_WORDS words back, names a secret ("signing secret for staging is <hex>"); a digest word nearer to
# it ("sha256 of the tarball is <hex>", "token refresh fixed in commit <sha>") makes it an identifier.
SECRET_CUE_WORDS = 8  # "the signing secret we use for staging is <hex>": a guess that covers such sentences
_SECRET_CUE = re.compile(r"(?i)\b(?:secrets?|tokens?|passwords?|passphrases?|credentials?|bearer|hmac|"
                         r"(?:api|signing|encryption|private|access|secret|master|client|webhook|deploy)[ _-]?keys?)\b")
_DIGEST_CUE = re.compile(r"(?i)\b(?:sha\d*|md5|digest|checksum|hash(?:es)?|commit|revision|rev|fingerprint|uuid|"
                         r"guid|id|etag|build|trace|request)\b")
_CUED_VALUE = re.compile(r"(?<![\w+/-])(?:(?P<hex>[0-9a-fA-F]{32,}|"
                         r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})|"
                         r"(?=[\w+/-]*[a-z])(?=[\w+/-]*[A-Z])(?=[\w+/-]*[0-9])[\w+/-]{24,}={0,2})(?![\w+/-])")
_SENTENCE_END = re.compile(r"[.;!?]\s")


def _mixes_at_random(value: str) -> bool:
    """Random base64 changes between lower case, upper case and digits at about 2 of 3 letters; a CamelCase
    name ("myServiceToken2024Production") at 1 in 4. The bar, 1 in 3, is halfway."""
    kinds = ["d" if c.isdigit() else "u" if c.isupper() else "l" if c.islower() else "o" for c in value]
    return 3 * sum(a != b for a, b in zip(kinds, kinds[1:])) >= len(value)


def _named_as_secret(text: str) -> bool:
    """A long random value whose nearest cue word before it names a secret, not a digest or an id."""
    for value in _CUED_VALUE.finditer(text):
        if not value.group("hex") and not _mixes_at_random(value.group()):
            continue
        before = _SENTENCE_END.split(text[:value.start()])[-1]
        window = " ".join(before.split()[-SECRET_CUE_WORDS:])
        cues = [(m.start(), True) for m in _SECRET_CUE.finditer(window)]
        cues += [(m.start(), False) for m in _DIGEST_CUE.finditer(window)]
        if cues and max(cues)[1]:
            return True
    return False


def looks_like_secret(text: str) -> str | None:
    """What kind of credential `text` looks like (a label for the refusal), or None: known key formats, a long value
    named as a secret, or a long high-entropy token."""
    for label, pattern in SECRET_PATTERNS:
        if pattern.search(text):
            return label
    if _named_as_secret(text):
        return "long value named as a secret"
    for token in _LONG_TOKEN.findall(text):
        if re.fullmatch(r"[0-9a-fA-F]+", token):  # commit ids and digests are not secrets
            continue
        if not (re.search(r"[0-9]", token) and re.search(r"[A-Za-z]", token)):
            continue
        counts = {c: token.count(c) for c in set(token)}
        entropy = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
        if entropy >= 4.2:
            return "long random-looking string"
    return None


def check_new_fact(text: str, settings: Settings) -> str | None:
    """Why a new fact is refused, or None. The same checks for agents and the UI."""
    if not text.strip():
        return "empty fact"
    if len(text) > settings.obs_max_chars:
        return (f"{len(text)} chars, over the {settings.obs_max_chars}-char limit: split it into short facts, "
                "one idea each; keep long detail in the repo's docs")
    secret = looks_like_secret(text)
    return secret_refusal(secret) if secret else None


def secret_refusal(label: str) -> str:
    """Why a value that looks like a credential is refused, for facts and names alike; never the value."""
    return (f"looks like a credential ({label}): record where the secret lives "
            "(e.g. \"deploy token: 1Password vault Ops, item 'CI'\"), never its value")


def normalise_fact(text: str) -> str:
    """A fact reduced for duplicate checks: lower case, single spaces, no trailing punctuation."""
    return " ".join(text.lower().split()).rstrip(".!;,: ")


NEGATIONS = {"not", "no", "never", "without", "cannot", "dont", "doesnt", "isnt", "wont", "nt"}
_NUMBER = re.compile(r"\d+(?:\.\d+)*")

# ── write-time curation, tuned (issue 10: zero false drops matters more than catching everything) ──
NEAR_COSINE = 0.93  # embedder cosine from which two facts with the same numbers and negation are "nearly the same"
NEAR_WORD_PREFIX = 4  # "Owned by X" = "Owner: X": content words in the same order, each equal or sharing its first
                      # 4 letters and all but 2 (owned/owner, deploy/deployed; not import/important); a guess
CURATION_CACHE = 1 << 16  # facts whose clauses and status are remembered: an entity's facts are compared again
                          # and again within a call; 64k short tuples, a few MB at most
STATUS_SUBJECT_WORDS = 3  # a status report names at most 3 other words ("login bug: fixed"); longer is a sentence
# Stop words that carry meaning ("runs before deploy" / "after deploy", "flag is on" / "off"): two facts that differ
# in one of them are never "nearly the same"; only these differ harmlessly.
_HARMLESS_WORDS = frozenset("a an the is are was were be been being has have had it its this that these those of for "
                            "by s so just very also to we our us you your they their them get got".split())
_OPPOSABLE_WORDS = STOP_WORDS - _HARMLESS_WORDS
# Where a fact's subject ends: a separator ("Owner: Maria", "port = 8080") or a copula ends it and what follows
# is its value, so a new value there replaces the old one; after another linking verb ("uses Redis for caching"
# / "for queues") both can be true, so both are kept and the older is named as a possible conflict.
_SUBJECT_SEPARATOR = re.compile(r"\s(?:->|→)\s|:\s|=")
COPULAS = frozenset("is are was were be becomes became equals remains stays set changed moved switched defaults"
                    .split())
LINK_VERBS = frozenset("""must should can cannot will may might need needs requires require required uses use used
using runs run deploys deployed lives points listens hosted owned maintained wrote written writes stored served built
supports supported targets has have had goes depends calls sends reads handles owns contains includes talks blocks
""".split())
_CLAUSE_SPLIT = re.compile(r"\s*;\s*|(?<=\w)[.!?]\s+(?=[A-Z])")
# States a status report gives ("Status: open", "2026-02-11: fixed and merged, closing", "rolled out to 10% of
# users", "now generally available"); phrases are joined into one word first.
_STATUS_PHRASES = [(re.compile(r"\bnot (?:yet )?started\b"), " notstarted "),
                   (re.compile(r"\bin[ -]progress\b"), " inprogress "),
                   (re.compile(r"\brolled out to (\d+)\s*%"), r" rollout\1 "),
                   (re.compile(r"\bgenerally available\b"), " ga "),
                   (re.compile(r"\bwon'?t fix\b"), " wontfix ")]
STATE_WORDS = frozenset("""open opened todo planned pending notstarted started inprogress wip blocked draft review
reviewing testing beta canary partial investigating reopened triaged proposed fixed done merged closed closing shipped
released resolved complete completed finished ga launched cancelled canceled abandoned wontfix rejected live""".split())
_ROLLOUT = re.compile(r"rollout\d+")
_STATE_HINT = re.compile("|".join(sorted(STATE_WORDS | {"started", "progress", "rolled", "available", "fix"})))
_STATUS_FILLER = frozenset("status state now currently users traffic customers everyone".split())


def _body(text: str) -> str:
    return DATE_PREFIX.sub("", text, count=1).lstrip(" :-—")


@functools.lru_cache(maxsize=CURATION_CACHE)
def clauses(text: str) -> list[str]:
    """A compound fact's clauses ("deploy branch is main; GitHub Actions deploys on tag v*"), or [text]."""
    parts = [p for p in _CLAUSE_SPLIT.split(_body(text)) if tokenize(p)]
    return parts if len(parts) > 1 else [text]


@functools.lru_cache(maxsize=CURATION_CACHE)
def status_of(text: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(states, subject stems) of a short status report ("Status: open", "login bug: fixed"), else None."""
    low = _body(text).lower()
    if not _STATE_HINT.search(low):
        return None
    for pattern, replacement in _STATUS_PHRASES:
        low = pattern.sub(replacement, low)
    words = tokenize(low)
    states = frozenset(w for w in words if w in STATE_WORDS or _ROLLOUT.fullmatch(w))
    if not states or NEGATIONS & set(words):
        return None
    subject = frozenset(stem(w) for w in words if w not in states and w not in _STATUS_FILLER and w not in STOP_WORDS)
    return (states, subject) if len(subject) <= STATUS_SUBJECT_WORDS else None


def _status_change(old: str, new: str) -> bool:
    """new reports another state of the same thing as old, and is not dated before it."""
    was, now = status_of(old), status_of(new)
    if not was or not now or was[1] != now[1] or was[0] == now[0]:
        return False
    old_date, new_date = fact_date(old), fact_date(new)
    return not (old_date and new_date and new_date < old_date)


def _subject_end(body: str, words: list[str]) -> tuple[int, bool] | None:
    """(index in words where the subject ends, whether a new value after it replaces the old): at the first
    separator or copula (True), or the first other linking verb (False); None when there is none."""
    sep = _SUBJECT_SEPARATOR.search(body)
    at_sep = len(tokenize(body[:sep.start()])) if sep else len(words)
    for i, word in enumerate(words[:at_sep]):
        if word in COPULAS or word in LINK_VERBS:
            return i, word in COPULAS
    return (at_sep, True) if sep else None


def _word_key(word: str) -> str:
    """Words that _same_word matches share this key."""
    return word if len(word) < NEAR_WORD_PREFIX or any(c.isdigit() for c in word) else word[:NEAR_WORD_PREFIX]


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    if min(len(a), len(b)) < NEAR_WORD_PREFIX or any(c.isdigit() for c in a + b):
        return False
    return len(os.path.commonprefix([a, b])) >= max(NEAR_WORD_PREFIX, max(len(a), len(b)) - 2)


def _content_words(words: list[str]) -> list[str]:
    return [w for w in words if w not in STOP_WORDS and w not in NEGATIONS]


def _same_words_in_order(a: list[str], b: list[str]) -> bool:
    """"Owned by Lucas Perez" and "Owner: Lucas Perez": the same content words, in the same order."""
    ca, cb = _content_words(a), _content_words(b)
    return len(ca) == len(cb) >= 2 and all(_same_word(x, y) for x, y in zip(ca, cb))


def compare_facts(old: str, new: str, vector: Callable[[str], dict[int, float]] = embed) -> str | None:
    """'duplicate', 'near', 'supersede', 'conflict' or None: conservative, when unsure keep both.
    vector is embed, or a lookup of vectors embed made before."""
    if normalise_fact(old) == normalise_fact(new):
        return "duplicate"
    if _status_change(old, new):
        return "supersede"
    old_date, new_date = fact_date(old), fact_date(new)
    if old_date and new_date and old_date != new_date:
        return None  # two dated events are history, not a change of value
    return _compare_parts(old, new, vector) or _compare_clauses(old, new, vector)


def _compare_parts(old: str, new: str, vector: Callable[[str], dict[int, float]]) -> str | None:
    """compare_facts on two whole facts, or two clauses."""
    if normalise_fact(old) == normalise_fact(new):
        return "duplicate"
    old_body, new_body = _body(old), _body(new)
    a, b = tokenize(old_body), tokenize(new_body)
    if not a or not b:
        return None
    numbers_differ = _NUMBER.findall(old_body) != _NUMBER.findall(new_body)
    negation_differs = bool(NEGATIONS & set(a)) != bool(NEGATIONS & set(b))
    if not numbers_differ and not negation_differs and not (set(a) ^ set(b)) & _OPPOSABLE_WORDS and (
            _same_words_in_order(a, b) or cosine(vector(old), vector(new)) >= NEAR_COSINE):
        return "near"
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    diff_a, diff_b = a[prefix:len(a) - suffix], b[prefix:len(b) - suffix]
    shared = (set(a[:prefix]) | set(a[len(a) - suffix:])) - STOP_WORDS
    stems_a = {stem(w) for w in a} - NEGATIONS - STOP_WORDS
    stems_b = {stem(w) for w in b} - NEGATIONS - STOP_WORDS
    if negation_differs:  # "X" against "not X" is a conflict to report, never a silent replacement
        return "conflict" if stems_a == stems_b or (prefix + suffix >= 2 and len(shared) >= 2) else None
    if 1 <= len(diff_a) <= 3 and 1 <= len(diff_b) <= 3 and prefix + suffix >= 2 and shared:
        return _value_change(old_body, new_body, a, b, prefix, len(shared))
    keyed = _keyed_subject(old_body, a)
    return "conflict" if keyed and keyed == _keyed_subject(new_body, b) else None


def _keyed_subject(body: str, words: list[str]) -> tuple[str, ...] | None:
    """The key of a short "Key: value" fact ("Owner: Lucas Perez"): two of them with the same key and other
    values may disagree, or both hold ("TODO: ..."): a possible conflict, never a replacement."""
    sep = _SUBJECT_SEPARATOR.search(body)
    if not sep:
        return None
    subject = tuple(tokenize(body[:sep.start()]))
    value = len(words) - len(subject)
    return subject if 1 <= len(subject) <= 3 and 1 <= value <= 3 and _content_words(list(subject)) else None


def _value_change(old: str, new: str, a: list[str], b: list[str], prefix: int, shared: int) -> str | None:
    """Two facts alike but for a few words from position prefix: None when those words are in the subject
    (different things: "client 1 wrote ..." / "client 2 wrote ..."), 'supersede' when only the value after the
    same subject's separator or copula changed, else 'conflict' (unsure: keep both, name the older)."""
    ends = _subject_end(old, a), _subject_end(new, b)
    if ends[0] and ends[1] and prefix < min(ends[0][0], ends[1][0]):
        return None
    if ends[0] and ends[0] == ends[1] and ends[0][1] and shared >= 2 and _content_words(a[:ends[0][0]]):
        return "supersede"
    return "conflict"


def _compare_clauses(old: str, new: str, vector: Callable[[str], dict[int, float]]) -> str | None:
    """Compound facts compared clause by clause: 'near' when new says nothing old does not; 'supersede' when new
    replaces every clause of old; 'conflict' when it replaces only some (old holds more: keep both)."""
    olds, news = clauses(old), clauses(new)
    if len(olds) == 1 and len(news) == 1:
        return None
    verdicts = {(i, j): "supersede" if _status_change(o, n) else _compare_parts(o, n, vector)
                for i, o in enumerate(olds) for j, n in enumerate(news)}
    if all(any(verdicts[i, j] in ("duplicate", "near") for i in range(len(olds))) for j in range(len(news))):
        return "near"
    replaced = [any(verdicts[i, j] in ("duplicate", "near", "supersede") for j in range(len(news)))
                for i in range(len(olds))]
    changed = any(v in ("supersede", "conflict") for v in verdicts.values())
    if all(replaced) and "supersede" in verdicts.values():
        return "supersede"
    return "conflict" if changed else None


Keys = set[tuple[Any, ...]]


def fact_keys(text: str, vector: dict[int, float], stored: bool) -> tuple[Keys, Keys, Keys]:
    """(word keys, near keys, any-date keys) of a whole fact or a clause: a pair _compare_parts flags always
    shares a key, a stored fact's meeting a new one's.
    Word keys:
    - the normalised text: "duplicate";
    - the body's first two, last two, or first and last words: "supersede" and "conflict" need two words equal
      at the ends (prefix + suffix >= 2); with the same negation also at most 3 other words on each side, so
      lengths within 2 of each other; a negation flip has no limit on length;
    - the set of content stems: a negation flip of the same words is a "conflict";
    - the content words' keys in order (_word_key) and the negation: "near" by _same_words_in_order;
    - the key of a short "Key: value" fact (_keyed_subject): a "conflict" of two values.
    Near keys: "near" by the embedder needs the same numbers and negation, and an embedder bucket in common: a
    stored fact's heaviest buckets (near_buckets) against all of a new fact's.
    Any-date keys: a status report's subject: a later report of another state supersedes whatever the dates.
    Keys are words and buckets, no similarity threshold of their own, so no flagged pair is ever missed."""
    body = _body(text)
    words = tokenize(body)
    negated = bool(NEGATIONS & set(words))
    keys: Keys = {("text", normalise_fact(text)),
                  ("stems", frozenset({stem(w) for w in words} - NEGATIONS - STOP_WORDS)),
                  ("order", negated, tuple(_word_key(w) for w in _content_words(words)))}
    ends = [("head", *words[:2]), ("tail", *words[-2:]), ("ends", words[0], words[-1])] if len(words) >= 2 else []
    for pair in ends:
        if stored:
            keys |= {(*pair, negated, len(words)), (*pair, negated)}
        else:
            keys.add((*pair, not negated))
            keys.update((*pair, negated, n) for n in range(len(words) - 2, len(words) + 3))
    same = (tuple(_NUMBER.findall(body)), negated)
    near = {("near", same, bucket) for bucket in (near_buckets(vector) if stored else vector)}
    keyed = _keyed_subject(body, words)
    if keyed:
        keys.add(("keyed", keyed))
    status = status_of(text)
    return keys, near, ({("status", status[1])} if status else set())


def near_buckets(vector: dict[int, float]) -> list[int]:
    """The heaviest buckets of a unit vector, holding more than 1 - NEAR_COSINE^2 of its squared weight: a vector
    with none of them reaches a cosine of at most sqrt(1 - that share) < NEAR_COSINE (Cauchy-Schwarz over the
    other buckets), so it cannot be "near"."""
    needed = 1 - NEAR_COSINE ** 2 + 1e-9  # the margin covers rounding in the norms
    chosen, mass = [], 0.0
    for bucket, value in sorted(vector.items(), key=lambda kv: (-abs(kv[1]), kv[0])):
        if mass > needed:
            break
        chosen.append(bucket)
        mass += value * value
    return chosen


def could_be_near(a: dict[int, float], b: dict[int, float]) -> bool:
    """False when two unit vectors cannot reach NEAR_COSINE: their cosine is at most the root of the share of
    a's squared weight in buckets b has (Cauchy-Schwarz), and the same the other way round."""
    most = NEAR_COSINE ** 2 - 1e-9  # the margin covers rounding in the norms
    common = a.keys() & b.keys()
    return sum(a[k] * a[k] for k in common) >= most and sum(b[k] * b[k] for k in common) >= most


class FactNeighbours:
    """One entity's facts indexed by fact_keys, so write-time curation compares a new fact only with the facts
    compare_facts could flag, in list order: the same first verdict as comparing with every fact. Two facts
    dated differently are never flagged (history, not a change) unless they are status reports, so keys are
    held per date: a dated fact is looked up among its own date and the undated facts, an undated one among
    all ("*"); status keys among all ("any"). A compound fact is indexed whole and by each clause (clauses)."""

    def __init__(self, facts: Iterable[str]) -> None:
        self._copies: dict[str, list[int]] = {}         # text -> positions of its copies (only ever increasing)
        self._keys: dict[str, Keys] = {}
        self._holders: dict[tuple[Any, ...], set[str]] = {}
        self._vectors: dict[str, dict[int, float]] = {}  # embed of each fact and clause, made once
        self._parts: dict[str, list[str]] = {}           # a fact, then its clauses when it has several
        self._next = 0
        for text in facts:
            self.add(text)

    def add(self, text: str) -> None:
        """A fact appended to the entity's list."""
        self._copies.setdefault(text, []).append(self._next)
        self._next += 1
        if text not in self._keys:
            date, keys = fact_date(text), set()
            self._parts[text] = self._split(text)
            for part in self._parts[text]:
                word_keys, near_keys, any_date = fact_keys(part, self._vector(part), stored=True)
                keys |= {(scope, *key) for key in word_keys | near_keys for scope in (date, "*")}
                keys |= {("any", *key) for key in any_date}
            self._keys[text] = keys
            for key in keys:
                self._holders.setdefault(key, set()).add(text)

    def remove(self, text: str) -> None:
        """The first copy of a fact removed from the list (as list.remove)."""
        copies = self._copies[text]
        copies.pop(0)
        if not copies:
            del self._copies[text]
            for part in self._parts.pop(text):
                self._vectors.pop(part, None)
            for key in self._keys.pop(text):
                self._holders[key].discard(text)

    @staticmethod
    def _split(text: str) -> list[str]:
        parts = clauses(text)
        return [text] + parts if len(parts) > 1 else [text]

    def _vector(self, text: str) -> dict[int, float]:
        vector = self._vectors.get(text)
        if vector is None:
            vector = self._vectors[text] = embed(text)
        return vector

    def _holding(self, keys: Keys, date: str | None) -> set[str]:
        scopes = (date, None) if date else ("*",)
        return {text for key in keys for scope in scopes for text in self._holders.get((scope, *key), ())}

    def _could_be_near(self, vectors: list[tuple[dict[int, float], list[int]]], other: str) -> bool:
        """Some part of a new fact (vector, its near_buckets) and some part of other can reach NEAR_COSINE: the
        same bound the other way round, first as a cheap check."""
        for part in self._parts[other]:
            theirs = self._vector(part)  # a clause may also be another fact, removed since: made again
            for mine, heavy in vectors:
                if any(k in theirs for k in heavy) and could_be_near(mine, theirs):
                    return True
        return False

    def first_flagged(self, text: str) -> tuple[str | None, str | None]:
        """(verdict, fact) for the first fact in list order that compare_facts flags against text, or (None, None)."""
        return next(self.flagged(text), (None, None))

    def flagged(self, text: str) -> Iterator[tuple[str, str]]:
        """(verdict, fact) for every fact compare_facts flags against text, in list order."""
        date, found, near, vectors = fact_date(text), set(), set(), []
        for part in self._split(text):
            vector = self._vector(part)
            vectors.append((vector, near_buckets(vector)))
            word_keys, near_keys, any_date = fact_keys(part, vector, stored=False)
            found |= self._holding(word_keys, date)
            found |= {t for key in any_date for t in self._holders.get(("any", *key), ())}
            near |= self._holding(near_keys, date)
        found |= {t for t in near - found if self._could_be_near(vectors, t)}
        for other in sorted(found, key=lambda t: self._copies[t][0]):
            verdict = compare_facts(other, text, self._vector)
            if verdict:
                yield verdict, other


# Entity types whose facts hold until someone changes them: never archived by decay or cap (issue 10). Matched by
# stem on any word of the type ("coding conventions", "architecture-decision"); a guess from the types agents use.
KEPT_ENTITY_TYPES = ("rule", "convention", "decision", "policy", "guideline", "principle", "constraint", "adr",
                     "standard", "invariant")
_KEPT_TYPE_STEMS = frozenset(stem(w) for w in KEPT_ENTITY_TYPES)


def entity_keeps_facts(entity_type: str) -> bool:
    """A rule, convention or decision entity: its facts stay in the active graph until changed by hand."""
    return any(stem(w) in _KEPT_TYPE_STEMS for w in tokenize(entity_type))


def can_fade(entity_type: str, text: str) -> bool:
    """Only dated, event-like facts of other entities can fade out of the active graph; undated (identity)
    facts and the facts of rules, conventions and decisions never do."""
    return fact_date(text) is not None and not entity_keeps_facts(entity_type)


def conflicts_among(entity: Entity | None, texts: set[str]) -> dict[str, str]:
    """Flags for the facts among texts that compare_facts pairs as a supersede or conflict both kept:
    ' [newer of a conflict]' on the later one, ' [older: conflicts with "..."]' on the earlier."""
    flags: dict[str, str] = {}
    if entity is None or len(texts) < 2:
        return flags
    ordered = list(dict.fromkeys(o for o in entity.observations if o in texts))
    for text, verdict, older in flagged_pairs(ordered):
        if verdict in ("supersede", "conflict"):
            flags[text] = " [newer of a conflict]"
            flags[older] = f" [older: conflicts with {json.dumps(short(text, 60), ensure_ascii=False)}]"
    return flags


def flagged_pairs(ordered: list[str]) -> Iterator[tuple[str, str, str]]:
    """(fact, verdict, earlier fact) for every pair compare_facts flags, in list order. A few facts are
    compared pair by pair (cheaper than building the index: 1.3 ms a fact at 5 facts); more go through
    FactNeighbours, which gives the same pairs."""
    if len(ordered) <= DIRECT_COMPARE_MAX:
        vectors: dict[str, dict[int, float]] = {}

        def vector(text: str) -> dict[int, float]:
            if text not in vectors:
                vectors[text] = embed(text)
            return vectors[text]
        for j, text in enumerate(ordered):
            for older in ordered[:j]:
                verdict = compare_facts(older, text, vector)
                if verdict:
                    yield text, verdict, older
        return
    neighbours = FactNeighbours([])
    for text in ordered:
        for verdict, older in neighbours.flagged(text):
            yield text, verdict, older
        neighbours.add(text)


def overflow_to_archive(entity: Entity, cap: int, keep: set[str], pinned: Callable[[str], bool]) -> list[str]:
    """The oldest dated facts past the cap; undated (identity) and pinned facts, and every fact of a rule,
    convention or decision entity, are never auto-archived."""
    over = len(entity.observations) - cap
    if over <= 0 or entity_keeps_facts(entity.entityType):
        return []
    dated = [(fact_date(o), i, o) for i, o in enumerate(entity.observations)
             if fact_date(o) and o not in keep and not pinned(o)]
    dated.sort()
    return [o for _, _, o in dated[:over]]


class Lifecycle:
    """The rules above applied to one graph's facts as they are now: strength on the activity clock (MetaStore
    keeps the per-fact state), what is pinned, what is fading, and the marks answers put after a fact."""

    def __init__(self, meta: MetaStore, anchors: "AnchorChecker"):
        self.meta = meta
        self.anchors = anchors

    def strength(self, entity: str, text: str) -> float:
        """A fact's retention now (1.0 when just used or pinned), for ranking."""
        return self.meta.state(entity, text).retention(self.meta.clock())

    def pinned(self, entity: str) -> Callable[[str], bool]:
        """Whether a fact of `entity` is pinned (never replaced, never archived by the cap)."""
        return lambda text: self.meta.state(entity, text).pinned

    def fading(self, entity: Entity, text: str, clock: ActivityClock) -> float | None:
        """The retention of a fact that can fade (can_fade) and is under FADING_RETENTION, else None."""
        if not can_fade(entity.entityType, text):
            return None
        r = self.meta.state(entity.name, text).retention(clock)
        return r if r < FADING_RETENTION else None

    def fading_facts(self, graph: Graph) -> list[tuple[float, str, str]]:
        """(retention, entity, fact) under FADING_RETENTION, most faded first, of the facts that can fade
        (can_fade): for --lint and the UI."""
        clock = self.meta.clock()
        return sorted((r, e.name, o) for e in graph.entities for o in e.observations
                      if (r := self.fading(e, o, clock)) is not None)

    def flags(self, entity: Entity, text: str, clock: ActivityClock) -> str:
        """The marks after a fact in open_nodes and recall: [pinned] or [fading 0.25], then its anchor's state."""
        flags = []
        if self.meta.state(entity.name, text).pinned:
            flags.append("pinned")
        else:
            r = self.fading(entity, text, clock)
            if r is not None:
                flags.append(f"fading {r:.2f}")
        note = self.anchors.note(entity.name, text)
        return (f" [{', '.join(flags)}]" if flags else "") + note

    def fact_notes(self, graph: Graph) -> Callable[[ScoredFact], str]:
        """What recall writes after a fact: its flags (pinned, fading) and its anchor's state. The recall tool
        and the guardrail's probes use the same notes."""
        clock = self.meta.clock()
        return lambda f: self.flags(graph.get(f.entity), f.text, clock)

    @staticmethod
    def conflict_notes(graph: Graph) -> Callable[[list[ScoredFact]], Callable[[ScoredFact], str]]:
        """For the facts recall shows: which of two facts of one entity kept as a possible conflict is newer
        (later in the entity's list: facts are appended as written). Only among the shown facts, once they are
        chosen: working it out for every candidate made recall at 10k facts several times slower."""
        def for_shown(shown: list[ScoredFact]) -> Callable[[ScoredFact], str]:
            texts: dict[str, set[str]] = {}
            for fact in shown:
                texts.setdefault(fact.entity, set()).add(fact.text)
            flags = {entity: conflicts_among(graph.get(entity), group) for entity, group in texts.items()
                     if len(group) > 1}
            return lambda f: flags.get(f.entity, {}).get(f.text, "")
        return for_shown


# ════════════════════════════════════════════════════════════════════════════
# 8b. Code anchors: facts that name the code they are about
# ════════════════════════════════════════════════════════════════════════════

ANCHOR = re.compile(r"\[@([^\]\s]+)\]\s*$")
ANCHOR_PY = (".py", ".pyi")
ANCHOR_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv", "env", "build", "dist"})
ANCHOR_MAX_FILES = 20_000         # files walked for did-you-mean and when following moved code
ANCHOR_MAX_BYTES = 2_000_000      # bigger files are skipped when following moved code
ANCHOR_RACY_NS = 2_000_000_000    # a file read this soon after its mtime may change again under the same stamp
ANCHOR_STALE_PENALTY = 0.6        # stale and gone anchored facts rank lower in recall, never hidden
_ANCHOR_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def parse_anchor(text: str) -> tuple[str, str] | None:
    """(path, symbol) of the `[@path]` / `[@path::Symbol]` marker ending a fact; symbol is '' for a file."""
    if "[@" not in text:
        return None
    m = ANCHOR.search(text)
    if not m:
        return None
    path, _, symbol = m.group(1).partition("::")
    return (posixpath.normpath(path) if path else path), symbol


def anchor_label(path: str, symbol: str) -> str:
    """"path::Symbol" (or just the path) as a fact's [@...] marker writes it."""
    return f"{path}::{symbol}" if symbol else path


def anchor_path_problem(path: str) -> str | None:
    """Why an anchor's path cannot name a file under the project root (absolute, backslashes, "..", empty), or None."""
    if not path or path == ".":
        return "the anchor names no file"
    if "\\" in path:
        return "use forward slashes in anchor paths"
    if path.startswith("/") or re.match(r"[A-Za-z]:", path):
        return "anchor paths are relative to the project root, not absolute"
    if path.split("/")[0] == "..":
        return "anchor paths must stay inside the project root"
    return None


def _anchor_digest(data: str | bytes) -> str:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


_AST_SKIP = frozenset({"type_comment", "kind", "ctx"})  # formatting, or implied by position


class _AstForm:
    """Canonical text of a syntax tree: no positions, comments, formatting or docstrings.

    A def or class is written as repr(name) + ":" + its nameless form, and the nameless forms
    are kept, so every node is visited once however deep the symbols nest."""

    def __init__(self) -> None:
        self.nameless: dict[int, str] = {}

    def of(self, node: ast.AST, nameless: bool = False) -> str:
        """The source-independent form of an AST node (nameless: without the defined name, to find a moved or renamed
        symbol)."""
        if nameless and isinstance(node, _ANCHOR_DEFS):
            return self._nameless(node)
        out: list[str] = []
        self._write(node, out)
        return "".join(out)

    def _nameless(self, node: Any) -> str:
        text = self.nameless.get(id(node))
        if text is None:
            out = [type(node).__name__, "("]
            body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
            for field in node._fields:
                if field == "name" or field in _AST_SKIP:
                    continue
                out += [field, "="]
                self._write_value(body if field == "body" else getattr(node, field, None), out)
                out.append(",")
            out.append(")")
            text = self.nameless[id(node)] = "".join(out)
        return text

    def _write(self, node: Any, out: list[str]) -> None:
        cls = type(node)
        if cls in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            out += [repr(node.name), ":", self._nameless(node)]
            return
        out += [cls.__name__, "("]
        for field in cls._fields:
            if field in _AST_SKIP:
                continue
            out += [field, "="]
            self._write_value(getattr(node, field, None), out)
            out.append(",")
        out.append(")")

    def _write_value(self, value: Any, out: list[str]) -> None:
        if type(value) is list:
            out.append("[")
            for item in value:
                self._write_value(item, out)
                out.append(",")
            out.append("]")
        elif isinstance(value, ast.AST):
            self._write(value, out)
        else:
            out.append(repr(value))


def python_symbols(tree: ast.Module) -> dict[str, str]:
    """Dotted path -> fingerprint of every def and class (and module/class-level `NAME = ...`); own name excluded."""
    form = _AstForm()
    out: dict[str, str] = {}

    def visit(body: list[Any], prefix: str, in_function: bool) -> None:
        for node in body:
            if isinstance(node, _ANCHOR_DEFS):
                name = prefix + node.name
                out[name] = _anchor_digest(form.of(node, nameless=True))
                visit(node.body, name + ".", in_function or not isinstance(node, ast.ClassDef))
            elif isinstance(node, ast.Assign) and not in_function:
                if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    out[prefix + node.targets[0].id] = _anchor_digest("=" + form.of(node.value))
            elif isinstance(node, ast.AnnAssign) and not in_function:
                if isinstance(node.target, ast.Name):
                    value = form.of(node.value) if node.value is not None else ""
                    out[prefix + node.target.id] = _anchor_digest(":" + form.of(node.annotation) + "=" + value)
            else:  # defs under if / try / with / match at the same level
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    sub = getattr(node, field, None)
                    if isinstance(sub, list):
                        visit(sub, prefix, in_function)

    visit(tree.body, "", False)
    return out


@dataclasses.dataclass
class _AnchorRow:
    root: str
    path: str
    symbol: str
    fingerprint: str
    verified: float
    mtime_ns: int = 0   # stamp of `path` when the fingerprint last matched there (size -1: none trusted yet);
    size: int = -1      # an unchanged stamp means unchanged code, so a restarted server need not parse it


class _FileVersion:
    """What one file version (mtime_ns, size) yielded: raw digest, content fingerprint, symbols."""
    __slots__ = ("stamp", "trusted", "raw", "content", "symbols", "error")

    def __init__(self, stamp: tuple[int, int]):
        self.stamp = stamp
        self.trusted = False
        self.raw: str | None = None
        self.content: str | None = None
        self.symbols: dict[str, str] | None = None
        self.error: str | None = None


class AnchorChecker:
    """Resolves `[@path]` / `[@path::Symbol]` markers at the end of a fact against the project root."""

    def __init__(self, meta: MetaStore, project_root: Path | None):
        self.meta = meta                  # where fingerprints are kept (the anchors table)
        self.project_root = project_root  # Settings.project_root: where new anchors resolve
        self.files: dict[str, _FileVersion] = {}   # absolute path -> facts of its last seen (mtime_ns, size)
        self.hash_count = 0    # file parses and content hashes done; unchanged files are never hashed twice

    def root(self) -> Path:
        """Where new anchors resolve: settings.project_root, else the working directory."""
        return Path(self.project_root) if self.project_root else Path.cwd().resolve()

    # ── files, cached by (mtime_ns, size) ──
    def _info(self, full: Path) -> _FileVersion | None:
        try:
            st = full.stat()
        except (OSError, ValueError):
            return None
        if not _stat.S_ISREG(st.st_mode):
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        key = str(full)
        info = self.files.get(key)
        if info is not None and info.stamp == stamp:
            if info.trusted or info.raw is None:
                return info
            # read within the timestamp's resolution of a write: the same stamp may hide a change
            with contextlib.suppress(OSError):
                if _anchor_digest(full.read_bytes()) == info.raw:
                    info.trusted = time.time_ns() - stamp[0] > ANCHOR_RACY_NS
                    return info
        info = self.files[key] = _FileVersion(stamp)
        return info

    def _load(self, full: Path, info: _FileVersion) -> bytes | None:
        try:
            data = full.read_bytes()
        except OSError:
            return None
        info.raw = _anchor_digest(data)
        info.trusted = time.time_ns() - info.stamp[0] > ANCHOR_RACY_NS
        return data

    def content_fingerprint(self, full: Path) -> str | None:
        """Hash of the file with whitespace normalised; None when there is no such file."""
        info = self._info(full)
        if info is None:
            return None
        if info.content is None:
            data = self._load(full, info)
            if data is None:
                return None
            self.hash_count += 1
            info.content = _anchor_digest(b" ".join(data.split()))
        return info.content

    def symbols(self, full: Path) -> tuple[dict[str, str] | None, str | None]:
        """(dotted symbol -> body fingerprint, parse error); (None, None) when there is no such file."""
        info = self._info(full)
        if info is None:
            return None, None
        if info.symbols is None:
            data = self._load(full, info)
            if data is None:
                return None, None
            self.hash_count += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    info.symbols, info.error = python_symbols(ast.parse(data)), None
            except SyntaxError as err:
                info.symbols, info.error = {}, f"syntax error on line {err.lineno}"
            except (ValueError, RecursionError, MemoryError) as err:
                info.symbols, info.error = {}, f"cannot be parsed ({type(err).__name__})"
        return info.symbols, info.error

    def _locate(self, root: Path, path: str, symbol: str) -> tuple[str, str | None]:
        """('ok', fingerprint) | ('no file', None) | ('no symbol', None) | ('unparsable', why)."""
        full = root / path
        if not symbol:
            fp = self.content_fingerprint(full)
            return ("ok", fp) if fp else ("no file", None)
        found, error = self.symbols(full)
        if found is None:
            return "no file", None
        if error:
            return "unparsable", error
        fp = found.get(symbol)
        return ("ok", fp) if fp else ("no symbol", None)

    def _walk(self, root: Path) -> Iterator[tuple[str, Path]]:
        """Project files (relative path, full path), sorted, hidden and vendored folders skipped, bounded."""
        count = 0
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ANCHOR_SKIP_DIRS)
            rel = os.path.relpath(folder, root).replace(os.sep, "/")
            for name in sorted(names):
                count += 1
                if count > ANCHOR_MAX_FILES:
                    return
                yield (name if rel == "." else f"{rel}/{name}"), Path(folder, name)

    # ── the anchors table ──
    def _row(self, entity: str, text: str) -> _AnchorRow | None:
        try:
            row = self.meta.anchor_row(entity, text)
        except (sqlite3.Error, UnicodeEncodeError):  # e.g. a lone surrogate in a hand-edited fact
            return None
        return _AnchorRow(*row) if row else None

    def _save(self, entity: str, text: str, row: _AnchorRow) -> None:
        try:
            self.meta.save_anchor(entity, text, dataclasses.astuple(row))
        except (sqlite3.Error, UnicodeEncodeError) as err:  # a read must still answer; retried next time
            log(f"warning: cannot record the code anchor of {short(text, 60)!r}: {err}")

    def _record_now(self, entity: str, text: str, path: str, symbol: str) -> _AnchorRow | None:
        """Fingerprint the anchor under the current project root and store it; None when it does not resolve."""
        root = self.root()
        kind, fp = self._locate(root, path, symbol)
        if kind != "ok" or fp is None:
            return None
        row = _AnchorRow(str(root), path, symbol, fp, time.time(), *self._trusted_stamp(root, path))
        self._save(entity, text, row)
        return row

    def _trusted_stamp(self, root: Path, path: str) -> tuple[int, int]:
        """(mtime_ns, size) of a file just fingerprinted, if no write can hide behind it; else (0, -1)."""
        info = self.files.get(str(root / path))
        return info.stamp if info is not None and info.trusted else (0, -1)

    @staticmethod
    def _unchanged_since_match(row: _AnchorRow) -> bool:
        if row.size < 0:
            return False
        try:
            st = os.stat(os.path.join(row.root, row.path))
        except (OSError, ValueError):
            return False
        return (st.st_mtime_ns, st.st_size) == (row.mtime_ns, row.size)

    def _confirm(self, entity: str, text: str, row: _AnchorRow, root: Path) -> None:
        """The fingerprint matched at row.path: remember that file's stamp (a write only when it changed)."""
        stamp = self._trusted_stamp(root, row.path)
        if stamp != (row.mtime_ns, row.size):
            row.mtime_ns, row.size = stamp
            self._save(entity, text, row)

    # ── write time ──
    def check_new(self, text: str) -> str | None:
        """Why an anchored fact cannot be stored (the anchor does not resolve), or None."""
        parsed = parse_anchor(text)
        if not parsed:
            return None
        path, symbol = parsed
        marker = f"[@{anchor_label(path, symbol)}]"
        problem = anchor_path_problem(path)
        if problem:
            return f"anchor {marker}: {problem}"
        root = self.root()
        full = root / path
        if full.is_dir():
            return f"anchor {marker} names a folder; anchor a file, or a file and a symbol: [@path::Name]"
        if not full.is_file():
            hints = self._suggest_files(root, path)
            return (f"anchor {marker} does not resolve: no file {path} under {root}"
                    + (f"; did you mean {', '.join(f'[@{h}]' for h in hints)}?" if hints else ""))
        if not symbol:
            return None
        if full.suffix.lower() not in ANCHOR_PY:
            return f"anchor {marker}: symbols resolve only in Python files; anchor the whole file with [@{path}]"
        found, error = self.symbols(full)
        if error:
            return f"anchor {marker} does not resolve: {path} {error}"
        if found and symbol in found:
            return None
        names = list(found or {})
        tail = symbol.rsplit(".", 1)[-1].lower()
        hints = [n for n in names if n.rsplit(".", 1)[-1].lower() == tail]
        hints += difflib.get_close_matches(symbol, names, n=5, cutoff=0.6)
        hints = list(dict.fromkeys(hints))[:5]
        if hints:
            tip = f"; did you mean {', '.join(f'[@{path}::{h}]' for h in hints)}?"
        else:
            top = [n for n in names if "." not in n][:8]
            tip = f"; it defines {', '.join(top)}" if top else "; it defines no functions or classes"
        return f"anchor {marker} does not resolve: no symbol {symbol} in {path}{tip}"

    def _suggest_files(self, root: Path, path: str) -> list[str]:
        rels = [rel for rel, _ in self._walk(root)]
        base = posixpath.basename(path)
        by_name: dict[str, list[str]] = {}
        for rel in rels:
            by_name.setdefault(posixpath.basename(rel), []).append(rel)
        hints = list(by_name.get(base, []))
        for name in difflib.get_close_matches(base, list(by_name), n=3, cutoff=0.75):
            hints += by_name[name][:2]
        hints += difflib.get_close_matches(path, rels, n=3, cutoff=0.8)
        return list(dict.fromkeys(hints))[:5]

    def on_new_fact(self, entity: str, text: str) -> None:
        """Record the fingerprint of a newly stored anchored fact (idempotent: a recorded one is kept)."""
        parsed = parse_anchor(text)
        if not parsed or anchor_path_problem(parsed[0]):
            return
        if self._row(entity, text) is not None:  # recorded already (a deleted fact's record goes with it)
            return
        self._record_now(entity, text, *parsed)

    # ── read time ──
    def note(self, entity: str, text: str) -> str:
        """' [stale: body edited]' etc. for an anchored fact shown to an agent; '' otherwise."""
        st = self.status(entity, text)
        return "" if st is None or st["state"] == "current" else f" [{st['state']}: {st['detail']}]"

    def is_stale(self, entity: str, text: str) -> bool:
        """Whether the code a fact is anchored to changed (stale) or is gone."""
        st = self.status(entity, text)
        return st is not None and st["state"] in ("stale", "gone")

    def rank_penalty(self, entity: str, text: str) -> float:
        """Recall's weight for a fact: ANCHOR_STALE_PENALTY when its code changed or is gone, else 1."""
        return ANCHOR_STALE_PENALTY if self.is_stale(entity, text) else 1.0

    def status(self, entity: str, text: str) -> dict[str, str] | None:
        """{"state": current|stale|moved|gone, "detail": ...} for an anchored fact; None otherwise."""
        parsed = parse_anchor(text)
        if not parsed or anchor_path_problem(parsed[0]):
            return None
        row = self._row(entity, text) or self._record_now(entity, text, *parsed)  # unrecorded: recorded as of now
        if row is None:
            return None
        if self._unchanged_since_match(row):  # not even parsed: the file is as it was when it matched
            if (row.path, row.symbol) == parsed:
                return {"state": "current", "detail": f"{anchor_label(*parsed)} unchanged"}
            return {"state": "moved", "detail": f"now at {anchor_label(row.path, row.symbol)}"}
        root = Path(row.root)
        if not root.is_dir():  # that project is not on this machine (any more): nothing to say
            return None
        return self._evaluate(entity, text, row, root, *parsed)

    def _evaluate(self, entity: str, text: str, row: _AnchorRow, root: Path, path: str, symbol: str) -> dict[str, str]:
        base, named, held = row.fingerprint, (path, symbol), (row.path, row.symbol)
        edited = "body edited" if symbol else "file edited"
        kind, found = self._locate(root, path, symbol)
        if kind == "ok" and found == base:
            if held != named:  # the code came back to where the fact says
                self._follow_to(entity, text, row, named)
            else:
                self._confirm(entity, text, row, root)
            return {"state": "current", "detail": f"{anchor_label(*named)} unchanged"}
        if held != named:  # the anchor followed a move earlier
            held_kind, held_found = self._locate(root, *held)
            if held_kind == "ok" and held_found == base:
                self._confirm(entity, text, row, root)
                return {"state": "moved", "detail": f"now at {anchor_label(*held)}"}
            if held_kind == "ok":
                return {"state": "stale", "detail": f"{edited} (now at {anchor_label(*held)})"}
            if held_kind == "unparsable":
                return {"state": "stale", "detail": f"{held[0]} does not parse ({held_found})"}
        if kind == "ok":
            return {"state": "stale", "detail": edited}
        if kind == "unparsable":
            return {"state": "stale", "detail": f"{path} does not parse ({found})"}
        hit = self._find_moved(root, base, symbol, [held[0], path])
        if hit:
            self._follow_to(entity, text, row, hit)
            return {"state": "moved", "detail": f"now at {anchor_label(*hit)}"}
        if symbol and ((root / held[0]).is_file() or (root / path).is_file()):
            return {"state": "gone", "detail": "symbol deleted"}
        return {"state": "gone", "detail": "file deleted"}

    def _follow_to(self, entity: str, text: str, row: _AnchorRow, where: tuple[str, str]) -> None:
        row.path, row.symbol = where
        row.mtime_ns, row.size = self._trusted_stamp(Path(row.root), row.path)
        self._save(entity, text, row)

    def _find_moved(self, root: Path, base: str, symbol: str, near: list[str]) -> tuple[str, str] | None:
        """The one place the recorded code lives now: the same file first, then the project; None if none or several."""
        near = list(dict.fromkeys(near))
        if symbol:
            for rel in near:
                found, _ = self.symbols(root / rel)
                hits = [name for name, fp in (found or {}).items() if fp == base]
                if len(hits) == 1:
                    return rel, hits[0]
                if hits:
                    return None  # ambiguous: several copies of that body
        suffix = posixpath.splitext(near[0])[1].lower()
        hits: list[tuple[str, str]] = []
        for rel, full in self._walk(root):
            if rel in near:
                continue
            if symbol:
                if posixpath.splitext(rel)[1].lower() not in ANCHOR_PY:
                    continue
            elif posixpath.splitext(rel)[1].lower() != suffix:
                continue
            info = self._info(full)
            if info is None or info.stamp[1] > ANCHOR_MAX_BYTES:
                continue
            if symbol:
                found, _ = self.symbols(full)
                hits += [(rel, name) for name, fp in (found or {}).items() if fp == base]
            elif self.content_fingerprint(full) == base:
                hits.append((rel, ""))
            if len(hits) > 1:
                return None
        return hits[0] if hits else None

    def lint(self, graph: Graph) -> list[str]:
        """Lines for --lint: stale and gone anchored facts with the reason."""
        bad, anchored, moved = [], 0, 0
        for entity in graph.entities:
            for text in entity.observations:
                st = self.status(entity.name, text)
                if st is None:
                    continue
                anchored += 1
                moved += st["state"] == "moved"
                if st["state"] in ("stale", "gone"):
                    bad.append((entity.name, text, st))
        lines = [f"stale or gone code anchors: {len(bad)} (of {anchored} anchored facts; {moved} followed moved code)"]
        lines += [f"  {st['state']}: {st['detail']}: {name}: {short(text, 70)}" for name, text, st in bad[:50]]
        if len(bad) > 50:
            lines.append(f"  … and {len(bad) - 50} more")
        return lines

    def verify(self, entity: str, text: str) -> str:
        """'Still true': re-fingerprint the code the fact names as it is now."""
        parsed = parse_anchor(text)
        if not parsed:
            raise ToolError("that fact has no code anchor to verify (anchors end a fact: [@path] or [@path::Symbol])")
        path, symbol = parsed
        problem = anchor_path_problem(path)
        if problem:
            raise ToolError(f"cannot verify: {problem}")
        st = self.status(entity, text)
        row = self._row(entity, text)
        if st is None or row is None:
            raise ToolError(f"cannot verify: [@{anchor_label(path, symbol)}] does not resolve under {self.root()}; "
                            "delete the fact or write it again with an anchor that exists")
        if st["state"] == "gone":
            raise ToolError(f"cannot verify: {st['detail']}, the code it names no longer exists; delete the fact, "
                            "or write it again anchored to where that code lives now")
        root = Path(row.root)
        where = (row.path, row.symbol)
        if st["state"] == "stale" and where != (path, symbol) and self._locate(root, *where)[0] != "ok":
            where = (path, symbol)
        kind, fp = self._locate(root, *where)
        if kind != "ok" or fp is None:
            problem = f"does not parse ({fp})" if kind == "unparsable" else "is missing"
            raise ToolError(f"cannot verify: {anchor_label(*where)} {problem}")
        was = st["state"]
        row.path, row.symbol, row.fingerprint, row.verified = where[0], where[1], fp, time.time()
        row.mtime_ns, row.size = self._trusted_stamp(root, row.path)
        self._save(entity, text, row)
        at = "" if where == (path, symbol) else f" (the anchor follows it to {anchor_label(*where)})"
        return (f"Verified {_q(text)}: recorded {anchor_label(*where)} as it is now{at}; "
                f"it was {was}, now {'current' if not at else 'moved'}.")


# ════════════════════════════════════════════════════════════════════════════
# 9. Guardrail: probes re-run against the graph a clean-up would leave
# ════════════════════════════════════════════════════════════════════════════

@dataclasses.dataclass
class ProbeResult:
    """One probe run against a graph: the question, the entity (and fact) it expects, and whether recall found it."""
    query: str
    entity: str
    fact: str
    hit: bool


def run_probes(probes: list[tuple[str, str, str, str]], graph: Graph, budget: int,
               memory: "Memory") -> list[ProbeResult]:
    """A probe hits when recall on `graph` still returns its fact (or, for an entity probe, the entity): the
    same recall_pipeline agents get, with the same strength, stale-anchor penalty and flags."""
    index = SearchIndex()
    index.refresh(graph, 0)
    notes, flags = memory.lifecycle.fact_notes(graph), memory.lifecycle.conflict_notes(graph)
    if memory.vectors is not None:
        memory.vectors.prepare_queries([p[0] for p in probes])
    results = []
    for query, entity, fact, _source in probes:
        packed = recall_pipeline(index, graph, query, budget, memory.lifecycle.strength,
                                 memory.anchors.rank_penalty, notes, flags=flags, dense=memory.dense(graph, query)[0])
        shown = {(f.entity, f.text) for f in packed.shown}
        hit = (entity, fact) in shown if fact else any(e == entity for e, _ in shown)
        results.append(ProbeResult(query, entity, fact, hit))
    return results


def hit_rate(results: list[ProbeResult]) -> float:
    """The share of probes that hit (1.0 with no probes: nothing was lost)."""
    return sum(r.hit for r in results) / len(results) if results else 1.0


def unguarded_fades_kept(memory: "Memory", plan: dict[str, list[tuple[str, str]]]
                         ) -> tuple[dict[str, list[tuple[str, str]]], list[str]]:
    """(plan, note): with no probes, the plan without its faded facts (conservative: nothing to check them against)."""
    if memory.meta.probes():
        return plan, []
    kept = {name: [m for m in moves if m[1] != "compacted (faded)"] for name, moves in plan.items()}
    faded = sum(len(plan[name]) - len(moves) for name, moves in kept.items())
    note = [f"kept {faded} faded fact(s): no probes to check recall against yet (they are learned when an agent "
            "opens what recall found, or add one with --probe)"] if faded else []
    return {name: moves for name, moves in kept.items() if moves}, note


def guard_plan(memory: "Memory", graph: Graph, plan: dict[str, list[tuple[str, str]]]
               ) -> tuple[dict[str, list[tuple[str, str]]], list[str], bool]:
    """The plan the guardrail lets through: (plan, report lines, passed). When probes would fail, the facts they
    need (a fact probe: its fact; an entity probe: that entity's planned facts) leave the plan and the probes
    run again, so the rest of a clean-up is not blocked by one fact; never more than GUARD_ROUNDS tries."""
    report: list[str] = []
    now: list[ProbeResult] | None = None  # the probes on the graph as it is: the same every round
    for _ in range(GUARD_ROUNDS):
        lines, ok, lost, now = compact_guardrail(memory, graph, plan, now)
        report += lines
        if ok or not lost:
            return plan, report, ok
        facts = {(p.entity, p.fact) for p in lost if p.fact}
        entities = {p.entity for p in lost if not p.fact}
        kept = [(name, text) for name, moves in plan.items() for text, _ in moves
                if name in entities or (name, text) in facts]
        if not kept:  # the probes fail for another reason (ranking): nothing to keep back
            return plan, report, False
        keep = set(kept)
        plan = {name: [m for m in moves if (name, m[0]) not in keep] for name, moves in plan.items()}
        plan = {name: moves for name, moves in plan.items() if moves}
        report.append(f"kept {len(kept)} planned fact(s) those probes need in the active graph; checking again:")
        report += [f"  kept: {name}: {short(text, 80)}" for name, text in kept[:20]]
    return plan, report + ["guardrail: still failing after keeping what the probes need"], False


GUARD_ROUNDS = 3  # guardrail checks per --compact: the plan, then at most two smaller plans (a guess)


def compact_guardrail(memory: "Memory", graph: Graph, plan: dict[str, list[tuple[str, str]]],
                      now: list[ProbeResult] | None = None
                      ) -> tuple[list[str], bool, list[ProbeResult], list[ProbeResult] | None]:
    """Run every probe on the graph now (unless `now` has those results) and on the graph the plan would
    leave: (report lines, passed, the probes that hit now and would miss after, the results now)."""
    s = memory.settings
    probes = memory.meta.probes()
    if not probes:
        return (["guardrail: no probes recorded yet (they come from real use, or --probe); nothing to check"],
                True, [], None)
    leaving = {name: {text for text, _ in moves} for name, moves in plan.items()}
    after = Graph([Entity(e.name, e.entityType, [o for o in e.observations if o not in leaving.get(e.name, ())],
                          e.extra) for e in graph.entities], graph.relations)
    before_results = now if now is not None else run_probes(probes, graph, s.recall_budget, memory)
    after_results = run_probes(probes, after, s.recall_budget, memory)
    before, after_rate = hit_rate(before_results), hit_rate(after_results)
    lost = [a for b, a in zip(before_results, after_results) if b.hit and not a.hit]
    ok = before - after_rate <= s.guardrail_max_drop + 1e-9
    lines = [f"guardrail: {len(probes)} probes, hit rate {before:.1%} now, {after_rate:.1%} after "
             f"(max drop {s.guardrail_max_drop:.1%}): {'pass' if ok else 'FAIL'}"]
    lines += [f"  would fail: {_q(p.query, 60)} -> {p.entity}" + (f": {short(p.fact, 60)}" if p.fact else "")
              for p in lost[:20]]
    return lines, ok, lost, before_results


class ProbeLearner:
    """Where probes come from: a result the agent went on to open (or rated helpful) answered its query, so
    the query becomes an automatic probe; a person adds manual ones. Stored in memory.db (MetaStore)."""

    RECENT_SECONDS = 600.0  # how long a search or recall result can still be confirmed by opening it
    RECENT_KEPT = 20        # results remembered at most

    def __init__(self, meta: MetaStore):
        self.meta = meta
        self.recent: list[tuple[float, str, dict[str, list[str]]]] = []  # (when, query, {entity: facts shown})

    def remember_result(self, query: str, shown: dict[str, list[str]]) -> None:
        """A search or recall answer: what it showed, for `learn` to confirm."""
        now = time.time()
        self.recent = [r for r in self.recent if now - r[0] < self.RECENT_SECONDS][-self.RECENT_KEPT:]
        self.recent.append((now, query, shown))

    def learn(self, entities: set[str], fact: str | None = None) -> None:
        """The agent opened `entities` (or rated `fact` helpful): recent queries that showed them are probes."""
        for _, query, shown in self.recent:
            for entity in entities & set(shown):
                facts = [fact] if fact else shown[entity]
                for text in facts or [""]:
                    if fact is None or text in shown[entity]:
                        self.meta.add_probe(query, entity, text, "auto")

    def add(self, query: str, entity: str, fact: str) -> str:
        """A manual probe (the caller checked that the entity and fact exist)."""
        return "probe added" if self.meta.add_probe(query, entity, fact, "manual") else "probe already recorded"

    def listing(self) -> list[dict[str, Any]]:
        """Every probe: id, query, entity, fact, source (auto or manual)."""
        return [{"id": i, "query": q, "entity": e, "fact": f, "source": s} for i, q, e, f, s in self.meta.probe_rows()]

    def remove(self, probe_id: int) -> str:
        """Forget one probe; a clear error for an unknown id."""
        if not self.meta.remove_probe(probe_id):
            raise ToolError(f"no probe {probe_id}; graphmem --probes lists them")
        return f"probe {probe_id} removed"


# ════════════════════════════════════════════════════════════════════════════
# 9b. Receipts: the tokens of each read answer next to what the reference server would have returned
# ════════════════════════════════════════════════════════════════════════════

class Receipts:
    """The savings ledger (memory.db's ledger_days): for every read call, the tokens graphmem returned and the
    tokens @modelcontextprotocol/server-memory would have returned for the same call on the same graph,
    computed from per-item sizes (section 6, reference_size) without rendering its JSON."""

    def __init__(self, meta: MetaStore, index: SearchIndex):
        self.meta = meta
        self.index = index
        self._generation = -1
        self._relation_sizes: list[int] = []                        # per relation, in file order
        self._relation_size: dict[tuple[str, str, str], int] = {}  # kept across versions: a write changes few

    def ledger(self, client: str | None, tool: str, args: dict[str, Any], text: str, graph: Graph) -> str:
        """Record a read answer beside the reference server's answer to the same call; returns `text`."""
        if tool == "read_graph":
            docs = self.index.docs
        elif tool == "search_nodes":
            docs = self.index.reference_matches(str(args.get("query", "")))
        else:
            docs = [d for name in dict.fromkeys(args.get("names") or []) for d in self.index.docs_named(name)]
        self.record(tool, client, text, self.reference_tokens(graph, docs))
        return text

    def record(self, tool: str, client: str | None, text: str, reference_tokens: int) -> None:
        """One call in the ledger (best effort: memory.db may be busy)."""
        self.meta.record_call(tool, client, estimate_tokens(text), reference_tokens)

    def reference_tokens(self, graph: Graph, docs: list[EntityDoc]) -> int:
        """Tokens of the reference server's answer listing `docs` and the relations touching them."""
        generation = self.index.generation
        if generation != self._generation:
            known, sizes = self._relation_size, {}
            for r in graph.relations:
                key = (r.frm, r.to, r.relationType)
                if key not in sizes:
                    sizes[key] = known.get(key) or pretty_item_size({"from": r.frm, "to": r.to,
                                                                     "relationType": r.relationType})
            self._relation_size = sizes
            self._relation_sizes = [sizes[(r.frm, r.to, r.relationType)] for r in graph.relations]
            self._generation = generation
        if len(docs) == len(self.index.docs):
            chosen = self._relation_sizes
        else:  # each relation once, though both its ends may be among the docs
            touching = self.index.touching(graph)
            chosen = [self._relation_sizes[i]
                      for i in sorted({i for name in {d.name for d in docs} for i in touching.get(name, ())})]
        return tokens_for_chars(reference_size([d.ref_size for d in docs], chosen))


# ════════════════════════════════════════════════════════════════════════════
# 10. Tools: one table; writes answer data (WriteResult), one renderer makes the model's text
# ════════════════════════════════════════════════════════════════════════════

# ── results are data until the last moment: write handlers fill a WriteResult; render_text makes the text a
#    model reads, WriteResult.as_json the JSON the UI reads. Nothing parses the server's own sentences. ──
# Reason codes (stable, for the UI; the words for people are in each outcome's detail):
#   refused: empty, too_long, secret, anchor (facts and names); unknown_entity, renamed (an old name); exists;
#            not_found, ambiguous (a fact to mark, edit or restore); invalid_arguments; not_saved; error;
#            all_refused (the call as a whole: every new fact was refused, see refused for each one's reason)
#   skipped: duplicate, near_duplicate, exists (entity, relation), not_found, not_matched, already_active,
#            unchanged (an edit to the same text)
#   replaced: superseded, edited; archived: over_cap, by_hand; conflict: possible_conflict; removed: end_deleted
#   (a relation of a deleted entity); added: restored (from the archive); changed: renamed, retyped, or the
#   mark_fact action (pin, unpin, helpful, not_helpful, verified)
#   notes: over_cap_kept, archive_kept, store, metadata
OUTCOME_KINDS = ("added", "skipped", "replaced", "conflict", "refused", "removed", "archived", "changed", "note")
CHANGING_KINDS = ("added", "replaced", "removed", "archived", "changed")  # outcomes that mean something was saved


@dataclasses.dataclass
class Outcome:
    """One thing a write did or did not do, in the order it happened."""
    kind: str           # one of OUTCOME_KINDS
    what: str           # entity, fact, relation, name, type, mark; for notes: entity or call
    entity: str = ""    # the entity it is about ("" for relations and whole-call notes)
    text: str = ""      # the item: fact, relation line, new name or type; WITHHELD when it looks like a credential
    reason: str = ""    # a stable code (above)
    detail: str = ""    # the reason (or what happened) in words
    other: str = ""     # the older fact (replaced, conflict, skipped as a duplicate of), the old name or type
    pinned: bool = False  # conflict: the older fact is pinned
    group: int = 0      # the per-entity block of the call it belongs to (WriteResult.groups), 0 for none

    def as_json(self) -> dict[str, Any]:
        """This outcome for the UI: only the fields it has; a refusal's words under "message"."""
        out: dict[str, Any] = {"what": self.what, "entity": self.entity, "item": self.text, "reason": self.reason,
                               "detail": self.detail, "old": self.other}
        out = {k: v for k, v in out.items() if v}
        if self.kind == "refused":
            out["message"] = out.pop("detail", "")
        if self.kind == "conflict":
            out["pinned"] = self.pinned
            out["resolve"] = {"tool": "delete_observations", "arguments": conflict_resolution(self.entity, self.other)}
        return out


@dataclasses.dataclass
class WriteResult:
    """What a write did, as data: outcomes in order, per-entity blocks (entity, fact count after), a few figures
    the answer names (counts), and, when the call was refused as a whole, the error (nothing was saved)."""
    tool: str
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    groups: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    error: str | None = None
    error_reason: str = ""

    def add(self, kind: str, what: str, entity: str = "", **fields: Any) -> Outcome:
        """Record one thing the call did or did not do (kind: added, skipped, replaced, conflict, refused, removed,
        archived, changed, note)."""
        outcome = Outcome(kind, what, entity, **fields)
        self.outcomes.append(outcome)
        return outcome

    def open_group(self, entity: str) -> int:
        """Start a per-entity block (a fact batch, one deletion item); its number, from 1."""
        self.groups.append((entity, 0))
        return len(self.groups)

    def close_group(self, group: int, facts_now: int) -> None:
        """Record how many facts the entity of `group` holds after the call."""
        self.groups[group - 1] = (self.groups[group - 1][0], facts_now)

    def of(self, kind: str, what: str | None = None, group: int | None = None) -> list[Outcome]:
        """The outcomes of one kind (optionally of one kind of item, and of one entity's group)."""
        return [o for o in self.outcomes if o.kind == kind and what in (None, o.what) and group in (None, o.group)]

    @classmethod
    def refusal(cls, tool: str, err: ToolError | str, reason: str = "") -> "WriteResult":
        """A call refused as a whole; keeps what it had found (ToolError.result) for the UI."""
        found = err.result if isinstance(err, ToolError) and err.result is not None else cls(tool)
        found.error = str(err)
        found.error_reason = reason or (err.reason if isinstance(err, ToolError) else "error")
        return found

    @property
    def status(self) -> str:
        """done: all of it saved; partial: some saved, some refused or skipped; unchanged: nothing to do (all
        skipped); refused: nothing saved because something was refused."""
        if self.error is not None:
            return "refused"
        did = any(o.kind in CHANGING_KINDS for o in self.outcomes)
        failed = any(o.kind in ("refused", "skipped") for o in self.outcomes)
        if did:
            return "partial" if failed else "done"
        return "refused" if self.of("refused") else "unchanged"

    def as_json(self) -> dict[str, Any]:
        """For the UI: the status and one list per kind of outcome (conflicts: "conflicts"; notes: "notes")."""
        out: dict[str, Any] = {"tool": self.tool, "status": self.status}
        for kind in OUTCOME_KINDS:
            out["conflicts" if kind == "conflict" else "notes" if kind == "note" else kind] = []
        for o in self.outcomes:
            out["conflicts" if o.kind == "conflict" else "notes" if o.kind == "note" else o.kind].append(o.as_json())
        if self.error is not None:
            out["error"] = {"reason": self.error_reason, "message": self.error}
        return out


Answer = WriteResult | str  # what a tool answers before render_text: a write's result, or a read's text


def conflict_resolution(entity: str, older: str) -> dict[str, Any]:
    """The delete_observations arguments that would remove the older of two possibly conflicting facts."""
    return {"deletions": [{"entityName": entity, "observations": [older]}]}


def render_text(answer: Answer) -> str:
    """The one renderer: a handler's answer as the text a model reads (reads already answer in text)."""
    if isinstance(answer, str):
        return answer
    if answer.error is not None:
        return answer.error
    body = RENDERERS[answer.tool](answer)
    return "\n".join([body] + [o.detail for o in answer.of("note", "call")])


def fact_block_text(result: WriteResult, group: int) -> str:
    """One entity's facts of a call: "Name: +added, now N", then what was skipped, replaced, possibly conflicts,
    archived over the cap, and refused, in that order."""
    return "; ".join(fact_block_parts(result, group))


def fact_block_parts(result: WriteResult, group: int) -> list[str]:
    """The pieces of fact_block_text, the head first."""
    entity, now = result.groups[group - 1]
    parts = [f"{entity}: +{len(result.of('added', 'fact', group))}, now {now}"]
    for o in result.outcomes:
        if o.group != group:
            continue
        if o.kind == "skipped":
            parts.append(f"skipped {o.detail}" if o.reason == "duplicate" else f"skipped {_q(o.text, 60)}: {o.detail}")
        elif o.kind == "replaced":
            parts.append(f"replaced {_q(o.other)} (archived)")
        elif o.kind == "conflict":
            parts.append(conflict_note_text(o.entity, o.other, o.pinned))
    moved = result.of("archived", "fact", group)
    if moved:
        parts.append(f"{len(moved)} oldest dated archived ({moved[0].detail})")
    parts += [o.detail for o in result.of("note", "entity", group)]
    parts += [f"refused {'a fact' if o.reason == 'secret' else _q(o.text, 60)}: {o.detail}"
              for o in result.of("refused", "fact", group)]
    return parts


def conflict_note_text(entity: str, older: str, pinned: bool) -> str:
    """When unsure, say so: the older fact's exact text and the call that would remove it; the agent decides."""
    call = json.dumps(conflict_resolution(entity, older), ensure_ascii=False)
    flag = " (pinned)" if pinned else ""
    return f"possible conflict with the older {json.dumps(older, ensure_ascii=False)}{flag}: both kept; " \
           f"if it no longer holds: delete_observations {call}"


def _block_says_more(result: WriteResult, group: int) -> bool:
    """Whether a fact block has anything beyond facts added (else create_entities leaves it out)."""
    return any(o.group == group and o.kind != "added" for o in result.outcomes)


def _render_create_entities(r: WriteResult) -> str:
    created = [o.entity for o in r.of("added", "entity")]
    existed = [o.entity for o in r.of("skipped", "entity")]
    lines = []
    for o in r.outcomes:
        if o.kind == "refused" and o.what == "entity":
            lines.append(f"refused {_q(o.text)}: {o.detail}")
        elif o.kind == "added" and o.what == "entity" and _block_says_more(r, o.group):
            lines.append(fact_block_text(r, o.group))
    out = ([f"Created {len(created)}: {', '.join(created)}"] if created else []) + \
          ([f"Already existed (use add_observations): {', '.join(existed)}"] if existed else [])
    return "\n".join(out + lines) or "Nothing to create."


def _render_create_relations(r: WriteResult) -> str:
    out = [f"Created {len(r.of('added'))} relation(s)."]
    skipped = r.of("skipped")
    if skipped:
        out.append("Already existed: " + "; ".join(o.text for o in skipped))
    return "\n".join(out + [f"refused {short(o.text, 120)}: {o.detail}" for o in r.of("refused")])


def _render_add_observations(r: WriteResult) -> str:
    return "\n".join(fact_block_text(r, g) for g in range(1, len(r.groups) + 1)) or "Nothing to add."


def _render_delete_entities(r: WriteResult) -> str:
    out = f"Deleted {len(r.of('removed', 'entity'))} entities, {len(r.of('removed', 'relation'))} relations."
    missing = r.of("skipped", "entity")
    if missing:
        out += " Not found: " + ", ".join(_q(o.entity) for o in missing) + "."
    return " ".join([out] + [o.detail for o in r.of("note", "entity")])


def _render_delete_observations(r: WriteResult) -> str:
    lines = []
    for group, (entity, _) in enumerate(r.groups, 1):
        missing = r.of("skipped", "entity", group)
        if missing:
            lines.append(f"{_q(entity)}: {missing[0].detail}")
            continue
        line = f"{entity}: -{len(r.of('removed', 'fact', group))}"
        unmatched = r.of("skipped", "fact", group)
        if unmatched:
            line += f" ({len(unmatched)} not matched exactly: {', '.join(_q(o.text, 50) for o in unmatched[:3])})"
        lines.append(line)
    return "\n".join(lines) or "Nothing to delete."


def _render_delete_relations(r: WriteResult) -> str:
    out = f"Deleted {len(r.of('removed'))} of {r.counts['asked']} relation(s)."
    missing = r.of("skipped")
    if missing:  # which ones, so a typo in a name or relation type shows (first 5)
        out += " Not found: " + "; ".join(short(o.text, 120) for o in missing[:5]) + \
               (f" and {len(missing) - 5} more" if len(missing) > 5 else "") + "."
    return out


def _render_rename(r: WriteResult) -> str:
    o = r.of("changed", "name")[0]
    return f"Renamed {_q(o.other)} -> {_q(o.text)}; {r.counts['relation_ends']} relation end(s) updated; " \
           "facts and archive kept."


def _render_restore(r: WriteResult) -> str:
    entity, now = r.groups[0]
    moved = r.of("archived")
    note = f"; {len(moved)} older dated fact(s) archived to stay under the cap" if moved else ""
    return f"Restored {len(r.of('added'))} fact(s) to {entity}, now {now}{note}."


def _render_edit(r: WriteResult) -> str:
    if not r.of("replaced", group=0):
        return _render_detail(r)
    o = r.of("replaced", group=0)[0]
    rest = fact_block_parts(r, 1)[1:]
    return f"{o.entity}: fact edited." + (" " + "; ".join(rest) if rest else "")


def _render_detail(r: WriteResult) -> str:
    """Handlers whose one outcome carries its own words (type set, archived by hand, marked, undone)."""
    return next(o.detail for o in r.outcomes if o.kind != "note")


RENDERERS: dict[str, Callable[[WriteResult], str]] = {
    "create_entities": _render_create_entities, "create_relations": _render_create_relations,
    "add_observations": _render_add_observations, "delete_entities": _render_delete_entities,
    "delete_observations": _render_delete_observations, "delete_relations": _render_delete_relations,
    "rename_entity": _render_rename, "archived_observations": _render_restore, "edit_fact": _render_edit,
    "set_entity_type": _render_detail, "archive_fact": _render_detail, "mark_fact": _render_detail,
    "undo": _render_detail,
}


WHEN_HELP = ("Only facts written {edge} this time: an ISO 8601 date or date-time (UTC unless it says), "
             "or a relative time such as 30m, 12h, 7d, 2w")
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$", re.I)
_RELATIVE_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: float, name: str) -> float:
    """A point in time from an ISO 8601 date or date-time, or a relative form (7d = seven days ago)."""
    m = _RELATIVE.match(text)
    if m:
        return now - float(m.group(1)) * _RELATIVE_SECONDS[m.group(2).lower()]
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ToolError(f"{name} {_q(text)} is not a time: give a date (2026-11-24), a date-time "
                        "(2026-11-24T09:30Z) or a relative time (30m, 12h, 7d, 2w)") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)).timestamp()


def describe_window(window: tuple[float, float]) -> str:
    """A since/until window in words ("since 2026-11-24 09:30 UTC")."""
    start, end = (utc_stamp(t) if abs(t) != float("inf") else None for t in window)
    return (f"from {start} to {end}" if start and end else f"since {start}" if start else f"before {end}"
            if end else "at any time")


def time_window(since: str | None, until: str | None, now: float) -> tuple[float, float] | None:
    """(start, end) of a since/until pair, None when neither is given; a clear error when it is empty."""
    if since is None and until is None:
        return None
    start = parse_when(since, now, "since") if since is not None else float("-inf")
    end = parse_when(until, now, "until") if until is not None else float("inf")
    if start >= end:
        raise ToolError(f"since ({since}) is not before until ({until}): nothing can be in that window")
    return start, end


NAME_MAX_CHARS = 200  # entity names, types and relation types: labels, not facts


def name_problem(label: str, value: str) -> str | None:
    """Why a name, entity type, relation type or new name is refused, or None; never repeats the value."""
    refusal = name_refusal(label, value)
    return refusal[1] if refusal else None


def name_refusal(label: str, value: str) -> tuple[str, str] | None:
    """(reason code, words) when a name, entity type, relation type or new name is refused, else None."""
    if not value.strip():
        return "empty", f"{label} is empty"
    if len(value) > NAME_MAX_CHARS:
        return "too_long", (f"{label} is {len(value)} chars, over the {NAME_MAX_CHARS}-char limit for names: "
                            "keep names short, put detail in facts")
    secret = looks_like_secret(value)
    return ("secret", f"{label} {secret_refusal(secret)}") if secret else None


def require_name(label: str, value: str) -> None:
    """ToolError (with its reason code) when name_refusal refuses `value`."""
    refusal = name_refusal(label, value)
    if refusal:
        raise ToolError(refusal[1], refusal[0])


def fact_refusal(text: str, settings: Settings, anchors: "AnchorChecker") -> tuple[str, str] | None:
    """(reason code, words) when a new fact is refused (check_new_fact's checks, in its order, then its
    code anchor), else None."""
    words = check_new_fact(text, settings)
    if words:
        return ("empty" if not text.strip() else "too_long" if len(text) > settings.obs_max_chars else "secret"), words
    words = anchors.check_new(text)
    return ("anchor", words) if words else None


WITHHELD = "[withheld: looks like a credential]"


def _redacted(text: str) -> str:
    """text, or WITHHELD when it looks like a credential: answers and history never repeat a secret."""
    return WITHHELD if looks_like_secret(text) else text


def _s(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _arr(items: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": items}
    if description:
        schema["description"] = description
    return schema


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


_ENTITY_ITEM = _obj({"name": _s("The name of the entity"), "entityType": _s("The type of the entity"),
                     "observations": _arr({"type": "string"},
                                          "An array of observation contents associated with the entity")},
                    ["name", "entityType", "observations"])
_RELATION_ITEM = _obj({"from": _s("The name of the entity where the relation starts"),
                       "to": _s("The name of the entity where the relation ends"),
                       "relationType": _s("The type of the relation")}, ["from", "to", "relationType"])


def _annotations(read_only: bool, destructive: bool, idempotent: bool) -> dict[str, bool]:
    return {"readOnlyHint": read_only, "destructiveHint": destructive, "idempotentHint": idempotent,
            "openWorldHint": False}


# The MCP tool annotations, by kind of tool (hints a client may use to ask before a call, never a guarantee).
READS = _annotations(read_only=True, destructive=False, idempotent=True)
READS_AND_REINFORCES = _annotations(read_only=True, destructive=False, idempotent=False)  # recall: use grows strength
ADDS = _annotations(read_only=False, destructive=False, idempotent=False)
SETS = _annotations(read_only=False, destructive=False, idempotent=True)   # the same call twice changes nothing more
DELETES = _annotations(read_only=False, destructive=True, idempotent=True)


@dataclasses.dataclass(frozen=True)
class Tool:
    """One MCP tool: its name, title, description (limits rendered from Settings), input schema and annotations; the
    handler is Memory's method of the same name."""
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, bool]  # one of the presets above; the handler is the Memory method of the same name


_SCOPE = {"type": "string", "enum": ["project", "global"],
          "description": "project (default): this repository's memory; global: your personal memory, seen in every "
                         "project (preferences, your own conventions). Only differs inside a git project"}

TOOLS: list[Tool] = [
    Tool("create_entities", "Create Entities",
         "Create entities with short facts (one idea each, <={obs_max_chars} chars; prefix changing facts with an "
         "ISO date). Existing names are skipped.",
         _obj({"entities": _arr(_ENTITY_ITEM), "scope": _SCOPE}, ["entities"]), ADDS),
    Tool("create_relations", "Create Relations",
         "Create relations between existing entities, in active voice (depends_on, part_of, blocks).",
         _obj({"relations": _arr(_RELATION_ITEM), "scope": _SCOPE}, ["relations"]), ADDS),
    Tool("add_observations", "Add Observations",
         "Add facts to existing entities. Duplicates are skipped; a fact giving a new value replaces the old one "
         "(archived); over the cap the oldest dated facts are archived.",
         _obj({"observations": _arr(_obj({
             "entityName": _s("The name of the entity to add the observations to"),
             "contents": _arr({"type": "string"}, "An array of observation contents to add")},
             ["entityName", "contents"])), "scope": _SCOPE}, ["observations"]), ADDS),
    Tool("delete_entities", "Delete Entities", "Delete entities and their relations (archived facts are kept).",
         _obj({"entityNames": _arr({"type": "string"}, "An array of entity names to delete")}, ["entityNames"]),
         DELETES),
    Tool("delete_observations", "Delete Observations", "Delete facts from entities (exact text).",
         _obj({"deletions": _arr(_obj({
             "entityName": _s("The name of the entity containing the observations"),
             "observations": _arr({"type": "string"}, "An array of observations to delete")},
             ["entityName", "observations"]))}, ["deletions"]), DELETES),
    Tool("delete_relations", "Delete Relations", "Delete relations (exact from, to and relationType).",
         _obj({"relations": _arr(_RELATION_ITEM, "An array of relations to delete")}, ["relations"]),
         DELETES),
    Tool("read_graph", "Read Graph", "Index of the graph: entity names by type with fact counts (no facts).",
         _obj({"entityType": _s("List every entity of this type")}, []), READS),
    Tool("search_nodes", "Search Nodes",
         "Find entities: every word must match a name, type, fact or relation type. Returns ranked names with "
         "matching lines; open_nodes for full entities.",
         _obj({"query": _s("The search query to match against entity names, types, and observation content"),
               "limit": {"type": "integer", "description": "How many entities to list (default {search_limit})"},
               "since": _s(WHEN_HELP.format(edge="from")), "until": _s(WHEN_HELP.format(edge="before"))}, ["query"]),
         READS),
    Tool("open_nodes", "Open Nodes", "Open entities by exact name: all facts and relations.",
         _obj({"names": _arr({"type": "string"}, "An array of entity names to retrieve")}, ["names"]),
         READS),
    Tool("recall", "Recall",
         "The facts most relevant to a task from the whole graph, within a token budget. Start tasks with this. "
         "Marks after a fact: «words» the query words it matched, «~» matched by meaning, not by a query word; "
         "[newer of a conflict] / [older: conflicts with ...] two facts kept that may disagree (delete the wrong one).",
         _obj({"query": _s("What you are about to work on, in a few words"),
               "budget": {"type": "integer", "description": "Max tokens of the answer (default {recall_budget})"},
               "since": _s(WHEN_HELP.format(edge="from")), "until": _s(WHEN_HELP.format(edge="before"))}, ["query"]),
         READS_AND_REINFORCES),
    Tool("changes", "Changes",
         "What changed in memory in a time window: facts written, archived (superseded, over the cap, faded) and "
         "deleted, entities renamed, with the time of each; newest first. Read-only.",
         _obj({"since": _s(WHEN_HELP.format(edge="from")), "until": _s(WHEN_HELP.format(edge="before")),
               "limit": {"type": "integer", "description": "How many changes to list (default 50)"}}, ["since"]),
         READS),
    Tool("mark_fact", "Mark Fact",
         "Pin or unpin a fact (pinned never fades or gets replaced), rate it helpful or not_helpful, or mark a "
         "stale code-anchored fact verified (still true).",
         _obj({"entityName": _s("The entity holding the fact"), "observation": _s("The fact's exact text"),
               "action": {"type": "string", "enum": ["pin", "unpin", "helpful", "not_helpful", "verified"],
                          "description": "What to do"}}, ["entityName", "observation", "action"]),
         SETS),
    Tool("rename_entity", "Rename Entity", "Rename an entity; keeps its facts, relations and archive.",
         _obj({"name": _s("Current name"), "newName": _s("New name")}, ["name", "newName"]),
         ADDS),
    Tool("archived_observations", "Archived Observations",
         "List an entity's archived facts (filter with query) or restore chosen ones.",
         _obj({"entityName": _s("The entity"), "query": _s("Words every listed fact must contain"),
               "restore": _arr({"type": "string"}, "Exact archived facts to put back")}, ["entityName"]),
         ADDS),
]
TOOLS_BY_NAME = {t.name: t for t in TOOLS}


def validate_args(schema: dict[str, Any], value: Any, path: str = "") -> str | None:
    """A precise message for the first argument that does not fit the tool's input schema."""
    kind = schema.get("type")
    where = f" at {path}" if path else ""
    expected = {"object": dict, "array": list, "string": str, "boolean": bool}.get(kind)
    if kind == "integer":
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            return f"expected integer, received {_json_type(value)}{where}"
    elif expected and not isinstance(value, expected):
        return f"expected {kind}, received {_json_type(value)}{where}"
    if kind == "string" and "enum" in schema and value not in schema["enum"]:
        return f"expected one of {', '.join(schema['enum'])}, received {value!r}{where}"
    if kind == "object":
        for name in schema.get("required", []):
            if name not in value:
                return f"missing required field {path + '.' if path else ''}{name}"
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                problem = validate_args(sub, value[name], f"{path}.{name}" if path else name)
                if problem:
                    return problem
    if kind == "array":
        for i, item in enumerate(value):
            problem = validate_args(schema["items"], item, f"{path}[{i}]")
            if problem:
                return problem
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}
    return names.get(type(value), "value")


def _q(text: str, limit: int = 80) -> str:
    return json.dumps(short(text, limit), ensure_ascii=False)


DIRECT_COMPARE_MAX = 16  # facts compared pair by pair for recall's conflict flags; above, FactNeighbours (a guess:
                         # 120 pairs cost about what building the index for 16 facts does)


GLOBAL_HEADER = "== global memory (yours, every project; write here with scope: \"global\") =="
TIER_NAMES = {"team": "Team memory", "private": "Private memory", "global": "Global memory", "file": "Memory"}


def tier_title(settings: Settings) -> str:
    """What the project tier is, for read_graph's first line and --projects: kind, project, file."""
    project = settings.project
    if project is None or settings.tier == "global":
        return f"{TIER_NAMES[settings.tier]} ({settings.file_path}{'' if project else '; not in a git project'})"
    where = f"{TEAM_DIR}/memory.jsonl" if project.has_team else f"private to you, {project.identity}"
    return f"{TIER_NAMES[settings.tier]} of {project.root.name} ({where})"


# Deletes that may name entities of both tiers: (the list argument, the entity an item of it acts on).
TIER_SPLIT: dict[str, tuple[str, Callable[[Any], str]]] = {
    "delete_entities": ("entityNames", lambda name: name),
    "delete_observations": ("deletions", lambda item: item["entityName"]),
    "delete_relations": ("relations", lambda item: item["from"]),
}


def tier_entity_names(tool: str, args: dict[str, Any]) -> list[str]:
    """The entities a delete or edit call acts on, to find the graph they live in."""
    if tool == "delete_entities":
        return list(args.get("entityNames") or [])
    if tool == "delete_observations":
        return [d["entityName"] for d in args.get("deletions") or []]
    if tool in ("delete_relations",):
        return [r["from"] for r in args.get("relations") or []]
    if tool == "rename_entity":
        return [args["name"]]
    if tool in ("mark_fact", "archived_observations"):
        return [args["entityName"]]
    return []


class Memory:
    """The graph with its lifecycle: every change from an agent or the UI goes through here."""

    def __init__(self, settings: Settings, client: str | None = None):
        self.settings = settings
        self._global: Memory | None = None  # the global graph beside a project's graph, made when first needed
        self._project_recorded = False  # project.json of a private project, written once per process
        self.store = GraphStore(settings)
        self.meta = MetaStore(self.store.meta_path, settings.now)
        self.index = SearchIndex()
        self.client = client
        self.lock = threading.RLock()
        self.receipts = Receipts(self.meta, self.index)
        self.probes = ProbeLearner(self.meta)
        self.anchors = AnchorChecker(self.meta, settings.project_root)
        self.lifecycle = Lifecycle(self.meta, self.anchors)
        self.hints_left = HINTS_PER_CALL  # did-you-mean budget, renewed by each call
        self.vectors = FactVectors(EmbeddingClient(settings), self.meta) if settings.embeddings_url else None

    # ── reading ──
    def warm_up(self) -> int:
        """Load the graph and build everything the first call would (index, relation index, reference
        sizes for the receipts), so it does not pay for them. Returns the number of facts."""
        graph = self.fresh_graph()
        self.receipts.reference_tokens(graph, self.index.docs[:1])  # relation sizes and the relation index
        self.index.docs_named("")  # the name map
        return sum(len(doc.facts) for doc in self.index.docs)

    def fresh_graph(self) -> Graph:
        """The graph as the file holds it now (read again only when the file changed), with the facts' state
        (MetaStore) and the search index brought up to date with it."""
        graph = self.store.read()
        self.meta.reconcile(graph, self.store.generation, self.client)
        self.index.refresh(graph, self.store.generation)
        return graph

    def dense(self, graph: Graph, query: str, generation: int | None = None) -> tuple[Dense | None, str]:
        """Real embeddings for a read (MEMORY_EMBEDDINGS_URL), and the note when they could not be used."""
        return (None, "") if self.vectors is None else self.vectors.for_query(graph, query, generation)

    def call_tool(self, name: str, arguments: Any, client: str | None = None) -> tuple[str, bool]:
        """Run a tool: (text, is_error). Never raises for bad input. client: who acts, for this call only
        (the ledger, history and fact sources record it); None: the client this Memory serves."""
        answer, is_error = self.answer_tool(name, arguments, client)
        return render_text(answer), is_error

    def answer_tool(self, name: str, arguments: Any, client: str | None = None) -> tuple[Answer, bool]:
        """Run a tool: (its answer as data, is_error). Writes answer a WriteResult (render_text makes the
        model's text, as_json the UI's), reads answer text. Never raises for bad input."""
        if client is not None and client != self.client:
            with self.acting_as(client):
                return self.answer_tool(name, arguments)
        tool = TOOLS_BY_NAME.get(name)
        if tool is None:
            raise KeyError(name)
        if arguments is None:
            arguments = {}
        problem = validate_args(tool.input_schema, arguments)
        if problem:
            return WriteResult.refusal(name, f"Invalid arguments for {name}: {problem}.", "invalid_arguments"), True
        arguments = dict(arguments)
        scope = arguments.pop("scope", None)
        try:
            if self.settings.global_path is not None:
                routed = self._across_tiers(name, arguments, scope)
                if routed is not None:
                    return routed
            return self._run_tool(tool, arguments)
        finally:
            self._record_project()

    @contextlib.contextmanager
    def acting_as(self, client: str) -> Iterator[None]:
        """Record `client` as the actor of what runs inside (one call: an agent's, or a UI op), holding the
        lock so no other thread's call is recorded under it."""
        with self.lock:
            previous, self.client = self.client, client
            try:
                yield
            finally:
                self.client = previous

    def _run_tool(self, tool: "Tool", arguments: dict[str, Any]) -> tuple[Answer, bool]:
        with self.lock:
            try:
                handler = getattr(self, tool.name)
                return self._one_call(lambda: handler(**{k: v for k, v in arguments.items()
                                                     if k in tool.input_schema["properties"]})), False
            except ToolError as err:
                return WriteResult.refusal(tool.name, err), True
            except StoreError as err:
                return WriteResult.refusal(tool.name, f"Not saved: {err}.", "not_saved"), True
            except OSError as err:
                return WriteResult.refusal(tool.name, f"Not saved: cannot write {self.settings.file_path} "
                                           f"({err.strerror or err}).", "not_saved"), True

    # ── tiers: a project's graph (team or private), with the global graph read alongside ──
    def _across_tiers(self, name: str, args: dict[str, Any], scope: str | None) -> tuple[Answer, bool] | None:
        """A call in a project: writes go to the project unless scope is "global"; reads span both graphs (the
        global one marked); deletes and edits act where the entity lives. None: run it on the project graph."""
        if name in ("create_entities", "add_observations", "create_relations"):
            if scope == "global":
                return self.global_memory(create=True).answer_tool(name, args, self.client)
            return self._write_naming_global(name, args)
        other = self.global_memory(create=False)
        if other is None:  # no global memory yet: nothing to read alongside or to act on
            return None
        if name in ("search_nodes", "recall", "read_graph"):
            return self._with_global(name, args)
        if name == "open_nodes":
            mine = self.fresh_graph().by_name()
            theirs = other.fresh_graph().by_name()
            elsewhere = [n for n in args["names"] if n not in mine and n in theirs]
            if not elsewhere:
                return None
            here = [n for n in args["names"] if n not in elsewhere]
            text, _ = other.call_tool(name, {"names": elsewhere}, self.client)
            if here:
                local, error = self.call_tool(name, {"names": here})
                return f"{local}\n{GLOBAL_HEADER}\n{text}", error
            return f"{GLOBAL_HEADER}\n{text}", False
        named = tier_entity_names(name, args)
        if named and all(other.fresh_graph().get(n) and not self.fresh_graph().get(n) for n in named):
            return other.answer_tool(name, args, self.client)
        global_only = {n for n in named if other.fresh_graph().get(n) and not self.fresh_graph().get(n)}
        if global_only and name in TIER_SPLIT:  # a delete naming entities of both tiers: each acts where it lives
            return self._split_across_tiers(name, args, global_only, other)
        return None

    def _write_naming_global(self, name: str, args: dict[str, Any]) -> tuple[Answer, bool] | None:
        """A project write naming an entity only your global memory has (add_observations to it, a relation to
        it): run here as usual, and when it was refused, say where that entity is and how to write there."""
        other = self.global_memory(create=False)
        if other is None or name == "create_entities":
            return None
        named = ([o.get("entityName") for o in args.get("observations") or []] if name == "add_observations" else
                 [n for r in args.get("relations") or [] for n in (r.get("from"), r.get("to"))])
        mine, theirs = self.fresh_graph(), other.fresh_graph()
        elsewhere = list(dict.fromkeys(n for n in named if isinstance(n, str) and theirs.get(n) and not mine.get(n)))
        if not elsewhere:
            return None
        answer, error = self._run_tool(TOOLS_BY_NAME[name], args)
        if isinstance(answer, WriteResult) and (error or answer.of("refused")):
            where = ", ".join(_q(n) for n in elsewhere[:5])
            note = (f"{where} {'is' if len(elsewhere) == 1 else 'are'} in your global memory, not this project's: "
                    "send the call with scope: \"global\" to write there (a relation links entities of one memory)")
            if answer.error is not None:  # refused as a whole: the error is what is shown
                answer.error += f"\n{note}"
            else:
                answer.add("note", "call", reason="global", detail=note)
        return answer, error

    def _split_across_tiers(self, name: str, args: dict[str, Any], global_only: set[str],
                            other: "Memory") -> tuple[Answer, bool]:
        """A delete naming entities of both tiers: the project's part here, the global part in the global graph,
        its answer added as a note (one answer, one status: the project's)."""
        key, entity_of = TIER_SPLIT[name]
        here = [item for item in args[key] if entity_of(item) not in global_only]
        there = [item for item in args[key] if entity_of(item) in global_only]
        answer, error = self._run_tool(TOOLS_BY_NAME[name], {**args, key: here})
        more, more_error = other.call_tool(name, {**args, key: there}, self.client)
        if isinstance(answer, WriteResult):
            answer.add("note", "call", reason="global", detail=f"In your global memory: {more}")
        return answer, error or more_error

    def global_memory(self, create: bool) -> "Memory | None":
        """The global graph read alongside this project's graph; None without one (create: make it)."""
        path = self.settings.global_path
        if path is None or (self._global is None and not create and not path.exists()):
            return None
        if self._global is None:
            self._global = Memory(dataclasses.replace(self.settings, file_path=path, global_path=None, tier="global"),
                                  self.client)
        return self._global

    def _with_global(self, name: str, args: dict[str, Any]) -> tuple[str, bool]:
        """The project's answer, then the global graph's under GLOBAL_HEADER when it has something; recall
        stays within its budget (the global part gets what the project's answer left)."""
        text, error = self._run_tool(TOOLS_BY_NAME[name], args)
        other = self.global_memory(create=False)
        if error or other is None or not other.fresh_graph().entities:
            return text, error
        extra = dict(args)
        budget = int(args.get("budget") or self.settings.recall_budget)
        if name == "recall":
            left = budget - estimate_tokens(f"{text}\n{GLOBAL_HEADER}\n")
            ranked = other.index.rank_facts(args["query"], other.lifecycle.strength, None).facts
            if left < 50 or not ranked:
                return text, error
            extra["budget"] = left
        elif name == "search_nodes" and not other.index.match_entities(args["query"]):
            return text, error
        more, more_error = other.call_tool(name, extra, self.client)
        if name != "read_graph" and self._missed(args["query"]):  # "try other words" would mislead: global has it
            text = f"Nothing in this project's memory matched {_q(args['query'], 60)}."
        combined = f"{text}\n{GLOBAL_HEADER}\n{more}"
        if more_error or (name == "recall" and estimate_tokens(combined) > budget):
            return text, error
        return combined, error

    def _missed(self, query: str) -> bool:
        """Nothing in this graph matches `query`, by name or by fact (what search_nodes and recall look at)."""
        self.fresh_graph()
        return not self.index.match_entities(query) and not self.index.rank_facts(query, self.lifecycle.strength,
                                                                                  None).facts

    def _record_project(self) -> None:
        """Once per process, when a private project's folder exists (a write, or the savings ledger of a read
        made it): its project.json, so --projects can say which project and where it was last seen."""
        project = self.settings.project
        if self._project_recorded or self.settings.tier != "private" or project is None:
            return
        if self.settings.file_path.parent.is_dir():
            self._project_recorded = True
            record_project(project)

    def _mutate(self, summary: str, change: Callable[[Transaction], Answer]) -> Answer:
        """One code path for a change: lock, fresh read, change, archive, atomic write, history.
        When the lock or the file changed under the write (WriteConflict), it is re-read and re-applied.
        change answers a WriteResult (the store's notes join its outcomes) or, for maintenance, text."""
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                with self.store.transaction() as tx:
                    self.fresh_graph()  # fact state for the fresh graph (pins, anchors) as of now
                    result = change(tx)
                    changes = tx.changes() if tx.changed else None
                break
            except WriteConflict as err:
                log(f"{err}; re-reading and applying the change again ({attempt}/{WRITE_ATTEMPTS})")
                if attempt == WRITE_ATTEMPTS:
                    raise StoreError(f"{err}, {WRITE_ATTEMPTS} times in a row; nothing was changed, "
                                     "try again") from None
        self._after_commit(tx, summary, changes)
        if isinstance(result, WriteResult):
            for note in tx.notes:
                result.add("note", "call", reason="store", detail=note)
            return result
        return "\n".join([result, *tx.notes])

    def _after_commit(self, tx: Transaction, summary: str, changes: dict[str, Any] | None) -> None:
        """Metadata of a saved change (moved pins, history, anchors): best effort; the answer's note says
        what failed (see MetaStore.note)."""
        if tx.fact_moves:
            self.meta.move_facts(tx.fact_moves)
        if changes and (changes["entities"] or changes["relationsAdded"] or changes["relationsRemoved"]):
            self.meta.record_history(self.client, summary, changes)
        if changes:
            self.meta.reconcile_own_change(changes, self.store.generation, self.client)
        self.fresh_graph()
        if changes:
            self._after_write(changes)

    def _after_write(self, changes: dict[str, Any]) -> None:
        for item in changes["entities"]:
            after = item["after"]
            if after:
                for text in after["observations"]:
                    self.anchors.on_new_fact(after["name"], text)
        if self.vectors is not None:  # after the commit, outside the file lock; a failure only delays them
            self.vectors.fill(text for item in changes["entities"] if item["after"]
                              for text in item["after"]["observations"])

    def _existing_entity(self, graph: Graph, name: str) -> Entity:
        """The entity named `name`, else a ToolError that says where it went (renamed) or what was meant."""
        entity = graph.get(name)
        if entity is None:
            renamed = self._renamed_to(graph, name)
            if renamed:
                raise ToolError(f"{_q(name)} was renamed to {_q(renamed)}; use the new name", "renamed")
            hint = self._names_like(graph, name)
            raise ToolError(f"unknown entity {_q(name)}" + (f"; did you mean {', '.join(map(_q, hint))}?" if hint else
                                                            "; create it with create_entities"), "unknown_entity")
        return entity

    def _names_like(self, graph: Graph, name: str) -> list[str]:
        """Did-you-mean for an unknown name, for the first HINTS_PER_CALL unknown names of a call."""
        if self.hints_left <= 0:
            return []
        self.hints_left -= 1
        return self.index.name_finder(graph).suggest(name)

    RENAMES_FOLLOWED = 200  # newest renames in the history looked at for an old name (history keeps 90 days)

    def _renamed_to(self, graph: Graph, name: str) -> str | None:
        """The entity an old name now goes by, following renames recorded in the history (not undone)."""
        try:
            rows = self.meta.conn.execute("SELECT changes FROM history WHERE undone=0 AND summary LIKE 'rename %' "
                                          "ORDER BY id DESC LIMIT ?", (self.RENAMES_FOLLOWED,)).fetchall()
        except sqlite3.Error:
            return None
        newest: dict[str, str] = {}
        for (changes,) in rows:
            for old, new in json.loads(changes).get("renamed", []):
                newest.setdefault(old, new)
        seen = {name}
        while name in newest and newest[name] not in seen:
            name = newest[name]
            seen.add(name)
            if graph.get(name):
                return name
        return None

    # ── adding facts: the write-time curation every path shares ──
    def add_facts(self, tx: Transaction, entity: Entity, contents: list[str], why: str = "over cap") -> str:
        """_curate_facts for a caller that wants the answer's line for this entity (--import)."""
        result = WriteResult("add_observations")
        return fact_block_text(result, self._curate_facts(tx, entity, contents, result, why))

    def _curate_facts(self, tx: Transaction, entity: Entity, contents: list[str], result: WriteResult,
                      why: str = "over cap") -> int:
        """Add facts to an entity through the write-time checks (refusals, duplicates, supersede, possible
        conflicts, the cap); what happened goes into result as one block. Returns the block's number."""
        group = result.open_group(entity.name)
        added: list[str] = []
        this_call: set[str] = set()  # facts of one call never replace each other, nor are named as conflicts
        neighbours = FactNeighbours(entity.observations)
        for text in contents:
            refusal = fact_refusal(text, self.settings, self.anchors)
            if refusal:
                result.add("refused", "fact", entity.name, text=_redacted(text), reason=refusal[0], detail=refusal[1],
                           group=group)
                tx.refused += 1
                continue
            verdict, other = neighbours.first_flagged(text)
            if verdict == "duplicate":
                result.add("skipped", "fact", entity.name, text=text, reason="duplicate", other=other,
                           detail=f"duplicate of {_q(other)}", group=group)
                continue
            if verdict == "near":
                result.add("skipped", "fact", entity.name, text=text, reason="near_duplicate", other=other,
                           detail=f"nearly the same as {_q(other)}", group=group)
                continue
            tx.touch(entity.name)
            if other in this_call:
                pass
            elif verdict == "supersede" and not self.meta.state(entity.name, other).pinned:
                entity.observations.remove(other)
                neighbours.remove(other)
                tx.archive(entity.name, [other], f"superseded by {_q(text, 120)}")
                result.add("replaced", "fact", entity.name, text=text, reason="superseded", other=other,
                           detail="the newer value replaces the older (archived)", group=group)
            elif verdict in ("supersede", "conflict"):
                result.add("conflict", "fact", entity.name, text=text, reason="possible_conflict", other=other,
                           pinned=self.meta.state(entity.name, other).pinned, group=group,
                           detail="both kept; delete the older one if it no longer holds")
            entity.observations.append(text)
            neighbours.add(text)
            this_call.add(text)
            added.append(text)
            result.add("added", "fact", entity.name, text=text, group=group)
            tx.added += 1
        # a call that adds nothing archives nothing (an all-refused call is not saved: it must not say it did)
        moved = overflow_to_archive(entity, self.settings.obs_max, set(added), self.lifecycle.pinned(entity.name)) \
            if added else []
        if moved:
            tx.touch(entity.name)
            for text in moved:
                entity.observations.remove(text)
                result.add("archived", "fact", entity.name, text=text, reason="over_cap",
                           detail=f"cap {self.settings.obs_max}", group=group)
            tx.archive(entity.name, moved, why)
        if len(entity.observations) > self.settings.obs_max:
            result.add("note", "entity", entity.name, reason="over_cap_kept", group=group,
                       detail=f"over cap {self.settings.obs_max}: undated, pinned and rule/convention/decision facts "
                              "are never archived; delete stale ones")
        result.close_group(group, len(entity.observations))
        return group

    # ── the nine reference tools ──
    def create_entities(self, entities: list[dict[str, Any]]) -> WriteResult:
        """Tool create_entities: new entities with their facts; an existing name is skipped (as the reference does), a
        refused name or fact says why."""
        def change(tx: Transaction) -> WriteResult:
            result = WriteResult("create_entities")
            for item in entities:
                name, etype = item["name"], item["entityType"]
                refusal = name_refusal("name", name) or name_refusal("entityType", etype)
                if refusal:
                    result.add("refused", "entity", _redacted(name), text=_redacted(name), reason=refusal[0],
                               detail=refusal[1])
                    continue
                if tx.graph.get(name):
                    result.add("skipped", "entity", name, text=name, reason="exists",
                               detail="already exists (use add_observations)")
                    continue
                tx.touch(name)
                entity = Entity(name, etype, [])
                tx.graph.entities.append(entity)
                tx.graph.invalidate()
                created = result.add("added", "entity", name, text=name)
                created.group = self._curate_facts(tx, entity, item["observations"], result)
            return result
        return self._mutate("create entities " + ", ".join(_redacted(e["name"]) for e in entities[:5]), change)

    def create_relations(self, relations: list[dict[str, Any]]) -> WriteResult:
        """Tool create_relations: relations between existing entities; duplicates skipped, unknown ends refused with
        did-you-mean."""
        def change(tx: Transaction) -> WriteResult:
            result = WriteResult("create_relations")
            existing = {r.key for r in tx.graph.relations}
            for item in relations:
                rel = Relation(item["from"], item["to"], item["relationType"])
                missing = [n for n in (rel.frm, rel.to) if tx.graph.get(n) is None]
                refusal = None if missing else name_refusal("relationType", rel.relationType)
                if missing:
                    refusal = ("unknown_entity", f"unknown entity {', '.join(_q(_redacted(m)) for m in missing)}"
                               + self._hint(tx.graph, missing[0]))
                if refusal:
                    result.add("refused", "relation", text=_redacted(rel.line()), reason=refusal[0], detail=refusal[1])
                    continue
                if rel.key in existing:
                    result.add("skipped", "relation", text=rel.line(), reason="exists", detail="already exists")
                    continue
                tx.touch_relations()
                tx.graph.relations.append(rel)
                existing.add(rel.key)
                result.add("added", "relation", text=rel.line())
            return result
        return self._mutate(f"create {len(relations)} relation(s)", change)

    def _hint(self, graph: Graph, name: str) -> str:
        renamed = self._renamed_to(graph, name)
        if renamed:
            return f" (renamed to {_q(renamed)})"
        hint = self._names_like(graph, name)
        return f" (did you mean {', '.join(map(_q, hint))}?)" if hint else ""

    def add_observations(self, observations: list[dict[str, Any]]) -> WriteResult:
        """Tool add_observations: facts through the write-time curation (duplicates, supersede, possible conflicts, the
        cap)."""
        def change(tx: Transaction) -> WriteResult:
            for item in observations:  # all or nothing, as the reference: an unknown entity saves nothing
                try:
                    self._existing_entity(tx.graph, item["entityName"])
                except ToolError as err:
                    others = [n for n in dict.fromkeys(o["entityName"] for o in observations) if tx.graph.get(n)]
                    either = f" (not to {', '.join(map(_q, others))} either)" if others else ""
                    raise ToolError(f"Nothing added{either}: {err}; fix the name and send the whole call again",
                                    err.reason) from None
            result = WriteResult("add_observations")
            for item in observations:
                self._curate_facts(tx, tx.graph.get(item["entityName"]), item["contents"], result)
            if tx.refused and not tx.added:
                raise ToolError("Nothing added. " + render_text(result), "all_refused", result)
            return result
        return self._mutate("add facts to " + ", ".join(o["entityName"] for o in observations[:5]), change)

    def delete_entities(self, entityNames: list[str]) -> WriteResult:
        """Tool delete_entities: entities and their relations go; their archives stay; unknown names are skipped."""
        def change(tx: Transaction) -> WriteResult:
            result = WriteResult("delete_entities")
            names = set(entityNames)
            found = sorted({e.name for e in tx.graph.entities if e.name in names})
            for name in found:
                tx.touch(name)
                result.add("removed", "entity", name, text=name)
            tx.graph.entities = [e for e in tx.graph.entities if e.name not in names]
            tx.graph.invalidate()
            kept = []
            for r in tx.graph.relations:
                if r.frm in names or r.to in names:
                    result.add("removed", "relation", text=r.line(), reason="end_deleted")
                else:
                    kept.append(r)
            if len(kept) != len(tx.graph.relations):
                tx.touch_relations()
                tx.graph.relations = kept
            for name in entityNames:
                if name not in found:
                    result.add("skipped", "entity", name, text=name, reason="not_found", detail="not found")
            if any(self.store.archive_path(n).exists() for n in found):
                result.add("note", "entity", reason="archive_kept",
                           detail="Their archived facts are kept (archived_observations).")
            return result
        return self._mutate("delete " + ", ".join(entityNames[:5]), change)

    def delete_observations(self, deletions: list[dict[str, Any]]) -> WriteResult:
        """Tool delete_observations: facts by exact text; a text that is not there is said, not an error."""
        def change(tx: Transaction) -> WriteResult:
            result = WriteResult("delete_observations")
            for item in deletions:
                group = result.open_group(item["entityName"])
                entity = tx.graph.get(item["entityName"])
                if entity is None:
                    result.add("skipped", "entity", item["entityName"], reason="not_found", group=group,
                               detail="not found" + self._hint(tx.graph, item["entityName"]))
                    continue
                wanted = set(item["observations"])
                present = set(entity.observations)
                kept = [o for o in entity.observations if o not in wanted]
                for o in entity.observations:
                    if o in wanted:
                        result.add("removed", "fact", entity.name, text=o, group=group)
                if len(kept) != len(entity.observations):
                    tx.touch(entity.name)
                    entity.observations = kept
                for o in dict.fromkeys(item["observations"]):
                    if o not in present:
                        result.add("skipped", "fact", entity.name, text=o, reason="not_matched", group=group,
                                   detail="no fact with exactly this text")
                result.close_group(group, len(entity.observations))
            return result
        return self._mutate("delete facts from " + ", ".join(d["entityName"] for d in deletions[:5]), change)

    def delete_relations(self, relations: list[dict[str, Any]]) -> WriteResult:
        """Tool delete_relations: relations by exact (from, to, relationType)."""
        def change(tx: Transaction) -> WriteResult:
            result = WriteResult("delete_relations", counts={"asked": len(relations)})
            wanted = {(r["from"], r["to"], r["relationType"]) for r in relations}
            present = {r.key for r in tx.graph.relations}
            kept = []
            for r in tx.graph.relations:
                if r.key in wanted:
                    result.add("removed", "relation", text=r.line())
                else:
                    kept.append(r)
            if len(kept) != len(tx.graph.relations):
                tx.touch_relations()
                tx.graph.relations = kept
            for key in dict.fromkeys((r["from"], r["to"], r["relationType"]) for r in relations):
                if key not in present:
                    result.add("skipped", "relation", text=Relation(*key).line(), reason="not_found",
                               detail="no such relation")
            return result
        return self._mutate(f"delete {len(relations)} relation(s)", change)

    READ_GRAPH_PER_TYPE = 12

    def read_graph(self, entityType: str | None = None) -> str:
        """An index, not a dump: names by type, most connected first; a long type shows its top names and a count."""
        graph = self.fresh_graph()
        by_type: dict[str, list[Entity]] = {}
        for entity in graph.entities:
            by_type.setdefault(entity.entityType, []).append(entity)
        touching = self.index.touching(graph)
        other = self.global_memory(create=False)
        follows = "; your global memory follows" if other and other.fresh_graph().entities else ""
        nested = self.settings.tier == "global" and self.settings.project is not None  # under GLOBAL_HEADER
        where = "" if self.settings.tier == "file" or nested else f"{tier_title(self.settings)}{follows}: "
        lines = [f"{where}{len(graph.entities)} entities, {len(graph.relations)} relations, "
                 f"{graph.fact_count()} facts. Names by type (fact count), most connected first; "
                 "open_nodes or recall for facts."]
        if entityType is not None:
            if entityType not in by_type:
                hint = did_you_mean(entityType, by_type)
                types = ", ".join(map(_q, hint or sorted(by_type)[:20]))
                return f"No entities of type {_q(entityType)}" + (f"; types: {types}." if by_type else ".")
            by_type = {entityType: by_type[entityType]}
        cap = None if entityType is not None else self.READ_GRAPH_PER_TYPE
        for etype in sorted(by_type, key=str.lower):
            names = sorted(by_type[etype], key=lambda e: (-len(touching.get(e.name, ())), e.name.lower()))
            shown = names[:cap] if cap else names
            line = f"{etype} ({len(names)}): " + "; ".join(f"{e.name} ({len(e.observations)})" for e in shown)
            if len(shown) < len(names):
                line += f"; +{len(names) - len(shown)} more: read_graph {{\"entityType\": {json.dumps(etype)}}}"
            lines.append(line)
        lines += self._warnings(graph)
        return self.receipts.ledger(self.client, "read_graph", {}, "\n".join(lines), graph)

    def _relations_of(self, graph: Graph, names: Iterable[str]) -> list[Relation]:
        """Relations with an end among names, once each, in file order (as the reference lists them)."""
        touching = self.index.touching(graph)
        return [graph.relations[i] for i in sorted({i for name in names for i in touching.get(name, ())})]

    def _warnings(self, graph: Graph) -> list[str]:
        out = []
        if graph.unreadable:
            out.append(f"Warning: {len(graph.unreadable)} unreadable line(s) in {self.store.path.name} are ignored; "
                       f"the next write moves them to {self.store.unreadable_path.name}.")
        return out

    def search_nodes(self, query: str, limit: int | None = None, since: str | None = None,
                     until: str | None = None) -> str:
        """Tool search_nodes: entities where every query word matches somewhere, ranked, each with its best lines."""
        keep = self._written_in(time_window(since, until, time.time()))
        graph = self.fresh_graph()
        limit = max(1, min(int(limit or self.settings.search_limit), 200))
        if not query.strip():
            return self.receipts.ledger(self.client, "search_nodes", {"query": query},
                                        "Empty query: give a word to search for.", graph)
        docs = self.index.match_entities(query)
        dense, dense_note = self.dense(graph, query, self.store.generation)
        ranking = self.index.rank_facts(query, self.lifecycle.strength, self.anchors.rank_penalty, dense)
        if keep is not None:  # since/until: entities with a fact written then, and only those facts shown
            ranking.facts = [f for f in ranking.facts if keep(f.entity, f.text)]
            docs = [d for d in docs if any(keep(d.name, o) for o in d.facts)]
        fact_scores: dict[str, list[ScoredFact]] = {}
        for fact in ranking.facts:
            fact_scores.setdefault(fact.entity, []).append(fact)
        words = query_words(query)

        def rank(doc: EntityDoc) -> tuple:
            name = doc.name.lower()
            tier = 2 if name == query.lower().strip() else 1 if all(w in name for w in words) else 0
            facts = fact_scores.get(doc.name, [])
            return (-tier, -sum(f.score for f in facts[:3]), doc.name.lower())

        docs.sort(key=rank)
        touching = self.index.touching(graph)
        fallback = not docs
        if fallback:  # nothing has every word: offer the closest entities by ranking, and say so
            docs = [d for name in dict.fromkeys(f.entity for f in ranking.facts)
                    for d in self.index.docs_named(name)[:1]]
            if not docs:
                text = f"No entities match {_q(query)} (every word must match a name, type, fact or relation type)."
                text += f"\n{dense_note}" if dense_note else ""
                return self.receipts.ledger(self.client, "search_nodes", {"query": query}, text, graph)
            head = (f"No entity matches every word of {_q(query)}; {len(docs)} closest by ranking"
                    + (f", top {limit} shown" if len(docs) > limit else "") + ". open_nodes for full entities.")
        else:
            head = f"{len(docs)} match {_q(query)}"
            head += (f", top {limit} shown (narrow the query or pass limit)" if len(docs) > limit else "") + \
                ". open_nodes for full entities."
        lines = [head]
        shown_facts: dict[str, list[str]] = {}
        for rank_, doc in enumerate(docs[:limit]):
            lines.append(f"- {doc.name} [{doc.etype}] {len(doc.facts)} facts, {len(touching.get(doc.name, ()))} rels")
            room = 2 if rank_ < 3 else 1  # two matching lines for the leaders, one for the rest
            snippets = [f.text for f in fact_scores.get(doc.name, [])
                        if fallback or any(w in f.text.lower() for w in words)][:room]
            if len(snippets) < room:
                snippets += [o for o in doc.facts if any(w in o.lower() for w in words) and o not in snippets
                             and (keep is None or keep(doc.name, o))][:room - len(snippets)]
            shown_facts[doc.name] = snippets
            for text in snippets:
                lines.append(f"    › {self._snippet(text, words)}{self.anchors.note(doc.name, text)}")
            if len(snippets) < room:
                rels = [r.line() for r in self._relations_of(graph, [doc.name])
                        if any(w in r.relationType.lower() for w in words)]
                lines += [f"    › {line}" for line in rels[:room - len(snippets)]]
        self.probes.remember_result(query, shown_facts)
        return self.receipts.ledger(self.client, "search_nodes", {"query": query},
                                    "\n".join(lines + self._warnings(graph) + [dense_note][:bool(dense_note)]), graph)

    @staticmethod
    def _snippet(text: str, words: list[str]) -> str:
        low = text.lower()
        positions = [low.find(w) for w in words if low.find(w) >= 0]
        start = max(0, min(positions) - 30) if positions else 0
        piece = text[start:start + 120]
        return ("…" if start else "") + " ".join(piece.split()) + ("…" if start + 120 < len(text) else "")

    OPEN_LIMIT_CHARS = 40_000

    def open_nodes(self, names: list[str]) -> str:
        """Tool open_nodes: whole entities by exact name with their facts (marked pinned, fading, anchored) and
        relations."""
        graph = self.fresh_graph()
        wanted = list(dict.fromkeys(names))
        found = [graph.get(n) for n in wanted if graph.get(n)]
        missing = [n for n in wanted if not graph.get(n)]
        blocks, omitted, size = [], [], 0
        shown_keys = []
        clock = self.meta.clock()
        for entity in found:
            archived = self.store.archived_count(entity.name)
            head = f"## {entity.name} [{entity.entityType}]" + (f" ({archived} archived)" if archived else "")
            lines = [head] + [f"- {o}{self.lifecycle.flags(entity, o, clock)}" for o in entity.observations]
            block = "\n".join(lines)
            if size + len(block) > self.OPEN_LIMIT_CHARS and blocks:
                omitted.append(entity.name)
                continue
            size += len(block)
            blocks.append(block)
            shown_keys += [(entity.name, o) for o in entity.observations]
        shown_names = {e.name for e in found if e.name not in omitted}
        rels = self._relations_of(graph, shown_names)
        text = "\n\n".join(blocks)
        if rels:
            text += "\n\n## relations\n" + "\n".join(r.line() for r in rels)
        if omitted:
            text += f"\n\n… over {self.OPEN_LIMIT_CHARS} chars; not shown, open separately: {', '.join(omitted)}"
        for name in missing:
            text += f"\n\nNot found: {_q(name)}{self._hint(graph, name)}"
        if not found:
            text = text.strip() or "Nothing found."
        self.meta.reinforce(shown_keys)
        self.probes.learn(shown_names)
        text = text.strip() + "\n".join([""] + self._warnings(graph)).rstrip()
        return self.receipts.ledger(self.client, "open_nodes", {"names": names}, text, graph)

    def _written_in(self, window: tuple[float, float] | None) -> Callable[[str, str], bool] | None:
        """keep(entity, fact) for facts written in `window` (memory.db's first sighting), None for no window."""
        if window is None:
            return None
        start, end = window
        return lambda entity, text: start <= self.meta.state(entity, text).created < end

    # ── graphmem's own tools ──
    def changes(self, since: str, until: str | None = None, limit: int | None = None) -> str:
        """What changed between since and until, from the history (and first sightings of facts other tools
        wrote), newest first."""
        start, end = time_window(since, until, time.time()) or (float("-inf"), float("inf"))
        graph = self.fresh_graph()
        limit = max(1, min(int(limit or 50), 500))
        history = [(ts, c) for ts, c in self.meta.changes_since(start) if ts < end]
        lines = change_lines(history)
        # facts the history explains (renames keep first sightings)
        known = {o for _, c in history for item in c.get("entities", [])
                 for side in (item.get("before"), item.get("after")) if side for o in side["observations"]}
        lines += [f"+ {name}: {text} (first seen {utc_stamp(ts)}, written by another tool)"
                  for ts, name, text in first_seen(self.meta, start) if ts < end and text not in known]
        window = describe_window((start, end))
        if not lines:
            return f"No changes {window}."
        head = f"{len(lines)} change(s) {window}" + (f", newest {limit} shown" if len(lines) > limit else "") + ":"
        return self.receipts.ledger(self.client, "changes", {}, "\n".join([head] + lines[:limit]), graph)

    def recall(self, query: str, budget: int | None = None, since: str | None = None, until: str | None = None) -> str:
        """Tool recall: the facts most relevant to `query` within `budget` tokens (recall_pipeline), with the footer
        saying what was left out."""
        window = time_window(since, until, time.time())
        graph = self.fresh_graph()
        budget = self.settings.recall_budget if budget is None else int(budget)
        if budget < 50:
            raise ToolError(f"budget {budget} is too small: give at least 50 tokens "
                            f"(default {self.settings.recall_budget})")
        if not query.strip():
            raise ToolError("empty query: say in a few words what you are about to work on")
        dense, dense_note = self.dense(graph, query, self.store.generation)
        if dense_note and estimate_tokens(dense_note) > budget // 4:
            dense_note = "Note: embeddings not used for every fact; see search_nodes."
        room = budget - (estimate_tokens(dense_note) + 1 if dense_note else 0)  # the note fits in the budget too
        packed = recall_pipeline(self.index, graph, query, room, self.lifecycle.strength, self.anchors.rank_penalty,
                                 self.lifecycle.fact_notes(graph), keep=self._written_in(window),
                                 flags=self.lifecycle.conflict_notes(graph), dense=dense)
        clock = self.meta.clock()
        fading = sum(1 for f in packed.shown if self.lifecycle.fading(graph.get(f.entity), f.text, clock) is not None)
        stale = sum(1 for f in packed.shown if self.anchors.is_stale(f.entity, f.text))
        text = packed.text
        extra = []
        if fading:
            extra.append(f"{fading} shown fading")
        if stale:
            extra.append(f"{stale} shown anchored to code that changed")
        if window:
            extra.append(f"only facts written {describe_window(window)}")
        if extra and estimate_tokens(text + " " + "; ".join(extra) + ".") <= room:
            text += " " + "; ".join(extra) + "."
        text += f"\n{dense_note}" if dense_note else ""
        self.meta.reinforce((f.entity, f.text) for f in packed.shown)
        shown: dict[str, list[str]] = {}
        for f in packed.shown:
            shown.setdefault(f.entity, []).append(f.text)
        self.probes.remember_result(query, shown)
        docs = [d for name in shown for d in self.index.docs_named(name)]
        self.receipts.record("recall", self.client, text, self.receipts.reference_tokens(graph, docs) if shown else 0)
        return text

    def mark_fact(self, entityName: str, observation: str, action: str) -> WriteResult:
        """Tool mark_fact: pin, unpin, rate helpful or not_helpful, or mark a stale anchored fact verified."""
        graph = self.fresh_graph()
        entity = self._existing_entity(graph, entityName)
        text = self._find_fact(entity, observation)
        state = self.meta.state(entity.name, text)
        if action in ("pin", "unpin"):
            state.pinned = action == "pin"
            message = f"{'Pinned' if state.pinned else 'Unpinned'} {_q(text)} on {entity.name}."
        elif action == "helpful":
            state.importance = min(1.0, state.importance + 0.25)
            state.stability = min(MAX_STABILITY_H, state.stability * 2.0)
            state.last_used = self.meta.now()
            self.probes.learn({entity.name}, fact=text)
            message = f"Noted: {_q(text)} helped (it will fade slower and rank higher)."
        elif action == "not_helpful":
            state.importance = max(0.0, state.importance - 0.25)
            state.stability = max(1.0, state.stability * 0.5)
            message = f"Noted: {_q(text)} did not help (it will fade faster; delete it if it is wrong)."
        else:
            message = self.anchors.verify(entity.name, text)
        self.meta.save_states([(entity.name, text)], durable=True)
        if self.meta.problem:  # the mark lives only in memory.db: unsaved is an error, not a note
            self.meta.states.pop((db_text(entity.name), db_text(text)), None)  # re-read from memory.db next time
            self.meta.reconcile(graph, -1, self.client)
            raise ToolError(f"Not saved: {self.meta.problem}; the fact is unchanged, try again in a moment")
        self.meta.record_history(self.client, f"{action} a fact on {entity.name}", {
            "entities": [], "relationsAdded": [], "relationsRemoved": [], "marked": [entity.name, text, action]})
        result = WriteResult("mark_fact")
        result.add("changed", "mark", entity.name, text=text, reason=action, detail=message)
        return result

    def _find_fact(self, entity: Entity, observation: str) -> str:
        if observation in entity.observations:
            return observation
        hits = [o for o in entity.observations if normalise_fact(observation) in normalise_fact(o)]
        if len(hits) == 1:
            return hits[0]
        listing = "; ".join(_q(o, 60) for o in (hits or entity.observations)[:5])
        raise ToolError(f"{entity.name} has {'several' if hits else 'no'} fact(s) matching {_q(observation)}: "
                        f"{listing or 'none'}. Give the exact text.", "ambiguous" if hits else "not_found")

    def rename_entity(self, name: str, newName: str) -> WriteResult:
        """Tool rename_entity: a new name; facts, relations, archive, pins and history follow."""
        def change(tx: Transaction) -> WriteResult:
            entity = self._existing_entity(tx.graph, name)
            require_name("newName", newName)
            if tx.graph.get(newName):
                raise ToolError(f"{_q(newName)} already exists; merge by hand (add_observations, then delete_entities)",
                                "exists")
            tx.touch(name)
            tx.touch(newName)
            entity.name = newName
            tx.graph.invalidate()
            moved = 0
            for r in tx.graph.relations:
                if r.frm == name or r.to == name:
                    tx.touch_relations()
                    moved += (r.frm == name) + (r.to == name)
                    r.frm = newName if r.frm == name else r.frm
                    r.to = newName if r.to == name else r.to
                    r.json_line = None
            tx.rename_archive(name, newName)
            tx.move_facts([((name, o), (newName, o)) for o in entity.observations])
            result = WriteResult("rename_entity", counts={"relation_ends": moved})
            result.add("changed", "name", newName, text=newName, other=name, reason="renamed",
                       detail="facts, relations and archive kept")
            return result
        return self._mutate(f"rename {name} to {newName}", change)

    def archived_observations(self, entityName: str, query: str | None = None,
                              restore: list[str] | None = None) -> Answer:
        """Tool archived_observations: list an entity's archived facts (filtered by query) or restore chosen ones."""
        if restore:
            def change(tx: Transaction) -> WriteResult:
                archived = [f.text for f in self.store.read_archive(entityName)]
                entity = tx.graph.get(entityName)
                if not archived:
                    raise ToolError(f"{_q(entityName)} has no archived facts", "not_found")
                missing = [t for t in restore if t not in archived]
                if missing:
                    raise ToolError(f"not in the archive of {_q(entityName)}: {', '.join(_q(m, 60) for m in missing)}; "
                                    "list them first and give the exact text", "not_found")
                if entity is None:
                    tx.touch(entityName)
                    entity = Entity(entityName, "restored", [])
                    tx.graph.entities.append(entity)
                    tx.graph.invalidate()
                tx.touch(entityName)
                result = WriteResult("archived_observations")
                group = result.open_group(entityName)
                back = [t for t in dict.fromkeys(restore) if t not in entity.observations]
                for text in dict.fromkeys(restore):
                    if text in back:
                        result.add("added", "fact", entityName, text=text, reason="restored", group=group)
                    else:
                        result.add("skipped", "fact", entityName, text=text, reason="already_active", group=group,
                                   detail="already among the active facts (taken out of the archive)")
                entity.observations += back
                tx.unarchive(entityName, list(dict.fromkeys(restore)))
                moved = overflow_to_archive(entity, self.settings.obs_max, set(back), self.lifecycle.pinned(entityName))
                for text in moved:
                    entity.observations.remove(text)
                    result.add("archived", "fact", entityName, text=text, reason="over_cap", group=group,
                               detail=f"cap {self.settings.obs_max}")
                tx.archive(entityName, moved, "over cap")
                result.close_group(group, len(entity.observations))
                return result
            return self._mutate(f"restore facts of {entityName}", change)
        facts = self.store.read_archive(entityName)
        if not facts:
            graph = self.fresh_graph()
            hint = "" if graph.get(entityName) else self._hint(graph, entityName)
            return f"No archived facts for {_q(entityName)}{hint}."
        words = query_words(query)
        hits = [f for f in facts if all(w in f.text.lower() for w in words)]
        lines, size = [], 0
        for fact in reversed(hits):  # newest first; the oldest are left out when over the cap
            line = f"- {fact.text}  ({fact.why}, {fact.when})"
            if size + len(line) > 6000:
                break
            size += len(line)
            lines.append(line)
        head = f"{len(hits)} of {len(facts)} archived facts of {entityName}" + (f" match {_q(query)}" if words else "")
        if len(lines) < len(hits):
            head += f", newest {len(lines)} shown (narrow with query)"
        return head + ". Restore with restore: [exact text].\n" + "\n".join(lines)

    # ── edits the UI offers beyond the agent tools (same checks, same history) ──
    def set_entity_type(self, name: str, entityType: str) -> WriteResult:
        """UI edit: change an entity's type."""
        def change(tx: Transaction) -> WriteResult:
            entity = self._existing_entity(tx.graph, name)
            require_name("entityType", entityType)
            tx.touch(name)
            old, entity.entityType = entity.entityType, entityType
            result = WriteResult("set_entity_type")
            result.add("changed", "type", name, text=entityType, other=old, reason="retyped",
                       detail=f"{name}: type {_q(old)} -> {_q(entityType)}.")
            return result
        return self._one_call(lambda: self._mutate(f"set type of {name}", change))

    def edit_fact(self, name: str, old: str, new: str) -> Answer:
        """UI edit: replace one fact's text through the same checks as a new fact."""
        def change(tx: Transaction) -> Answer:
            entity = self._existing_entity(tx.graph, name)
            if old not in entity.observations:
                raise ToolError(f"{name} has no fact {_q(old)} (it may have changed meanwhile); reload", "not_found")
            if old == new:
                result = WriteResult("edit_fact")
                result.add("skipped", "fact", name, text=new, reason="unchanged", detail="No change.")
                return result
            position = entity.observations.index(old)
            tx.touch(name)
            entity.observations.remove(old)
            result = WriteResult("edit_fact")
            group = self._curate_facts(tx, entity, [new], result)
            if new not in entity.observations:
                why = next(o.reason for o in result.outcomes if o.kind in ("refused", "skipped"))
                raise ToolError("edit refused, fact unchanged: " + "; ".join(fact_block_parts(result, group)[1:]),
                                why, result)
            result.outcomes = [o for o in result.outcomes if o.kind != "added"]  # an edit, not a new fact
            result.add("replaced", "fact", name, text=new, other=old, reason="edited", detail="edited")
            entity.observations.remove(new)
            entity.observations.insert(min(position, len(entity.observations)), new)
            tx.move_facts([((name, old), (name, new))])
            return result
        return self._one_call(lambda: self._mutate(f"edit a fact of {name}", change))

    def archive_fact(self, name: str, text: str) -> WriteResult:
        """UI edit: move one fact to the entity's archive by hand."""
        def change(tx: Transaction) -> WriteResult:
            entity = self._existing_entity(tx.graph, name)
            if text not in entity.observations:
                raise ToolError(f"{name} has no fact {_q(text)}", "not_found")
            tx.touch(name)
            entity.observations.remove(text)
            tx.archive(name, [text], "archived by hand")
            result = WriteResult("archive_fact")
            result.add("archived", "fact", name, text=text, reason="by_hand",
                       detail=f"{name}: archived {_q(text)} (restore from the archive any time).")
            return result
        return self._one_call(lambda: self._mutate(f"archive a fact of {name}", change))

    def undo(self) -> str:
        """Reverse the most recent change that has not been undone, if nothing touched it since."""
        with self.lock:
            try:
                row = self.meta.conn.execute(
                    "SELECT id, summary, changes FROM history WHERE undone=0 AND summary NOT LIKE 'undo:%' "
                    "ORDER BY id DESC LIMIT 1").fetchone()
            except sqlite3.Error as err:
                raise ToolError(f"cannot undo: the history in {describe_db_error(self.meta.path, err)}") from None
            if row is None:
                raise ToolError("nothing to undo")
            hid, summary, changes = row[0], row[1], json.loads(row[2])
            if "marked" in changes:
                entity, text, action = changes["marked"]
                inverse = {"pin": "unpin", "unpin": "pin"}.get(action)
                if inverse is None:
                    raise ToolError(f"the last change ({summary}) cannot be undone")
                self.mark_fact(entity, text, inverse)
            else:
                self._mutate(f"undo: {summary}", lambda tx: self._apply_undo(tx, changes, summary))
            try:
                self.meta.conn.execute("UPDATE history SET undone=1 WHERE id=?", (hid,))
            except sqlite3.Error as err:  # a second undo then finds the entities changed and refuses: safe
                self.meta.failed(err)
            return f"Undone: {summary}."

    def _apply_undo(self, tx: Transaction, changes: dict[str, Any], summary: str) -> str:
        for item in changes["entities"]:
            current = tx.graph.get(item["name"])
            if (current.to_json() if current else None) != item["after"]:
                raise ToolError(f"cannot undo \"{summary}\": {item['name']} changed since; edit it by hand")
        for item in changes["entities"]:
            name, before = item["name"], item["before"]
            tx.touch(name)
            tx.graph.entities = [e for e in tx.graph.entities if e.name != name]
            if before:
                tx.graph.entities.append(Entity(before["name"], before["entityType"], list(before["observations"]),
                                                {k: v for k, v in before.items() if k not in ENTITY_KEYS}))
            tx.graph.invalidate()
        if changes["relationsAdded"] or changes["relationsRemoved"]:
            tx.touch_relations()
            added = {tuple(k) for k in changes["relationsAdded"]}
            tx.graph.relations = [r for r in tx.graph.relations if r.key not in added]
            present = {r.key for r in tx.graph.relations}
            tx.graph.relations += [Relation(*k) for k in changes["relationsRemoved"] if tuple(k) not in present]
        for name, facts, _why in changes.get("archived", []):
            tx.unarchive(name, facts)
        for name, facts in changes.get("unarchived", []):
            tx.archive(name, facts, "re-archived by undo")
        befores = {item["name"]: item["before"] for item in changes["entities"]}
        for old, new in changes.get("renamed", []):
            tx.rename_archive(new, old)
            facts = (befores.get(old) or {}).get("observations", [])
            tx.move_facts([((new, o), (old, o)) for o in facts])
        return "undone"

    def change(self, summary: str, change: Callable[[Transaction], Answer], use: bool = True) -> Answer:
        """Apply `change` as one call of its own (maintenance: --import, --compact, healing markers): the
        same lock, fresh read, atomic write and history as a tool's; use=False: not a day of use."""
        try:
            return self._one_call(lambda: self._mutate(summary, change), use)
        finally:  # a private project's first write may be an --import: its project.json finds it again later
            self._record_project()

    def _one_call(self, run: Callable[[], Answer], use: bool = True) -> Answer:
        """Run one call (a tool, or a UI edit) under the lock; its answer ends with a note when memory.db
        could not be used. use: the call counts as a day of use for the activity clock (maintenance does not)."""
        with self.lock:
            self.meta.begin_call()
            if use:
                self.meta.mark_active()
            self.hints_left = HINTS_PER_CALL
            answer = run()
            note = self.meta.note()
            if note and isinstance(answer, WriteResult):
                answer.add("note", "call", reason="metadata", detail=note)
            return f"{answer}\n{note}" if note and isinstance(answer, str) else answer

    def version(self) -> str:
        """Changes whenever the graph or its metadata changes, from any process: the UI polls it."""
        with self.lock:
            try:
                dv, last, calls = self.meta.change_stamp()
            except sqlite3.Error:  # memory.db busy or broken: the graph's own version still moves
                dv = last = calls = "?"
            return f"{self.store.stat_key()}|{dv}|{last}|{calls}"

    # ── probes a person manages (CLI --probe/--probes/--remove-probe, the UI's overview) ──
    def add_manual_probe(self, query: str, entity: str, fact: str = "") -> str:
        """A question recall must keep answering, added by a person: the entity (and fact) must exist now."""
        graph = self.fresh_graph()
        found = self._existing_entity(graph, entity)
        if fact and fact not in found.observations:
            listing = ", ".join(_q(o, 60) for o in difflib.get_close_matches(fact, found.observations, n=3, cutoff=0.6))
            raise ToolError(f"{entity} has no fact {_q(fact)}" + (f"; did you mean {listing}?" if listing else
                            "; give its exact text (open_nodes lists them)"))
        if not query.strip():
            raise ToolError("the probe's question is empty")
        return self.probes.add(query, entity, fact)

    def probe_listing(self) -> list[dict[str, Any]]:
        """Every probe, for the CLI and the UI."""
        return self.probes.listing()

    def remove_probe(self, probe_id: int) -> str:
        """Forget probe `probe_id` (ids from probe_listing)."""
        return self.probes.remove(probe_id)


# ════════════════════════════════════════════════════════════════════════════
# 11. MCP loop: newline-delimited JSON-RPC 2.0 on stdio, both protocol eras
# ════════════════════════════════════════════════════════════════════════════

LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT = "io.modelcontextprotocol/clientInfo"
META_SERVER = "io.modelcontextprotocol/serverInfo"

INSTRUCTIONS = (
    "graphmem is your memory across sessions. Before a task, call recall with what you are about to do; "
    "open_nodes for entities you know by name. Record decisions, gotchas and state changes as short facts "
    "(one idea, <={obs_max_chars} chars; start facts that can change with an ISO date, "
    "e.g. '2026-03-02: deployed 2.4.0'). "
    "End a fact about specific code with [@path/file.py::Symbol] so memory notices when that code changes. "
    "Never store secrets: record where they live.")


# JSON-RPC 2.0 error codes, and MCP's for an unsupported protocol version
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
UNSUPPORTED_VERSION = -32022


class RpcError(Exception):
    """A JSON-RPC error reply (code, message, data) raised from inside request handling."""
    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def with_limits(value: Any, settings: Settings) -> Any:
    """Descriptions (and schemas' descriptions) with the limits this server runs with, not the defaults:
    {obs_max_chars}, {obs_max}, {search_limit}, {recall_budget}."""
    if isinstance(value, str):
        return value.format(obs_max_chars=settings.obs_max_chars, obs_max=settings.obs_max,
                            search_limit=settings.search_limit, recall_budget=settings.recall_budget) \
            if "{" in value else value
    if isinstance(value, dict):
        return {k: with_limits(v, settings) for k, v in value.items()}
    if isinstance(value, list):
        return [with_limits(v, settings) for v in value]
    return value


def tool_listing(version: str, settings: Settings) -> list[dict[str, Any]]:
    """Only the fields the negotiated protocol version knows; limits as this server runs with them."""
    tools = []
    for tool in TOOLS:
        entry: dict[str, Any] = {"name": tool.name}
        if version >= "2025-06-18":
            entry["title"] = tool.title
        entry["description"] = with_limits(tool.description, settings)
        entry["inputSchema"] = with_limits(tool.input_schema, settings)
        if version >= "2025-03-26":
            entry["annotations"] = tool.annotations
        tools.append(entry)
    return tools


HEAP_SWEEP_EVERY = 500  # tool calls between full collections (a few small closures per call are cyclic)
_calls_since_sweep = 0


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off while a call runs: loading a graph allocates millions of objects, none garbage."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def settle_heap() -> None:
    """Move what is alive now out of the cyclic collector's reach. The graph, its index and caches are large,
    long-lived and free of reference cycles (reference counts free them as usual); without this each new
    version of them is traversed again and again by the collector: 0.1-0.3 s pauses at 100k facts. The
    little cyclic garbage calls leave is swept by a full collection every HEAP_SWEEP_EVERY calls."""
    global _calls_since_sweep
    _calls_since_sweep += 1
    if _calls_since_sweep >= HEAP_SWEEP_EVERY:
        _calls_since_sweep = 0
        gc.unfreeze()
        gc.collect()
    gc.freeze()


@contextlib.contextmanager
def managed_heap() -> Iterator[None]:
    """Around each call of a long-running server (the MCP loop, the UI): no collection while it runs, then
    settle_heap. One-shot CLI commands need neither."""
    try:
        with collector_paused():
            yield
    finally:
        settle_heap()


class McpServer:
    """The protocol side of graphmem: JSON-RPC messages in, replies out, for both protocol eras; one Memory."""
    def __init__(self, settings: Settings, warm_up: bool = False):
        self.settings = settings
        self._memory: Memory | None = None
        self._memory_made = threading.Lock()
        self.version: str | None = None   # negotiated by initialize (legacy era)
        self.client_name: str | None = None
        self._warm_up = warm_up

    def memory(self) -> Memory:
        """The Memory this server answers from, made on first use."""
        with self._memory_made:
            if self._memory is None:
                self._memory = Memory(self.settings, self.client_name)
            self._memory.client = self.client_name
            return self._memory

    def start_warm_up(self) -> None:
        """Once a client has said hello, read the graph and build the search index in the background, so
        the first real call does not pay for it (2.5 s at 100k facts). Tool calls wait on the same lock."""
        if not self._warm_up:
            return
        self._warm_up = False

        def warm_up() -> None:
            started = time.monotonic()
            try:
                memory = self.memory()
                with memory.lock, managed_heap():
                    facts = memory.warm_up()
            except Exception as err:  # the first real call reports it to the agent
                log(f"background load stopped: {err}")
                return
            log(f"graph loaded and indexed in the background: {facts} facts in {time.monotonic() - started:.1f} s")

        threading.Thread(target=warm_up, name="graphmem-warm-up", daemon=True).start()

    def server_info(self, version: str) -> dict[str, Any]:
        """serverInfo for `version` (title only where the protocol has it)."""
        info: dict[str, Any] = {"name": SERVER_NAME, "version": __version__}
        if version >= "2025-06-18":
            info["title"] = "graphmem"
        return info

    # ── one message in, at most one message out ──
    def handle_raw(self, raw: bytes) -> Any:
        """One line from the client: a reply object (or a batch's list), None for a notification."""
        try:
            message = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return _error(None, PARSE_ERROR, "Parse error: the line is not valid UTF-8 JSON")
        if isinstance(message, list):
            return self.handle_batch(message)
        return self.handle(message)

    def handle_batch(self, batch: list[Any]) -> Any:
        """A JSON-RPC batch: only protocol 2025-03-26 allowed them."""
        if self.version != "2025-03-26" or not batch:
            return _error(None, INVALID_REQUEST, "Invalid Request: batches are only part of protocol 2025-03-26")
        replies = []
        for message in batch:
            if isinstance(message, dict) and message.get("method") == "initialize":
                replies.append(_error(message.get("id"), INVALID_REQUEST,
                                      "Invalid Request: initialize cannot be batched"))
                continue
            reply = self.handle(message)
            if reply is not None:
                replies.append(reply)
        return replies or None

    def handle(self, message: Any) -> dict[str, Any] | None:
        """One JSON-RPC message: the reply, None for notifications and responses; never raises."""
        if not isinstance(message, dict):
            return _error(None, INVALID_REQUEST, "Invalid Request: expected a JSON object")
        if "method" not in message:
            if "result" in message or "error" in message:
                return None  # a response to a request we never sent
            return _error(message.get("id") if _valid_id(message.get("id")) else None, INVALID_REQUEST,
                          "Invalid Request: no method")
        has_id = "id" in message
        rid = message.get("id")
        if has_id and not _valid_id(rid):
            return _error(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
        if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
            problem = "Invalid Request: jsonrpc must be \"2.0\" and method a string"
            return _error(rid, INVALID_REQUEST, problem) if has_id else None
        method = message["method"]
        params = message.get("params")
        if params is None:
            params = {}
        if not has_id:
            self.notify(method, params)
            return None
        if not isinstance(params, dict):
            return _error(rid, INVALID_PARAMS, "Invalid params: params must be an object")
        meta = params.get("_meta")
        try:
            if isinstance(meta, dict) and META_VERSION in meta:
                result = self.modern(method, params, meta)
            else:
                result = self.legacy(method, params)
        except RpcError as err:
            return _error(rid, err.code, err.message, err.data)
        except Exception as err:  # never crash, never go silent
            log(f"internal error in {method}: {err!r}")
            import traceback
            traceback.print_exc(file=sys.stderr)
            return _error(rid, INTERNAL_ERROR, f"Internal error: {type(err).__name__}")
        if method in ("initialize", "server/discover", "tools/list"):
            self.start_warm_up()
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    def notify(self, method: str, params: Any) -> None:
        """A notification from the client: nothing to answer."""
        if method not in ("notifications/initialized", "notifications/cancelled"):
            log(f"ignored notification {method}")

    # ── handshake era (2024-11-05 .. 2025-11-25) ──
    def legacy(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A request of the handshake era (2024-11-05 .. 2025-11-25): initialize first, then tools."""
        if method == "initialize":
            requested = params.get("protocolVersion")
            self.version = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[-1]
            info = params.get("clientInfo")
            if isinstance(info, dict) and isinstance(info.get("name"), str):
                self.client_name = info["name"]
            return {"protocolVersion": self.version, "capabilities": {"tools": {"listChanged": False}},
                    "serverInfo": self.server_info(self.version),
                    "instructions": with_limits(INSTRUCTIONS, self.settings)}
        if method == "ping":
            return {}
        if method == "server/discover":
            return self.discover()
        if method in ("tools/list", "tools/call"):
            if self.version is None:
                raise RpcError(INVALID_PARAMS, "Invalid params: send initialize first, or include "
                                       f"_meta[\"{META_VERSION}\"] (protocol 2026-07-28)")
            if method == "tools/list":
                _check_cursor(params)
                return {"tools": tool_listing(self.version, self.settings)}
            return self.call(params)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    # ── stateless era (2026-07-28): version and capabilities on every request ──
    def modern(self, method: str, params: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        """A request of the stateless era (2026-07-28): each carries its version and capabilities in _meta."""
        version = meta.get(META_VERSION)
        if not isinstance(version, str) or not isinstance(meta.get(META_CAPABILITIES), dict):
            raise RpcError(INVALID_PARAMS, f"Invalid params: _meta needs \"{META_VERSION}\" (string) and "
                                   f"\"{META_CAPABILITIES}\" (object)")
        if version not in MODERN_VERSIONS:
            raise RpcError(UNSUPPORTED_VERSION, "Unsupported protocol version",
                           {"supported": list(MODERN_VERSIONS), "requested": version})
        info = meta.get(META_CLIENT)
        if isinstance(info, dict) and isinstance(info.get("name"), str):
            self.client_name = info["name"]
        if method == "server/discover":
            return self.discover()
        if method == "tools/list":
            _check_cursor(params)
            result = {"tools": tool_listing(version, self.settings), "ttlMs": 0, "cacheScope": "public"}
        elif method == "tools/call":
            result = self.call(params)
        else:
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        result["resultType"] = "complete"
        result["_meta"] = {META_SERVER: self.server_info(version)}
        return result

    def discover(self) -> dict[str, Any]:
        """server/discover: versions, capabilities and instructions, without a handshake."""
        return {"resultType": "complete", "supportedVersions": list(MODERN_VERSIONS),
                "capabilities": {"tools": {"listChanged": False}},
                "instructions": with_limits(INSTRUCTIONS, self.settings), "ttlMs": 0, "cacheScope": "public",
                "_meta": {META_SERVER: self.server_info(MODERN_VERSIONS[-1])}}

    def call(self, params: dict[str, Any]) -> dict[str, Any]:
        """tools/call: run the tool (inside managed_heap) and wrap its text as MCP content."""
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "Invalid params: tools/call needs a tool name")
        if name not in TOOLS_BY_NAME:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}. Tools: {', '.join(TOOLS_BY_NAME)}")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            return {"content": [{"type": "text", "text": f"Invalid arguments for {name}: arguments must be an object, "
                                                          f"received {_json_type(arguments)}."}], "isError": True}
        with managed_heap():
            text, is_error = self.memory().call_tool(name, arguments or {}, client=self.client_name)
        return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _check_cursor(params: dict[str, Any]) -> None:
    """Every tool is on the one page we hand out, so no cursor we did not issue is valid."""
    if params.get("cursor") is not None:
        raise RpcError(INVALID_PARAMS, "Invalid params: unknown cursor (all tools are on the first page)")


def _valid_id(rid: Any) -> bool:
    return isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))


def _error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def terminal_hint() -> str:
    """For a person who started the server in a terminal, where it would seem to hang: what it waits for, what
    to run instead. Goes to stderr (stdout is the protocol)."""
    me = "graphmem" if not sys.argv[0].endswith(".py") else f"python3 {sys.argv[0]}"
    return "\n".join([
        "graphmem: this is an MCP server: it waits for an MCP client (your agent) to talk JSON-RPC on stdin, "
        "so nothing more happens here.",
        f"  set up your agent:  {me} --config CLIENT   (CLIENT: {', '.join(CLIENTS)})",
        f"  open the web UI:    {me} --ui",
        "  stop:               Ctrl-D (end of input) or Ctrl-C"])


def serve_stdio(settings: Settings) -> int:
    """Read requests until end of input. Only protocol messages reach the real stdout."""
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    with contextlib.suppress(OSError):
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print from anywhere lands on stderr
    sys.stdout = sys.stderr
    server = McpServer(settings, warm_up=True)
    tier = "" if settings.tier == "file" else f" ({tier_title(settings)})"
    log(f"{SERVER_NAME} {__version__} on stdio; graph {settings.file_path}{tier}")
    if sys.stdin.isatty():
        print(terminal_hint(), file=sys.stderr, flush=True)
    stdin = sys.stdin.buffer
    while True:
        raw = stdin.readline()
        if not raw:
            return 0
        raw = raw.rstrip(b"\n")
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw.strip():
            continue
        reply = server.handle_raw(raw)
        if reply is not None:
            protocol_out.write(dump_json_line(reply).encode("utf-8") + b"\n")


# ════════════════════════════════════════════════════════════════════════════
# 11b. MCP over Streamable HTTP: a bearer token, Origin/Host checks, both protocol eras, one lock
# ════════════════════════════════════════════════════════════════════════════
# The same McpServer handles every message; this section only carries them over HTTP (spec 2025-11-25
# "Streamable HTTP" for the handshake era, 2026-07-28 for the stateless era) and decides who may send them.
# Concurrency: one lock serialises message handling in the process. Memory already runs each tool under its
# own lock, writes are serialised by the graph's file lock, and search is pure Python under the GIL, so a
# second thread would wait either way; the outer lock adds that the sessions, the project cache, McpServer's
# per-session state and the tier routing around a tool run are never touched by two threads at once. What
# runs in parallel is the HTTP work: reading, parsing and writing (tools/bench_http.py; README "Remote").

HTTP_ENDPOINT = "/mcp"
HTTP_BODY_LIMIT = 4 * 1024 * 1024  # bytes; create_entities with 1000 facts of 300 chars is ~0.4 MB (guess x10)
HTTP_READ_TIMEOUT = 30.0  # seconds a client may take for its headers, its body, or idle between requests
# connections waiting for accept(); socketserver's 5 reset 13 of 32 clients connecting at once
HTTP_LISTEN_BACKLOG = 128
HTTP_SESSIONS_KEPT = 1000  # handshake-era sessions remembered (least recently used dropped): a guess
HTTP_PROJECTS_KEPT = 32    # project graphs kept loaded for X-Graphmem-Project (least recently used dropped): a guess
HTTP_PROJECT_HEADER = "X-Graphmem-Project"  # absolute path of a project root on the server host
HTTP_TOKEN_ENV = "MEMORY_HTTP_TOKEN"
HTTP_SESSION_HEADER = "Mcp-Session-Id"
HTTP_VERSION_HEADER = "MCP-Protocol-Version"
HEADER_MISMATCH = -32020  # MCP 2026-07-28: headers and body disagree, or a required header is missing
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
# the 2026-07-28 transport's statuses (a header mismatch answers 400 where it is found); other errors ride a 200
STATUS_OF_MODERN_ERROR = {UNSUPPORTED_VERSION: 400, METHOD_NOT_FOUND: 404}


class HttpError(Exception):
    """An HTTP refusal: status, a message for the client, extra headers, and a JSON-RPC code when the body
    should be a JSON-RPC error (with the request's id when it is known, else none, as the spec allows)."""

    def __init__(self, status: int, message: str, code: int | None = None, headers: dict[str, str] | None = None,
                 rid: Any = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers, self.rid = status, message, code, headers or {}, rid


class HttpSession(McpServer):
    """McpServer's message handling for one handshake-era session or one stateless request. The Memory is
    not its own: the HTTP server hands it the shared one of the request's project before each message."""

    def __init__(self, settings: Settings):
        super().__init__(settings, warm_up=False)
        self.current: Memory | None = None

    def memory(self) -> Memory:
        """The shared Memory of the request's project, which the HTTP server bound before this message."""
        assert self.current is not None, "the HTTP server binds a Memory before handling a message"
        return self.current  # shared: each call names its client (McpServer.call)


class HttpMcp:
    """What the HTTP handlers share: the token, allowed origins, the bind address, one Memory per project
    graph, the handshake-era sessions, and the lock that serialises message handling."""

    def __init__(self, settings: Settings, env: dict[str, str], token: str, host: str,
                 allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = ()):
        self.settings, self.env, self.token, self.host = settings, env, token, host
        self.allowed_origins = {o.rstrip("/") for o in allowed_origins}
        self.allowed_hosts = {h.lower() for h in allowed_hosts}  # names a reverse proxy passes on (--allow-host)
        self.port = 0  # set once bound
        self.calls = threading.Lock()
        self._memories: collections.OrderedDict[tuple[Path, Path | None], Memory] = collections.OrderedDict()
        self._sessions: collections.OrderedDict[str, HttpSession] = collections.OrderedDict()

    # ── who may talk to us ──
    def token_ok(self, header: str) -> bool:
        """Whether an Authorization header carries our bearer token (compared in constant time)."""
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), self.token.encode())

    def host_ok(self, header: str) -> bool:
        """DNS-rebinding guard: on a loopback bind the Host header must name loopback and our port. On other
        binds the name a client uses is not known here; the token is the guard."""
        if self.host not in LOOPBACK_NAMES:
            return True
        name, port = split_host_port(header)
        return (name in LOOPBACK_NAMES and port == self.port) or name in self.allowed_hosts

    def origin_ok(self, origin: str | None) -> bool:
        """No Origin (not a browser), a loopback page, or an origin allowed with --allow-origin."""
        if origin is None:
            return True
        from urllib.parse import urlsplit
        try:
            name = urlsplit(origin).hostname
        except ValueError:
            return False
        return name in LOOPBACK_NAMES or origin.rstrip("/") in self.allowed_origins

    # ── which graph a request works on ──
    def memory_for(self, project: str | None) -> Memory:
        """The shared Memory of the project named by the X-Graphmem-Project header (resolved as
        MEMORY_PROJECT_ROOT would be), else of the server's own tier. Call with the lock held."""
        settings = self.settings if project is None else self.project_settings(project)
        key = (settings.file_path, settings.project_root)
        if key not in self._memories:
            self._memories[key] = Memory(settings)
            own = (self.settings.file_path, self.settings.project_root)
            for old in [k for k in self._memories if k not in (own, key)][:-(HTTP_PROJECTS_KEPT - 1) or None]:
                del self._memories[old]  # its graph and index are freed; it loads again when asked for
        self._memories.move_to_end(key)
        return self._memories[key]

    def project_settings(self, raw: str) -> Settings:
        """The settings of the project an X-Graphmem-Project header names (an absolute path on this host); HttpError
        400 otherwise."""
        value = raw.encode("latin-1", "replace").decode("utf-8", "replace").strip()  # headers arrive as latin-1
        path = Path(value)
        if not value or not path.is_absolute():
            raise HttpError(400, f"{HTTP_PROJECT_HEADER} must be the absolute path of a project root on the server "
                                 f"host, got {value!r}")
        if not path.is_dir():
            raise HttpError(400, f"{HTTP_PROJECT_HEADER}: no folder {value} on the server host; give the path of "
                                 f"a project root there, or leave the header out for the server's own memory")
        try:
            return Settings.from_env({**self.env, "MEMORY_PROJECT_ROOT": value})
        except ConfigError as err:
            raise HttpError(400, f"{HTTP_PROJECT_HEADER}: {err}") from None

    # ── handshake-era sessions ──
    def new_session(self) -> tuple[str, HttpSession]:
        """A new handshake-era session and its id (the oldest are dropped past HTTP_SESSIONS_KEPT)."""
        sid = secrets.token_urlsafe(24)
        session = HttpSession(self.settings)
        self._sessions[sid] = session
        while len(self._sessions) > HTTP_SESSIONS_KEPT:
            self._sessions.popitem(last=False)
        return sid, session

    def session(self, sid: str | None, rid: Any = None) -> HttpSession:
        """The session an Mcp-Session-Id names; HttpError 400 without one, 404 for an unknown one."""
        if not sid:
            raise HttpError(400, f"Bad Request: no {HTTP_SESSION_HEADER} header; send initialize first and "
                                 f"repeat the {HTTP_SESSION_HEADER} it returns (or, in protocol 2026-07-28, "
                                 f"_meta[\"{META_VERSION}\"] on every request)", INVALID_REQUEST, rid=rid)
        session = self._sessions.get(sid)
        if session is None:
            raise HttpError(404, "Session not found: it ended or the server restarted; send initialize again",
                            INVALID_REQUEST, rid=rid)
        self._sessions.move_to_end(sid)
        return session

    def end_session(self, sid: str | None) -> None:
        """DELETE /mcp: forget a session (404 when unknown)."""
        if not sid:
            raise HttpError(400, "Bad Request: DELETE ends a session; name it in the Mcp-Session-Id header "
                                 "(stateless 2026-07-28 requests have none to end)")
        with self.calls:
            self.session(sid)
            del self._sessions[sid]

    # ── one POST body in, (status, reply, extra headers) out ──
    def exchange(self, body: Any, headers: Any) -> tuple[int, Any, dict[str, str]]:
        """Handle one parsed POST body with the lock held. Raises HttpError for refusals."""
        with self.calls:
            try:
                memory = self.memory_for(headers.get(HTTP_PROJECT_HEADER))
            except HttpError as err:  # as JSON-RPC, with the id, so a client shows the reason, not just "400"
                rid = body.get("id") if isinstance(body, dict) and _valid_id(body.get("id")) else None
                raise HttpError(err.status, err.message, err.code or INVALID_REQUEST, err.headers, rid) from None
            if is_modern_message(body) or (headers.get(HTTP_VERSION_HEADER) in MODERN_VERSIONS and isinstance(
                    body, dict) and body.get("method") != "initialize"):
                return self.modern_exchange(body, headers, memory)
            return self.legacy_exchange(body, headers, memory)

    def modern_exchange(self, message: dict[str, Any], headers: Any, memory: Memory) -> tuple[int, Any, dict]:
        """2026-07-28: no sessions; headers mirror the body and must match it."""
        problem = header_mismatch(message, headers) if "id" in message else None  # notifications: no rule
        if problem:
            return 400, _error(message.get("id"), HEADER_MISMATCH, f"Header mismatch: {problem}"), {}
        session = HttpSession(memory.settings)
        session.current = memory
        if "id" in message and _valid_id(message.get("id")) and not valid_modern_meta(message):
            params = message.get("params") if isinstance(message.get("params"), dict) else {}
            try:  # McpServer.modern refuses an incomplete _meta first thing, with its own message
                session.modern(str(message.get("method")), params, params.get("_meta") or {})
            except RpcError as err:
                return 400, _error(message["id"], err.code, err.message, err.data), {}
        reply = session.handle(message)
        if reply is None:
            return 202, None, {}
        code = (reply.get("error") or {}).get("code")
        return STATUS_OF_MODERN_ERROR.get(code, 200), reply, {}

    def legacy_exchange(self, body: Any, headers: Any, memory: Memory) -> tuple[int, Any, dict]:
        """2024-11-05 .. 2025-11-25: initialize opens a session named by Mcp-Session-Id."""
        extra: dict[str, str] = {}
        if isinstance(body, dict) and body.get("method") == "initialize" and "id" in body:
            sid, session = self.new_session()
            extra[HTTP_SESSION_HEADER] = sid
        else:
            rid = body.get("id") if isinstance(body, dict) and _valid_id(body.get("id")) else None
            session = self.session(headers.get(HTTP_SESSION_HEADER), rid)
            version = headers.get(HTTP_VERSION_HEADER)
            if version is not None and version != session.version:
                raise HttpError(400, f"Bad Request: {HTTP_VERSION_HEADER} {version!r} is not the version this "
                                     f"session negotiated ({session.version})", INVALID_REQUEST, rid=rid)
        session.current = memory
        session.settings = memory.settings
        reply = session.handle_batch(body) if isinstance(body, list) else session.handle(body)
        if reply is None:
            return 202, None, extra
        if isinstance(body, dict) and body.get("method") == "initialize" and "error" in reply:
            self._sessions.pop(extra.pop(HTTP_SESSION_HEADER, ""), None)
        return 200, reply, extra

    def warm_up(self) -> None:
        """Load the server's own graph in the background, so the first call does not pay for it."""
        def run() -> None:
            try:
                with self.calls:
                    facts = self.memory_for(None).warm_up()
                log(f"graph loaded and indexed: {facts} facts")
            except Exception as err:  # the first real call reports it
                log(f"background load stopped: {err}")
        threading.Thread(target=run, name="graphmem-warm-up", daemon=True).start()


def is_modern_message(body: Any) -> bool:
    """A 2026-07-28 message carries its protocol version in params._meta."""
    params = body.get("params") if isinstance(body, dict) else None
    return isinstance(params, dict) and isinstance(params.get("_meta"), dict) and META_VERSION in params["_meta"]


def valid_modern_meta(message: Any) -> bool:
    """Whether params._meta carries the protocol version (a string) and the client capabilities (an object)."""
    meta = (message.get("params") or {}).get("_meta") if isinstance(message, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get(META_VERSION), str) and isinstance(
        meta.get(META_CAPABILITIES), dict)


def header_mismatch(message: dict[str, Any], headers: Any) -> str | None:
    """Why the 2026-07-28 request headers (MCP-Protocol-Version, Mcp-Method, Mcp-Name) do not match the body,
    or None. A body without a protocol version in _meta is McpServer's to refuse (-32602), not a mismatch."""
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
    expected = [("Mcp-Method", message.get("method"))]
    if META_VERSION in meta:
        expected.insert(0, (HTTP_VERSION_HEADER, meta[META_VERSION]))
    if message.get("method") == "tools/call":
        expected.append(("Mcp-Name", params.get("name")))
    for name, body_value in expected:
        given = headers.get(name)
        if given is None:
            return f"the {name} header is missing (the body says {body_value!r})"
        if decode_header_value(given) != body_value:
            return f"{name} header value {given!r} does not match body value {body_value!r}"
    return None


def decode_header_value(value: str) -> str:
    """A header value as sent, or decoded from MCP's =?base64?...?= form (for non-ASCII names)."""
    if value.startswith("=?base64?") and value.endswith("?=") and len(value) >= 11:
        import base64
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return value
    return value


def split_host_port(value: str) -> tuple[str, int | None]:
    """('127.0.0.1', 8000) from '127.0.0.1:8000', '[::1]:8000' or 'localhost'; port None when absent or bad."""
    value = value.strip()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        name, _, port = value.partition(":")
    else:
        name, port = value, ""
    return name.lower(), int(port) if port.isdigit() else None


def wants_sse(accept: str) -> bool:
    """Whether the client's Accept header prefers text/event-stream to application/json (by q value; a tie,
    or both listed without weights as the spec asks clients to, gets JSON)."""
    weights: dict[str, float] = {}
    for part in accept.split(","):
        kind, *params = [p.strip() for p in part.split(";")]
        q = 1.0
        for p in params:
            if p.startswith("q="):
                with contextlib.suppress(ValueError):
                    q = float(p[2:])
        weights[kind.lower()] = max(weights.get(kind.lower(), 0.0), q)
    json_q = max(weights.get("application/json", 0.0), weights.get("application/*", 0.0), weights.get("*/*", 0.0))
    return weights.get("text/event-stream", 0.0) > json_q


def make_http_handler(mcp: HttpMcp) -> type:
    """The request handler class of --http, bound to `mcp`: auth, Origin and Host checks, body limits, then McpServer's
    handling of the message."""
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        server_version = f"graphmem/{__version__}"
        sys_version = ""
        protocol_version = "HTTP/1.1"  # keep-alive: a client's requests reuse one connection
        timeout = HTTP_READ_TIMEOUT  # a slow or silent client loses its connection, never a thread of ours
        disable_nagle_algorithm = True  # without it a reply in two writes waits ~40 ms for a delayed ACK
        wbufsize = 64 * 1024  # headers and body leave in one write (flushed by _write)

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: errors are logged where they happen
            pass

        def _write(self, status: int, body: bytes, ctype: str, headers: dict[str, str]) -> None:
            """Send one response; a client that went away is not an error of ours."""
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Cache-Control", "no-store" if ctype != "text/event-stream" else "no-cache")
                if ctype == "text/event-stream":
                    self.send_header("X-Accel-Buffering", "no")
                    self.send_header("Connection", "close")
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if body:
                    self.wfile.write(body)
                self.wfile.flush()
            except OSError:  # disconnected: whatever the call changed is already saved whole
                self.close_connection = True

        def _reply(self, status: int, reply: Any, headers: dict[str, str]) -> None:
            if reply is None:
                self._write(status, b"", "application/json", headers)
                return
            data = dump_json_line(reply).encode("utf-8")
            if wants_sse(self.headers.get("Accept", "")):
                self._write(status, b"event: message\ndata: " + data + b"\n\n", "text/event-stream", headers)
            else:
                self._write(status, data, "application/json", headers)

        def _refuse(self, err: HttpError) -> None:
            if err.code is not None:
                body = dump_json_line(_error(err.rid, err.code, err.message)).encode("utf-8")
                ctype = "application/json"
            else:
                body, ctype = (err.message + "\n").encode("utf-8"), "text/plain; charset=utf-8"
            self._write(err.status, body, ctype, err.headers)

        def _admit(self) -> None:
            """Raise HttpError unless the path, Host, Origin and token are all right."""
            from urllib.parse import urlsplit
            if urlsplit(self.path).path != HTTP_ENDPOINT:
                raise HttpError(404, f"Not found: MCP is served at {HTTP_ENDPOINT}")
            if not mcp.host_ok(self.headers.get("Host", "")):
                raise HttpError(403, "Forbidden: the Host header does not name this server (DNS rebinding?)")
            if not mcp.origin_ok(self.headers.get("Origin")):
                raise HttpError(403, f"Forbidden: a page from {self.headers.get('Origin')} may not use this server "
                                     f"(allow it with --allow-origin)", INVALID_REQUEST)
            auth = self.headers.get("Authorization")
            if auth is None or not mcp.token_ok(auth):
                why = "no Authorization header" if auth is None else "wrong token"
                challenge = 'Bearer realm="graphmem"' + ("" if auth is None else ', error="invalid_token"')
                raise HttpError(401, f"Unauthorized: {why}; send Authorization: Bearer <token> (the token the "
                                     f"server printed, or its {HTTP_TOKEN_ENV})",
                                headers={"WWW-Authenticate": challenge})

        def _drain(self) -> None:
            """Read a small unread body before refusing, so closing the connection does not reset it under the
            client before it reads our answer."""
            if self._body_read:
                return
            with contextlib.suppress(ValueError, OSError):
                length = int(self.headers.get("Content-Length", "0"))
                if 0 < length <= 65536:
                    self.rfile.read(length)

        def _body(self) -> Any:
            """The POST body parsed as JSON; HttpError for a body too big, short, slow or not JSON."""
            if self.headers.get_content_type() != "application/json":
                raise HttpError(415, "Unsupported Media Type: POST a JSON-RPC message as application/json")
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                raise HttpError(411, "Length Required: send the body with a Content-Length, not chunked")
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                raise HttpError(411, "Length Required: Content-Length must be a number of bytes") from None
            if length > HTTP_BODY_LIMIT or length < 0:
                raise HttpError(413, f"Payload Too Large: the body is {length} bytes, the limit {HTTP_BODY_LIMIT}")
            self._body_read = True
            try:
                raw = self.rfile.read(length)
            except OSError:
                raise HttpError(408, f"Request Timeout: the body did not arrive within "
                                     f"{HTTP_READ_TIMEOUT:.0f} s") from None
            if len(raw) < length:
                raise HttpError(400, "Bad Request: the body is shorter than its Content-Length")
            try:
                return json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise HttpError(400, "Parse error: the body is not valid UTF-8 JSON", PARSE_ERROR) from None

        def do_POST(self) -> None:
            self._body_read = False
            try:
                self._admit()
                status, reply, headers = mcp.exchange(self._body(), self.headers)
            except HttpError as err:
                self._drain()
                self.close_connection = True  # what is left of the request is not read
                self._refuse(err)
                return
            except Exception as err:  # never a silent drop: the client gets a JSON-RPC error
                log(f"internal error over HTTP: {err!r}")
                self._refuse(HttpError(500, f"Internal error: {type(err).__name__}: {err}", INTERNAL_ERROR))
                return
            self._reply(status, reply, headers)

        def do_DELETE(self) -> None:
            self._body_read = True
            try:
                self._admit()
                mcp.end_session(self.headers.get(HTTP_SESSION_HEADER))
            except HttpError as err:
                self._refuse(err)
                return
            self._write(204, b"", "application/json", {})

        def do_GET(self) -> None:
            self._body_read = True
            try:
                self._admit()
            except HttpError as err:
                self._refuse(err)
                return
            self._refuse(HttpError(405, "Method Not Allowed: this server opens no server-initiated stream; "
                                        "POST requests", headers={"Allow": "POST, DELETE"}))

    return Handler


def check_allowed(origins: Iterable[str], hosts: Iterable[str]) -> None:
    """ConfigError for an --allow-origin that is not scheme://host[:port] or an --allow-host that is not a bare
    name: either would never match what a browser or proxy sends, and the refusal would point back at the flag."""
    from urllib.parse import urlsplit
    for origin in origins:
        try:
            parts = urlsplit(origin.rstrip("/"))
            ok = parts.scheme in ("http", "https") and parts.hostname and not parts.path and not parts.query \
                and parts.port != 0
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"--allow-origin {origin!r}: give an origin as a browser sends it, "
                              "scheme://host[:port], e.g. https://app.example")
    for name in hosts:
        if not re.fullmatch(r"[A-Za-z0-9.-]+", name):
            raise ConfigError(f"--allow-host {name!r}: give the host name alone, e.g. mem.example "
                              "(no scheme, port or path)")


def parse_bind(value: str) -> tuple[str, int]:
    """('127.0.0.1', 8000) from 'PORT', 'HOST:PORT' or '[::1]:PORT'; ConfigError for anything else."""
    host, port = split_host_port(value if ":" in value or not value.isdigit() else f"127.0.0.1:{value}")
    if port is None or not 0 <= port <= 65535 or not host:
        raise ConfigError(f"--http {value!r}: give PORT or HOST:PORT, e.g. --http 8000 or --http 0.0.0.0:8000")
    return host, port


def http_token(env: dict[str, str]) -> tuple[str, bool]:
    """(token, generated): MEMORY_HTTP_TOKEN, else a new random one."""
    given = env.get(HTTP_TOKEN_ENV, "").strip()
    if given:
        if len(given) < 16:
            raise ConfigError(f"{HTTP_TOKEN_ENV} is {len(given)} characters; use at least 16 (e.g. the output of "
                              f"python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")
        return given, False
    return secrets.token_urlsafe(32), True


def serve_http(settings: Settings, bind: str, tls_cert: Path | None = None, tls_key: Path | None = None,
               allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = ()) -> int:
    """graphmem --http [HOST:]PORT: MCP at http(s)://HOST:PORT/mcp until Ctrl-C or SIGTERM."""
    import socketserver
    from http.server import ThreadingHTTPServer
    host, port = parse_bind(bind)
    check_allowed(allowed_origins, allowed_hosts)
    env = dict(os.environ)
    token, generated = http_token(env)
    mcp = HttpMcp(settings, env, token, host, [o.lower() for o in allowed_origins], allowed_hosts)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("GraphmemHttpServer", (ThreadingHTTPServer,), {
        "address_family": family, "daemon_threads": True, "block_on_close": False,
        "request_queue_size": HTTP_LISTEN_BACKLOG})
    try:
        server: socketserver.TCPServer = server_class((host, port), make_http_handler(mcp))
    except OSError as err:
        raise ConfigError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    scheme = "http"
    if tls_cert or tls_key:
        server.socket = tls_socket(server.socket, tls_cert, tls_key)
        scheme = "https"
    mcp.port = server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    log(f"MCP over Streamable HTTP at {scheme}://{shown}:{mcp.port}{HTTP_ENDPOINT} ; graph {settings.file_path}")
    if host not in LOOPBACK_NAMES:
        log(f"warning: listening on {host}, not loopback: anyone who can reach this address and has the token can "
            f"read and change this memory" + ("" if scheme == "https" else "; traffic (token included) is plain "
            "HTTP: add --tls-cert/--tls-key, or use an SSH tunnel or a TLS reverse proxy"))
    if generated:
        print(f"graphmem: token (shown once, never stored; set {HTTP_TOKEN_ENV} to choose your own): {token}",
              file=sys.stderr, flush=True)
    mcp.warm_up()
    # on the way out, let a call in flight finish its write
    serve_until_stopped(server, lambda: mcp.calls.acquire(timeout=HTTP_READ_TIMEOUT))
    return 0


def serve_until_stopped(server: Any, on_exit: Callable[[], Any] = lambda: None) -> None:
    """Serve an http.server until Ctrl-C or SIGTERM (a quiet stop either way), then close it and run on_exit."""
    import signal
    with contextlib.suppress(ValueError):  # not the main thread (tests): no handler
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        on_exit()


def tls_socket(sock: socket.socket, cert: Path | None, key: Path | None) -> socket.socket:
    """The listening socket wrapped for TLS. The handshake runs in each connection's own thread on its first
    read (do_handshake_on_connect=False), under the read timeout, so a slow handshake stalls nobody else."""
    import ssl
    if not cert or not key:
        raise ConfigError("TLS needs both --tls-cert FILE and --tls-key FILE")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"cannot load the TLS certificate {cert} / key {key}: {err}") from None
    return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)


# ════════════════════════════════════════════════════════════════════════════
# 12. UI server: http.server on 127.0.0.1, one-time key, session + page token, Origin/Host checks, JSON API
# ════════════════════════════════════════════════════════════════════════════

# How the UI keeps other pages out. The printed key opens one session (a cookie); the page served to that
# session carries a token the API wants back in a header, which a page from another origin cannot send.
UI_BODY_LIMIT = 65_536                      # bytes in one POST body; a longer one is refused (413) unread
UI_COOKIE_PREFIX = "graphmem_session_"      # + the port: cookies ignore ports, so each UI names its own
UI_TOKEN_HEADER = "X-Graphmem-Token"        # every API call sends the page's token in this header
UI_TOKEN_META = '<meta name="graphmem-token" content="{}">'  # in ui.html with "": the server fills the token in
UI_FETCH_SITES = ("same-origin", "none")    # Sec-Fetch-Site values let through (same-site = another local port)
UI_READ_TIMEOUT = 30                        # seconds a connection may stall in the middle of a request
# The pages a browser gets instead of the UI: no session, or a link whose key was used already.
UI_NOTICE = ("<!doctype html><meta charset=utf-8><title>graphmem</title>"
             "<p style='font: 16px system-ui; margin: 3em auto; max-width: 36em'>{}")
UI_NO_KEY = ("This page needs a session. Open the link that <code>graphmem --ui</code> printed "
             "(it carries a one-time key).")
UI_KEY_USED = ("This link was already used: its key works once, in the browser that opened it first. "
               "Run <code>graphmem --ui</code> again for a new link.")


def asset_path(name: str) -> Path | None:
    """ui.html and AGENT-PROTOCOL.md: beside this file in a checkout, under <prefix>/share/graphmem when installed."""
    import site
    shared = [Path(prefix) / "share" / "graphmem" / name
              for prefix in (sys.prefix, site.getuserbase(), sys.base_prefix)]
    candidates = [Path(__file__).resolve().with_name(name), *shared]
    return next((c for c in candidates if c.is_file()), None)


class UiApi:
    """What the page reads and the changes it makes, all through Memory (same checks, same lock, same history)."""

    def __init__(self, memory: Memory):
        self.memory = memory
        self._tiers: dict[str, UiApi] = {}

    # ── tiers: the page shows one at a time and edits it (tier= on reads, "tier" in an op's body) ──
    def tier_names(self) -> list[str]:
        """The project tier (or the only file), then global when a project reads it alongside."""
        return [self.memory.settings.tier] + (["global"] if self.memory.settings.global_path else [])

    def for_tier(self, tier: str | None) -> "UiApi":
        """The API over one tier's graph; no tier: the project tier (or the only one). ValueError when unknown."""
        if not tier or tier == self.memory.settings.tier:
            return self
        if tier not in self.tier_names():
            raise ValueError(f"unknown tier {tier!r}; tiers here: {', '.join(self.tier_names())}")
        if tier not in self._tiers:
            self._tiers[tier] = UiApi(self.memory.global_memory(create=True))
        return self._tiers[tier]

    def tiers(self) -> list[dict[str, Any]]:
        """Each tier: name, file, facts, and whether writes go there by default."""
        found = []
        for name in self.tier_names():
            memory = self.for_tier(name).memory
            with memory.lock:  # the store's cached graph: parsed again only when its file changed
                facts = memory.store.read().fact_count()
            found.append({"tier": name, "file": str(memory.settings.file_path), "facts": facts,
                          "default": name == self.memory.settings.tier})
        return found

    def tier_graph(self, tier: str | None) -> dict[str, Any]:
        """The graph of one tier, each entity marked with it, and the list of tiers for the selector."""
        view = self.for_tier(tier)
        data = view.graph()
        name = view.memory.settings.tier
        for entity in data["entities"]:
            entity["tier"] = name
        return {**data, "tier": name, "tiers": self.tiers()}

    def graph(self) -> dict[str, Any]:
        """/api/graph: every entity with its facts' state (pinned, retention, fading, date, anchor), and the
        relations."""
        m = self.memory
        with m.lock:
            graph = m.fresh_graph()
            clock = m.meta.clock()
            archived = self._archived_counts()
            entities = []
            for e in graph.entities:
                facts = []
                for text in e.observations:
                    state = m.meta.state(e.name, text)
                    retention = state.retention(clock)
                    facts.append({"text": text, "pinned": state.pinned, "retention": round(retention, 3),
                                  "fading": m.lifecycle.fading(e, text, clock) is not None,
                                  "dated": fact_date(text) is not None, "date": fact_date(text),
                                  "anchor": m.anchors.status(e.name, text)})
                entities.append({"name": e.name, "entityType": e.entityType, "facts": facts,
                                 "archived": archived.get(e.name, 0),
                                 "overCap": len(e.observations) > m.settings.obs_max})
            return {"version": m.version(), "file": str(m.settings.file_path), "unreadable": len(graph.unreadable),
                    "limits": {"obsMaxChars": m.settings.obs_max_chars, "obsMax": m.settings.obs_max},
                    "entities": entities,
                    "relations": [{"from": r.frm, "to": r.to, "relationType": r.relationType} for r in graph.relations]}

    def _archive_files(self) -> Iterator[tuple[str, Path]]:
        folder = self.memory.store.archive_dir
        if folder.is_dir():
            for path in sorted(folder.glob("*.md")):
                name = archive_entity_name(path)
                if name is not None:
                    yield name, path

    def _archived_counts(self) -> dict[str, int]:
        return {name: len(parse_archive(read_archive_text(path))) for name, path in self._archive_files()}

    def archived(self, name: str) -> dict[str, Any]:
        """/api/archived: an entity's archived facts, why and when."""
        facts = self.memory.store.read_archive(name)
        return {"name": name, "facts": [{"text": f.text, "why": f.why, "when": f.when} for f in facts]}

    def search(self, query: str) -> dict[str, Any]:
        """/api/search: entities matching every word, and archived facts that do."""
        words = query_words(query)
        with self.memory.lock:
            self.memory.fresh_graph()
            names = [d.name for d in self.memory.index.match_entities(query)] if words else []
        hits = []
        if words:
            for name, path in self._archive_files():
                for fact in parse_archive(read_archive_text(path)):
                    if all(w in f"{name}\n{fact.text}".lower() for w in words):
                        hits.append({"entity": name, "text": fact.text})
        return {"query": query, "entities": names, "archivedHits": hits[:200]}

    def overview(self) -> dict[str, Any]:
        """/api/overview: what needs attention (pending, over the cap, fading, stale anchors), the most connected
        entities, the receipts and the probes."""
        m = self.memory
        with m.lock:
            graph = m.fresh_graph()
            degree = {name: len(ix) for name, ix in m.index.touching(graph).items()}
            fading = [{"entity": e, "text": o, "retention": round(r, 3)}
                      for r, e, o in m.lifecycle.fading_facts(graph)]
            stale = [{"entity": e.name, "text": o, "detail": st["detail"]}
                     for e in graph.entities for o in e.observations
                     for st in [m.anchors.status(e.name, o)] if st and st["state"] != "current"]
            return {
                "pending": [e.name for e in graph.entities
                            if e.entityType.lower() in ("pending", "todo") or e.name.upper().startswith("PENDING")],
                "mostConnected": [{"name": n, "degree": d} for n, d in
                                  sorted(degree.items(), key=lambda kv: (-kv[1], kv[0]))[:10] if graph.get(n)],
                "overBudget": [{"name": e.name, "facts": len(e.observations), "cap": m.settings.obs_max}
                               for e in graph.entities if len(e.observations) > m.settings.obs_max],
                "fading": fading[:50], "stale": stale[:50], "receipts": receipts(m), "probes": ui_probes(m)}

    def history(self, limit: int) -> dict[str, Any]:
        """/api/history: the newest changes, who made them, undone or not."""
        rows = self.memory.meta.history(max(1, min(limit, 200)))
        return {"changes": [{"id": i, "ts": utc_stamp(ts, "%Y-%m-%dT%H:%M:%SZ"),
                             "client": c, "summary": s + (" (undone)" if u else "")} for i, ts, c, s, u in rows]}

    def op(self, body: dict[str, Any]) -> dict[str, Any]:
        """/api/op: one change from the page through the same handlers as an agent's, answered as data (ui_reply)."""
        name = body.get("op")
        spec = UI_OPS.get(name) if isinstance(name, str) else None
        if spec is None:
            return ui_refusal(str(name), f"unknown op {name!r}; ops: {', '.join(UI_OPS)}")
        fields, run = spec
        for field in fields:
            value = body.get(field)
            if field == "pinned":
                if not isinstance(value, bool):
                    return ui_refusal(name, "pinned must be true or false")
            elif field == "id":
                if not isinstance(value, int) or isinstance(value, bool):
                    return ui_refusal(name, f"{name} needs id (a whole number)")
            elif field == "texts":
                if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
                    return ui_refusal(name, f"{name} needs texts (a list of strings)")
            elif not isinstance(value, str):
                return ui_refusal(name, f"{name} needs {field} (a string)")
        with self.memory.acting_as("ui"):  # exactly this op, never an agent's call
            try:
                answer, is_error = run(self.memory, *[body[f] for f in fields])
            except ToolError as err:
                answer, is_error = WriteResult.refusal(name, err), True
            except StoreError as err:
                answer, is_error = WriteResult.refusal(name, f"Not saved: {err}.", "not_saved"), True
        return ui_reply(answer, is_error)


def ui_reply(answer: Answer, is_error: bool) -> dict[str, Any]:
    """An op's answer for the page, decided from data, never from the answer's words (an entity named "Not
    found page" was once reported as refused): status (done, partial, unchanged, refused) and ok (something
    was saved) from the WriteResult, its outcomes under "result" for the page to explain, and the text a model
    would read as "message". A text answer (probes, undo) worked unless it is an error."""
    result = answer.as_json() if isinstance(answer, WriteResult) else {"status": "refused" if is_error else "done"}
    return {"ok": result["status"] in ("done", "partial"), "status": result["status"],
            "message": render_text(answer), "result": result}


def ui_refusal(op: str, message: str) -> dict[str, Any]:
    """An op refused before it ran (unknown op, a missing or mistyped field)."""
    return ui_reply(WriteResult.refusal(op, message, "invalid_arguments"), True)


def ui_whole_number(query: dict[str, str], name: str, default: int) -> int:
    """A whole-number query parameter; anything else is a ValueError the API answers as a 400 that names it."""
    text = query.get(name, "") or str(default)
    if not text.lstrip("-").isdigit():
        raise ValueError(f"{name} must be a whole number, got {text[:40]!r}")
    return int(text)


def _tool(name: str, build: Callable[..., dict[str, Any]]) -> Callable[..., tuple[Answer, bool]]:
    """A UI op through an agent tool: the same handler, checks and lock; its answer as data."""
    return lambda memory, *args: memory.answer_tool(name, build(*args))


UI_PROBES_SHOWN = 200  # the newest; --probes lists every one


def ui_probes(memory: Memory) -> dict[str, Any]:
    """The guardrail's probes for the overview: newest first, with how many there are in all."""
    try:
        rows = memory.probe_listing()
    except sqlite3.Error as err:
        return {"items": [], "total": 0, "error": describe_db_error(memory.meta.path, err)}
    return {"items": rows[::-1][:UI_PROBES_SHOWN], "total": len(rows)}


def _direct(method: str) -> Callable[..., tuple[Answer, bool]]:
    """A UI op through a Memory method beyond the agent tools (edits, undo, probes); a refusal raises ToolError."""
    return lambda memory, *args: (getattr(memory, method)(*args), False)


UI_OPS: dict[str, tuple[tuple[str, ...], Callable[..., tuple[Answer, bool]]]] = {
    "create_entity": (("name", "entityType"), _tool("create_entities", lambda n, t: {"entities": [
        {"name": n, "entityType": t, "observations": []}]})),
    "delete_entity": (("name",), _tool("delete_entities", lambda n: {"entityNames": [n]})),
    "set_type": (("name", "entityType"), _direct("set_entity_type")),
    "rename": (("name", "newName"), _tool("rename_entity", lambda n, nn: {"name": n, "newName": nn})),
    "add_fact": (("name", "text"), _tool("add_observations", lambda n, t: {"observations": [
        {"entityName": n, "contents": [t]}]})),
    "add_facts": (("name", "texts"), _tool("add_observations", lambda n, ts: {"observations": [
        {"entityName": n, "contents": ts}]})),
    "edit_fact": (("name", "old", "new"), _direct("edit_fact")),
    "delete_fact": (("name", "text"), _tool("delete_observations", lambda n, t: {"deletions": [
        {"entityName": n, "observations": [t]}]})),
    "pin": (("name", "text", "pinned"), _tool("mark_fact", lambda n, t, p: {
        "entityName": n, "observation": t, "action": "pin" if p else "unpin"})),
    "add_relation": (("from", "to", "relationType"), _tool("create_relations", lambda f, t, r: {"relations": [
        {"from": f, "to": t, "relationType": r}]})),
    "delete_relation": (("from", "to", "relationType"), _tool("delete_relations", lambda f, t, r: {"relations": [
        {"from": f, "to": t, "relationType": r}]})),
    "restore": (("name", "text"), _tool("archived_observations", lambda n, t: {"entityName": n, "restore": [t]})),
    "archive_fact": (("name", "text"), _direct("archive_fact")),
    "verify_fact": (("name", "text"), _tool("mark_fact", lambda n, t: {
        "entityName": n, "observation": t, "action": "verified"})),
    "undo": ((), _direct("undo")),
    "add_probe": (("query", "entity", "fact"), _direct("add_manual_probe")),
    "remove_probe": (("id",), _direct("remove_probe")),
}


def receipts(memory: Memory) -> dict[str, Any]:
    """The savings ledger for the UI's overview: calls, tokens returned and the reference's, saved, and per day."""
    rows, series = memory.meta.ledger_totals(), memory.meta.ledger_series()
    saved = max(rows[2] - rows[1], 0)
    s = memory.settings
    return {"calls": rows[0], "tokensUsed": rows[1], "tokensReference": rows[2], "tokensSaved": saved,
            "dollarsSaved": round(saved * s.price_per_mtok / 1e6, 4), "pricePerMTok": s.price_per_mtok,
            "priceModel": s.price_model, "series": [{"day": d, "saved": v} for d, v in series]}


class UiAuth:
    """Who may use the UI: the printed one-time key is exchanged, once, for a session cookie named after the
    port; the page served to that session carries a token every API call must send back in a header."""

    def __init__(self, key: str):
        self.key = key
        self.cookie = UI_COOKIE_PREFIX  # completed by bind_port once the server knows its port
        self._key_used = False
        self._sessions: dict[str, str] = {}  # cookie value -> the token of the page served with it
        self._lock = threading.Lock()

    def bind_port(self, port: int) -> None:
        """Name the cookie after the port, so a second UI on another port does not log this one out."""
        self.cookie = f"{UI_COOKIE_PREFIX}{port}"

    def is_key(self, given: str) -> bool:
        """Whether `given` is the printed key (used or not), compared in constant time."""
        return secrets.compare_digest(given.encode(), self.key.encode())

    def open_session(self) -> str | None:
        """A new session cookie value the first time the key is used; None ever after."""
        with self._lock:
            if self._key_used:
                return None
            self._key_used = True
            session = secrets.token_urlsafe(32)
            self._sessions[session] = secrets.token_urlsafe(32)
            return session

    def set_cookie(self, session: str) -> str:
        """The Set-Cookie value for a session: not readable by scripts, never sent by another site's page."""
        return f"{self.cookie}={session}; HttpOnly; SameSite=Strict; Path=/"

    def token_for(self, cookie_header: str) -> str | None:
        """The page token of the session this Cookie header carries, or None when it carries none of ours."""
        for part in cookie_header.split(";"):
            name, _, value = part.strip().partition("=")
            if name != self.cookie:
                continue
            with self._lock:
                sessions = list(self._sessions.items())
            for session, token in sessions:
                if secrets.compare_digest(value.encode(), session.encode()):
                    return token
        return None


# What the page may read: path -> its answer, from the API, the API of the tier the page shows (?tier=) and
# the query string's parameters (GET; changes are POSTed to /api/op, see UI_OPS).
UI_READS: dict[str, Callable[[UiApi, UiApi, dict[str, str]], Any]] = {  # (api, the chosen tier's api, query)
    "/api/version": lambda api, view, q: {"version": view.memory.version()},
    "/api/graph": lambda api, view, q: api.tier_graph(q.get("tier")),
    "/api/archived": lambda api, view, q: view.archived(q.get("name", "")),
    "/api/search": lambda api, view, q: view.search(q.get("q", "")),
    "/api/overview": lambda api, view, q: view.overview(),
    "/api/history": lambda api, view, q: view.history(ui_whole_number(q, "limit", 20)),
}


def make_ui_handler(api: UiApi, auth: UiAuth, page: Callable[[], bytes]) -> type:
    """The request handler class of --ui, bound to the API, the auth and the page: Host/Origin checks, the session
    cookie and page token, UI_READS and UI_OPS."""
    from http.server import BaseHTTPRequestHandler
    from urllib.parse import parse_qs, urlsplit

    class Handler(BaseHTTPRequestHandler):
        server_version = f"graphmem/{__version__}"
        sys_version = ""
        timeout = UI_READ_TIMEOUT

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: stderr only on errors
            pass

        def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Content-Security-Policy",
                             "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                             "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass"),
                       "application/json; charset=utf-8")

        def _notice(self, status: int, text: str) -> None:
            self._send(status, UI_NOTICE.format(text).encode(), "text/html; charset=utf-8")

        def _refuse(self, status: int, error: str) -> None:
            """A JSON error, and the connection closed: what is left of the request is not read."""
            self._json(status, {"error": error})
            self.close_connection = True

        def _host_ok(self) -> bool:
            port = self.server.server_address[1]
            return self.headers.get("Host", "") in (f"127.0.0.1:{port}", f"localhost:{port}")

        def _guard(self) -> bool:
            if not self._host_ok():
                self._send(403, b"Forbidden: wrong Host header", "text/plain; charset=utf-8")
                return False
            return True

        def _origin_problem(self) -> str | None:
            """Why a browser says this request comes from another origin (another local port counts), or None."""
            origin = self.headers.get("Origin")
            if origin is not None and origin != f"http://{self.headers['Host']}":
                return f"refused: a page from {origin} may not use this UI's API"
            site = self.headers.get("Sec-Fetch-Site")
            if site is not None and site not in UI_FETCH_SITES:
                return f"refused: a {site} request may not use this UI's API"
            return None

        def _session_problem(self) -> str | None:
            """Why this request does not carry our session cookie and its page's token header, or None."""
            token = auth.token_for(self.headers.get("Cookie", ""))
            if token is None:
                return "no session: open the link graphmem --ui printed"
            if not secrets.compare_digest(self.headers.get(UI_TOKEN_HEADER, "").encode(), token.encode()):
                return f"missing or wrong {UI_TOKEN_HEADER} header: reload the page"
            return None

        def _api_allowed(self) -> bool:
            """Same origin, our session and its token; otherwise a 403 has been sent."""
            problem = self._origin_problem() or self._session_problem()
            if problem:
                self._json(403, {"error": problem})
                return False
            return True

        def _page(self, given_key: str | None) -> None:
            """/ : exchange the one-time key for a session (then drop it from the address bar), or the page."""
            token = auth.token_for(self.headers.get("Cookie", ""))
            if given_key is not None and token is None and self.command == "GET" and auth.is_key(given_key):
                session = auth.open_session()
                if session is None:
                    self._notice(410, UI_KEY_USED)
                else:
                    self._send(303, b"", "text/plain", {"Location": "/", "Set-Cookie": auth.set_cookie(session)})
            elif given_key is not None and token is not None:
                self._send(303, b"", "text/plain", {"Location": "/"})
            elif token is not None:
                filled = page().replace(UI_TOKEN_META.format("").encode(), UI_TOKEN_META.format(token).encode(), 1)
                self._send(200, filled, "text/html; charset=utf-8")
            else:
                self._notice(403, UI_NO_KEY)

        def _read_json_object(self) -> dict[str, Any] | None:
            """The POST body as a JSON object; None once a clean 400 or 413 has been sent instead."""
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if length < 0:
                return self._refuse(400, "Content-Length must be a number of bytes")
            if length > UI_BODY_LIMIT:
                return self._refuse(413, f"body over {UI_BODY_LIMIT} bytes")
            try:
                raw = self.rfile.read(length)
            except OSError:
                return self._refuse(400, f"the body did not arrive within {UI_READ_TIMEOUT}s")
            if len(raw) < length:
                return self._refuse(400, "the body is shorter than its Content-Length")
            try:
                body = json.loads(raw.decode("utf-8"))
            except RecursionError:
                return self._refuse(400, "invalid JSON body: nested too deeply")
            except (ValueError, UnicodeDecodeError) as err:
                return self._refuse(400, f"invalid JSON body: {err}")
            if not isinstance(body, dict):
                return self._refuse(400, "invalid JSON body: expected a JSON object")
            return body

        def do_GET(self) -> None:
            if not self._guard():
                return
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/":
                self._page(query.get("key"))
                return
            if not url.path.startswith("/api/"):
                self._send(404, b"not found", "text/plain; charset=utf-8")
                return
            if not self._api_allowed():
                return
            read = UI_READS.get(url.path)
            if read is None:
                self._json(*((405, {"error": "changes need POST"}) if url.path == "/api/op" else
                             (404, {"error": f"no such endpoint {url.path}"})))
                return
            try:
                view = api.for_tier(query.get("tier"))  # one tier's graph (unknown tier: 400 below)
                with managed_heap():
                    answer = read(api, view, query)
                self._json(200, answer)
            except (ValueError, OSError) as err:
                self._json(400, {"error": str(err)})
            except Exception as err:
                log(f"UI read failed: {err!r}")
                self._json(500, {"error": f"internal error: {type(err).__name__}: {err}"})

        def do_POST(self) -> None:
            if not self._guard() or not self._api_allowed():
                self.close_connection = True
                return
            if urlsplit(self.path).path != "/api/op":
                self._refuse(404, "POST goes to /api/op")
                return
            if self.headers.get_content_type() != "application/json":
                self._refuse(415, "changes must be sent with Content-Type: application/json")
                return
            body = self._read_json_object()
            if body is None:
                return
            tier = body.get("tier")
            try:
                if tier is not None and not isinstance(tier, str):
                    raise ValueError("tier must be a string such as \"global\"; tiers here: "
                                     + ", ".join(api.tier_names()))
                view = api.for_tier(tier)
            except ValueError as err:  # an unknown tier: refused like any bad op
                self._json(200, ui_refusal(str(body.get("op")), str(err)))
                return
            try:
                with managed_heap():
                    answer = view.op(body)
                self._json(200, answer)
            except Exception as err:  # the page gets a message, the server keeps serving
                log(f"UI op failed: {err!r}")
                self._json(500, {"error": f"internal error: {type(err).__name__}: {err}"})

        do_HEAD = do_GET

    return Handler


def serve_ui(settings: Settings, port: int, open_browser: bool, demo: bool) -> int:
    """--ui: serve the web UI on 127.0.0.1 until Ctrl-C (--demo: a temporary copy of the demo graph)."""
    from http.server import ThreadingHTTPServer
    temp = None
    if demo:
        temp = tempfile.TemporaryDirectory(prefix="graphmem-demo-")
        settings = dataclasses.replace(settings, file_path=Path(temp.name) / "memory.jsonl", tier="file",
                                       global_path=None)  # the demo never reads or edits a real tier
        write_demo_graph(settings)
    memory = Memory(settings, "ui")
    api = UiApi(memory)
    page_path = asset_path("ui.html")
    if page_path is None:
        log("ui.html is missing from this installation")
        return 1
    auth = UiAuth(secrets.token_urlsafe(24))
    server = None
    if not 0 <= port <= 65535:
        raise ConfigError(f"--ui {port}: give a port from 1 to 65535, or 0 for any free port")
    for candidate in ([port] if port == 0 else range(port, min(port + 20, 65536))):
        try:
            server = ThreadingHTTPServer(("127.0.0.1", candidate), make_ui_handler(api, auth, page_path.read_bytes))
            break
        except OSError:
            log(f"port {candidate} is taken; trying {candidate + 1}")
    if server is None:
        log(f"ports {port}..{port + 19} are all taken; pass another: --ui PORT")
        return 1
    server.daemon_threads = True
    actual = server.server_address[1]
    auth.bind_port(actual)
    url = f"http://127.0.0.1:{actual}/?key={auth.key}"
    print(f"graphmem UI: {url}", flush=True)
    log(f"serving {settings.file_path}{' (demo copy)' if demo else ''}; Ctrl-C to stop")
    if open_browser:
        import webbrowser
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    serve_until_stopped(server, temp.cleanup if temp else lambda: None)
    return 0


# ════════════════════════════════════════════════════════════════════════════
# 12b. Demo graph for --ui --demo: a fictional small software shop
# ════════════════════════════════════════════════════════════════════════════

def demo_graph_lines(today: dt.date) -> "list[str]":
    """JSONL lines (reference memory-server format) of a fictional small software shop.

    Every name, person and client is made up; dates are relative to `today` so the
    demo always looks recent. No secrets, every fact under 300 characters.
    """
    def d(days_ago):
        return (today - dt.timedelta(days=days_ago)).isoformat()

    entities = [
        # --- services -------------------------------------------------------
        ("shop-api", "service", [
            "Python 3.12 + FastAPI service behind the public storefront; owns orders, carts and stock",
            "runs 4 replicas on the prod cluster; health check at /healthz",
            "talks to postgres-main through pgbouncer, pool size 40",
            "p95 latency target 250 ms for GET endpoints",
            "feature flags read from the flags table at start-up and every 60 s",
            "logs are JSON lines shipped to the log stack; request id header is X-Request-Id",
            "rate limit 600 requests per minute per client key",
            d(120) + ": deployed 2.1.0 with the new cart model",
            d(95) + ": deployed 2.2.0; stock reservations now expire after 15 minutes",
            d(70) + ": incident: checkout 500s for 40 minutes after a bad migration; rolled back",
            d(64) + ": deployed 2.3.0 with idempotency keys on POST /orders",
            d(41) + ": moved image resizing out to media-worker",
            d(30) + ": p95 latency regressed to 410 ms; traced to N+1 query in order history",
            d(28) + ": fixed the order history N+1 query; p95 back to 190 ms",
            d(12) + ": deployed 2.4.0; adds partial refunds for billing-worker",
            d(5) + ": deployed 2.4.1 hotfix for rounding of discount totals",
            d(2) + ": error budget for the month is 62% used",
            "owner team: core backend (Ben Okafor is tech lead)",
            "staging URL is the staging cluster ingress, same image tag as prod minus one",
        ]),
        ("shop-web", "service", [
            "Next.js storefront; server-side rendered product pages, client-side cart",
            "deployed to the edge CDN; build takes about 6 minutes",
            "uses shop-api only through the public REST endpoints",
            d(60) + ": switched product images to AVIF with JPEG fallback",
            d(18) + ": released the new checkout layout behind flag checkout_v3",
            d(4) + ": Lighthouse performance score 92 on the product page",
        ]),
        ("billing-worker", "service", [
            "queue consumer that charges cards through the payment provider and writes invoices",
            "retries failed charges 3 times with exponential back-off",
            "reads jobs from the billing queue on redis-cache",
            d(33) + ": double charge for 2 Oakridge Clinic invoices; refunds issued the same day",
            d(9) + ": partial refund support shipped with shop-api 2.4.0",
        ]),
        ("search-service", "service", [
            "product search on OpenSearch; index rebuilt nightly at 02:00 UTC",
            "synonym list lives in repo shop-monorepo under search/synonyms.txt",
            d(22) + ": relevance tuning for Northwind Cycles bike parts catalogue",
        ]),
        ("auth-gateway", "service", [
            "OIDC gateway in front of the admin tools; sessions last 8 hours",
            "supports SAML only through the identity broker",
            d(47) + ": upgraded to the new token format; old tokens accepted until further notice",
        ]),
        ("media-worker", "service", [
            "resizes product images and writes them to the object store",
            d(41) + ": split out of shop-api to keep request latency low",
        ]),
        # --- infrastructure ----------------------------------------------------
        ("postgres-main", "database", [
            "PostgreSQL 14 primary with one streaming replica",
            "nightly base backup plus WAL archiving; restore tested every quarter",
            d(88) + ": restore drill took 47 minutes end to end",
            d(15) + ": disk at 71%; archive old order events before it reaches 85%",
        ]),
        ("redis-cache", "database", [
            "Redis 7 used for sessions, the billing queue and hot product cache",
            "maxmemory policy allkeys-lru except the queue database",
        ]),
        ("prod cluster", "infrastructure", [
            "Kubernetes 1.29, three node pools: general, memory, batch",
            "deploys through Argo CD from repo infra-config",
            d(26) + ": node pool general scaled from 6 to 8 nodes for the spring sale",
        ]),
        ("staging cluster", "infrastructure", [
            "single node pool; reset every Monday from anonymised fixtures",
        ]),
        ("CI pipeline", "infrastructure", [
            "GitHub-style pipeline: lint, unit tests, build image, deploy to staging",
            "main branch must stay green; flaky tests get quarantined within a day",
            d(19) + ": average pipeline time down from 14 to 9 minutes after test sharding",
        ]),
        # --- repos -------------------------------------------------------------
        ("repo shop-monorepo", "repo", [
            "holds shop-api, shop-web, billing-worker and search-service",
            "trunk-based; release tags are vMAJOR.MINOR.PATCH",
            "CODEOWNERS maps each service folder to its team",
        ]),
        ("repo infra-config", "repo", [
            "Terraform and Kubernetes manifests for prod and staging",
            "changes need two approvals, one from ops",
        ]),
        ("repo mobile-app", "repo", [
            "React Native app for iOS and Android; shares the API client with shop-web",
            d(50) + ": 3.0 released to both stores",
        ]),
        # --- people -------------------------------------------------------------
        ("Alice Moreau", "person", [
            "engineering lead; sets priorities every Monday",
            "prefers short written proposals over meetings",
            d(10) + ": back from parental leave, taking over release planning again",
        ]),
        ("Ben Okafor", "person", [
            "backend tech lead; knows the order and stock model best",
            "on call in odd weeks",
        ]),
        ("Chen Wei", "person", [
            "frontend engineer; owns shop-web and the design system",
            d(18) + ": built the checkout_v3 layout",
        ]),
        ("Dana Kowalski", "person", [
            "ops engineer; owns the clusters, backups and the CI pipeline",
            "on call in even weeks",
        ]),
        ("Eli Navarro", "person", [
            "QA engineer; keeps the end-to-end suite for checkout",
            d(7) + ": added a regression test for the discount rounding bug",
        ]),
        ("Farah Haddad", "person", [
            "product manager for clients Brightleaf Grocers and Oakridge Clinic",
            "wants a weekly status note every Friday before noon",
        ]),
        ("Gus Lindqvist", "person", [
            "contract mobile developer, two days a week",
        ]),
        # --- clients ------------------------------------------------------------
        ("Brightleaf Grocers", "client", [
            "regional grocery chain, 40 stores; our largest client",
            "contract renews every January; SLA 99.9% for checkout",
            d(25) + ": asked for single sign-on for their store managers",
            d(3) + ": happy with the spring sale; peak 1,900 orders per hour",
        ]),
        ("Northwind Cycles", "client", [
            "bike shop chain with a large spare parts catalogue",
            d(22) + ": complained that part numbers were hard to find in search",
        ]),
        ("Oakridge Clinic", "client", [
            "private clinic group using the shop for paid health checks",
            "billing must produce one invoice per patient visit",
            d(33) + ": affected by the double charge; apology sent by Farah",
        ]),
        # --- rules ----------------------------------------------------------------
        ("RULE no friday deploys", "rule", [
            "no production deploys after 15:00 on Fridays or before a public holiday",
            "hotfixes allowed with approval from the on-call engineer",
        ]),
        ("RULE reviewed migrations", "rule", [
            "every database migration needs a second reviewer and a tested rollback",
            d(70) + ": added after the checkout incident",
        ]),
        ("RULE no prod data locally", "rule", [
            "never copy production data to laptops; use the anonymised fixtures",
        ]),
        ("RULE semver releases", "rule", [
            "breaking API changes bump the major version and get a deprecation notice first",
        ]),
        # --- pending work -----------------------------------------------------------
        ("PENDING billing retry fix", "pending", [
            "make charge retries idempotent so a timeout cannot charge twice",
            d(31) + ": opened after the Oakridge double charge",
        ]),
        ("PENDING upgrade postgres 16", "pending", [
            "upgrade postgres-main from 14 to 16 with logical replication cut-over",
            d(14) + ": dry run on staging planned",
        ]),
        ("PENDING Brightleaf SSO", "pending", [
            "single sign-on for Brightleaf store managers through auth-gateway",
            d(20) + ": waiting on their identity team for metadata",
        ]),
        ("PENDING search reindex", "pending", [
            "reindex with part-number analyser so exact part numbers rank first",
        ]),
        ("PENDING archive order events", "pending", [
            "move order events older than 2 years to cold storage",
        ]),
        # --- decisions ---------------------------------------------------------------
        ("DECISION monorepo", "decision", [
            d(400) + ": keep all web services in one repo to share the API client and CI",
        ]),
        ("DECISION feature flags in database", "decision", [
            d(200) + ": flags live in a postgres table, not a SaaS, to keep data in house",
        ]),
        ("DECISION OpenSearch", "decision", [
            d(300) + ": chose OpenSearch over hosted search for cost and data residency",
        ]),
        ("DECISION idempotency keys", "decision", [
            d(65) + ": every POST that creates money movement takes an Idempotency-Key header",
        ]),
        # --- projects and events -------------------------------------------------------
        ("Project Checkout v3", "project", [
            "new checkout flow: one page, saved addresses, partial refunds",
            d(18) + ": frontend behind flag checkout_v3 for 10% of traffic",
            d(6) + ": flag raised to 50%; conversion up 2.1 points",
        ]),
        ("Spring Sale", "event", [
            "yearly sale in the second week of spring; traffic triples",
            d(3) + ": ended without incidents",
        ]),
        ("INCIDENT checkout migration", "incident", [
            d(70) + ": checkout returned 500s for 40 minutes after a migration locked the orders table",
            "root cause: migration added an index without CONCURRENTLY",
            "follow-up: RULE reviewed migrations",
        ]),
    ]

    relations = [
        ("shop-web", "shop-api", "calls"),
        ("repo mobile-app", "shop-api", "calls"),
        ("shop-api", "postgres-main", "uses"),
        ("shop-api", "redis-cache", "uses"),
        ("shop-api", "search-service", "calls"),
        ("shop-api", "media-worker", "calls"),
        ("billing-worker", "redis-cache", "uses"),
        ("billing-worker", "postgres-main", "uses"),
        ("shop-api", "billing-worker", "enqueues jobs for"),
        ("auth-gateway", "shop-api", "protects admin of"),
        ("shop-api", "prod cluster", "runs on"),
        ("shop-web", "prod cluster", "runs on"),
        ("billing-worker", "prod cluster", "runs on"),
        ("search-service", "prod cluster", "runs on"),
        ("media-worker", "prod cluster", "runs on"),
        ("auth-gateway", "prod cluster", "runs on"),
        ("repo shop-monorepo", "shop-api", "contains"),
        ("repo shop-monorepo", "shop-web", "contains"),
        ("repo shop-monorepo", "billing-worker", "contains"),
        ("repo shop-monorepo", "search-service", "contains"),
        ("repo infra-config", "prod cluster", "configures"),
        ("repo infra-config", "staging cluster", "configures"),
        ("CI pipeline", "staging cluster", "deploys to"),
        ("CI pipeline", "repo shop-monorepo", "builds"),
        ("Ben Okafor", "shop-api", "leads"),
        ("Ben Okafor", "billing-worker", "maintains"),
        ("Chen Wei", "shop-web", "owns"),
        ("Dana Kowalski", "prod cluster", "operates"),
        ("Dana Kowalski", "CI pipeline", "owns"),
        ("Dana Kowalski", "postgres-main", "operates"),
        ("Eli Navarro", "Project Checkout v3", "tests"),
        ("Alice Moreau", "Ben Okafor", "manages"),
        ("Alice Moreau", "Chen Wei", "manages"),
        ("Alice Moreau", "Dana Kowalski", "manages"),
        ("Alice Moreau", "Eli Navarro", "manages"),
        ("Gus Lindqvist", "repo mobile-app", "works on"),
        ("Farah Haddad", "Brightleaf Grocers", "account manager for"),
        ("Farah Haddad", "Oakridge Clinic", "account manager for"),
        ("Farah Haddad", "Northwind Cycles", "account manager for"),
        ("Brightleaf Grocers", "shop-web", "uses"),
        ("Northwind Cycles", "search-service", "depends on"),
        ("Oakridge Clinic", "billing-worker", "depends on"),
        ("PENDING billing retry fix", "billing-worker", "blocks"),
        ("PENDING billing retry fix", "Oakridge Clinic", "blocks"),
        ("PENDING upgrade postgres 16", "postgres-main", "blocks"),
        ("PENDING upgrade postgres 16", "PENDING archive order events", "blocks"),
        ("PENDING Brightleaf SSO", "Brightleaf Grocers", "blocks"),
        ("PENDING Brightleaf SSO", "auth-gateway", "blocks"),
        ("PENDING search reindex", "Northwind Cycles", "blocks"),
        ("PENDING search reindex", "search-service", "blocks"),
        ("PENDING archive order events", "postgres-main", "blocks"),
        ("Ben Okafor", "PENDING billing retry fix", "assigned"),
        ("Dana Kowalski", "PENDING upgrade postgres 16", "assigned"),
        ("DECISION monorepo", "repo shop-monorepo", "shaped"),
        ("DECISION feature flags in database", "shop-api", "shaped"),
        ("DECISION OpenSearch", "search-service", "shaped"),
        ("DECISION idempotency keys", "shop-api", "shaped"),
        ("INCIDENT checkout migration", "RULE reviewed migrations", "led to"),
        ("INCIDENT checkout migration", "shop-api", "affected"),
        ("INCIDENT checkout migration", "DECISION idempotency keys", "led to"),
        ("Project Checkout v3", "shop-web", "changes"),
        ("Project Checkout v3", "shop-api", "changes"),
        ("Spring Sale", "Brightleaf Grocers", "involved"),
        ("RULE no friday deploys", "CI pipeline", "applies to"),
        ("RULE reviewed migrations", "postgres-main", "applies to"),
    ]

    lines = []
    for name, etype, facts in entities:
        lines.append(json.dumps({"type": "entity", "name": name, "entityType": etype,
                                 "observations": facts},
                                ensure_ascii=False, separators=(",", ":")))
    for frm, to, rtype in relations:
        lines.append(json.dumps({"type": "relation", "from": frm, "to": to,
                                 "relationType": rtype},
                                ensure_ascii=False, separators=(",", ":")))
    return lines


def demo_archive() -> "dict[str, list[str]]":
    """Archived facts for a few demo entities (as if moved out over the cap or superseded)."""
    return {
        "shop-api": [
            "deployed 1.9.4 with the legacy cart",
            "p95 latency target was 400 ms before the 2.x rewrite",
            "ran 2 replicas on the old VM hosts",
        ],
        "postgres-main": [
            "PostgreSQL 12 primary, no replica",
        ],
        "Alice Moreau": [
            "on parental leave; Ben covers release planning",
        ],
    }


# ════════════════════════════════════════════════════════════════════════════
# 13. Team: project memory committed with the code, merged by git without conflicts
# ════════════════════════════════════════════════════════════════════════════

TEAM_GITIGNORE = """# graphmem: local-only files (metadata, lock, backups, temp files);
# the graph and its archive are shared
*.db
*.db-*
*.db.corrupt-*
*.lock
*.lock.stale-*
*.tmp
.archive.*
*.unreadable
backups/
"""
TEAM_ATTRIBUTES = (f"{TEAM_DIR}/memory.jsonl merge=graphmem",  # fact-level three-way merge (--merge)
                   f"{TEAM_DIR}/archive/*.md merge=union")     # archived facts: keep both sides' lines


def init_team(root_hint: Path, command: list[str]) -> list[str]:
    """`graphmem --init`: the team folder, its .gitignore, the merge attributes and the driver. Idempotent."""
    root = work_tree_of(root_hint)
    if root is None:
        raise ConfigError(f"{root_hint} is not inside a git work tree: run --init in the project's repository")
    done = []
    folder = root / TEAM_DIR
    if not folder.is_dir():
        folder.mkdir()
        done.append(f"created {TEAM_DIR}/")
    graph = folder / "memory.jsonl"
    if not graph.exists():
        graph.write_bytes(b"")
        done.append(f"created {TEAM_DIR}/memory.jsonl (empty)")
    ignore = folder / ".gitignore"
    if not ignore.exists() or ignore.read_text(encoding="utf-8") != TEAM_GITIGNORE:
        ignore.write_text(TEAM_GITIGNORE, encoding="utf-8")
        done.append(f"wrote {TEAM_DIR}/.gitignore (memory.db, lock, backups and temp files stay local)")
    attributes = root / ".gitattributes"
    lines = attributes.read_text(encoding="utf-8").splitlines() if attributes.exists() else []
    missing = [line for line in TEAM_ATTRIBUTES if line not in lines]
    if missing:
        attributes.write_text("\n".join(lines + missing) + "\n", encoding="utf-8")
        done.append("added to .gitattributes: " + "; ".join(missing))
    driver = " ".join(shlex.quote(part) for part in command) + " --merge %O %A %B %P"
    if git(root, "config", "--local", "merge.graphmem.driver") != driver:
        git(root, "config", "--local", "merge.graphmem.name", "graphmem: fact-level merge of memory.jsonl")
        git(root, "config", "--local", "merge.graphmem.driver", driver)
        done.append(f"registered the merge driver in .git/config: {driver}")
    return done or ["already set up; nothing to do"]


def parse_mergeable(data: bytes) -> Graph:
    """A side of a merge: conflict markers healed, duplicates folded."""
    graph = parse_graph_bytes(data)
    if not heal_conflict_markers(graph):  # healing folds already
        fold_duplicates(graph)
    return graph


def three_way(base: list[Any], ours: list[Any], theirs: list[Any]) -> list[Any]:
    """Ours in order without what theirs deleted, then what theirs added: nothing either side added is lost."""
    in_base, in_ours, in_theirs = set(base), set(ours), set(theirs)
    kept = [x for x in ours if x not in in_base or x in in_theirs]
    added = [x for x in theirs if x not in in_base and x not in in_ours]
    return list(dict.fromkeys(kept + added))


def detect_renames(base: Graph, side: Graph) -> dict[str, str]:
    """{old: new} for entities of `base` gone from `side` whose type and most facts reappear under a new name."""
    side_names, base_names = side.by_name(), base.by_name()
    arrived = [e for e in side.entities if e.name not in base_names]
    renames = {}
    for gone in (e for e in base.entities if e.name not in side_names and e.observations):
        facts = set(gone.observations)
        best = max(arrived, key=lambda e: len(facts & set(e.observations)), default=None)
        if best and best.entityType == gone.entityType and len(facts & set(best.observations)) * 2 >= len(facts):
            renames[gone.name] = best.name
            arrived.remove(best)
    return renames


def renamed(graph: Graph, renames: dict[str, str]) -> Graph:
    """A copy of `graph` with entities and relation ends renamed."""
    if not renames:
        return graph
    return Graph([Entity(renames.get(e.name, e.name), e.entityType, list(e.observations), dict(e.extra))
                  for e in graph.entities],
                 [Relation(renames.get(r.frm, r.frm), renames.get(r.to, r.to), r.relationType, dict(r.extra))
                  for r in graph.relations], list(graph.other_lines))


def merge_entity(b: Entity | None, o: Entity, t: Entity, notes: list[str]) -> Entity:
    """One entity as both sides left it: ours' type unless only theirs changed it (a type changed on both sides keeps
    ours, noted), every fact either side kept or added (ours first), deletions on one side honoured."""
    etype = o.entityType
    if o.entityType != t.entityType:
        if b is not None and o.entityType == b.entityType:
            etype = t.entityType
        elif b is None or t.entityType != b.entityType:
            notes.append(f"{o.name}: type changed on both sides; kept {o.entityType!r}, theirs was {t.entityType!r}")
    facts = three_way(b.observations if b else [], o.observations, t.observations)
    return Entity(o.name, etype, facts, {**t.extra, **o.extra})


def merge_graphs(base: Graph, ours: Graph, theirs: Graph) -> tuple[Graph, list[str]]:
    """Three-way merge by entity, fact and relation. A fact or entity added on either side is kept; one
    deleted on one side and untouched on the other is deleted; a rename on one side follows; nothing is
    dropped to resolve a conflict (an entity deleted on one side but changed on the other is kept)."""
    notes: list[str] = []
    ours_renames, theirs_renames = detect_renames(base, ours), detect_renames(base, theirs)
    for old in set(ours_renames) & set(theirs_renames):
        if ours_renames[old] != theirs_renames[old]:
            notes.append(f"{old}: renamed to {ours_renames[old]!r} here and {theirs_renames[old]!r} there; kept both")
            del theirs_renames[old]
    both = {**theirs_renames, **ours_renames}
    base, ours, theirs = renamed(base, both), renamed(ours, theirs_renames), renamed(theirs, ours_renames)
    fold_duplicates(ours)
    fold_duplicates(theirs)
    b_by, o_by, t_by = base.by_name(), ours.by_name(), theirs.by_name()
    entities = []
    for name in dict.fromkeys([e.name for e in ours.entities] + [e.name for e in theirs.entities]):
        b, o, t = b_by.get(name), o_by.get(name), t_by.get(name)
        if o and t:
            entities.append(merge_entity(b, o, t, notes))
        elif o or t:
            side = o or t
            if b is None or side.to_json() != b.to_json():
                if b is not None:
                    notes.append(f"{name}: deleted on one side, changed on the other; kept")
                entities.append(side.copy())
    relations = {r.key: r for r in [*theirs.relations, *ours.relations]}
    keys = three_way(*([r.key for r in side.relations] for side in (base, ours, theirs)))
    other = three_way(base.other_lines, ours.other_lines, theirs.other_lines)
    return Graph(entities, [relations[k] for k in keys], other), notes


def merge_command(paths: list[str]) -> int:
    """Run the merge driver; exit 0 with a clean file (git then takes it), 2 on wrong arguments."""
    if len(paths) not in (3, 4):
        raise ConfigError("--merge needs BASE OURS THEIRS [PATH] (git passes %O %A %B %P)")
    missing = [f"{role} {path}" for role, path in zip(("BASE", "OURS", "THEIRS"), paths) if not Path(path).is_file()]
    if missing:  # git always passes three files (an empty BASE when both sides added the file): a typo, not a merge
        raise ConfigError(f"--merge: no such file: {', '.join(missing)}; nothing was written")
    try:
        notes = merge_files(Path(paths[0]), Path(paths[1]), Path(paths[2]), paths[3] if len(paths) == 4 else None)
    except OSError as err:  # a full disk or a read-only work tree: OURS is untouched (atomic replace)
        log(f"merge: cannot write the merged {paths[3] if len(paths) == 4 else paths[1]}: {err.strerror or err}. "
            "It is unchanged; git keeps the conflict: free space, then run the merge again.")
        return 1
    for note in notes:
        log(f"merge: {note}")
    return 0


def merge_files(base_path: Path, ours_path: Path, theirs_path: Path, shown_as: str | None = None) -> list[str]:
    """`graphmem --merge %O %A %B %P`: the merged graph replaces OURS (as git expects); returns notes."""
    sides = [parse_mergeable(_file_bytes(p) or b"") for p in (base_path, ours_path, theirs_path)]
    unreadable = [raw for side in sides[1:] for _, raw in side.unreadable]
    merged, notes = merge_graphs(*sides)
    if unreadable:  # the merged file must be strictly valid; the lines are kept beside the real file
        aside = Path((shown_as or str(ours_path)) + ".unreadable")
        with open(aside, "ab") as handle:
            handle.write(b"".join(raw.rstrip(b"\r") + b"\n" for raw in unreadable))
        notes.append(f"{len(unreadable)} unreadable line(s) moved to {aside}")
    write_atomic(ours_path, serialise_graph(merged).encode("utf-8"))
    return notes


def unmerged_sides(root: Path, rel: str) -> list[bytes] | None:
    """BASE, OURS and THEIRS of a file git left unmerged (index stages 1-3; a missing stage is empty), or None
    when the file is not unmerged (or git cannot say)."""
    listed = git(root, "ls-files", "-u", "--", rel)
    if not listed:
        return None
    stages = {line.split("\t")[0].split()[-1] for line in listed.splitlines()}
    sides = []
    for stage in ("1", "2", "3"):
        done = subprocess.run(["git", "-C", str(root), "show", f":{stage}:{rel}"], capture_output=True, timeout=30) \
            if stage in stages else None
        sides.append(done.stdout if done is not None and done.returncode == 0 else b"")
    return sides


def heal_unmerged(memory: "Memory") -> list[str]:
    """--lint --fix in a team tier git left unmerged (a clone whose merge driver is missing or could not run: the
    file then holds ours only, or conflict markers): merge git's own three sides fact by fact, then layer on
    whatever the work-tree file has beyond ours (a hand edit since). One change, through the usual write path."""
    project = memory.settings.project
    if memory.settings.tier != "team" or project is None:
        return []
    sides = unmerged_sides(project.root, f"{TEAM_DIR}/memory.jsonl")
    if sides is None:
        return []
    base, ours, theirs = (parse_mergeable(side) for side in sides)
    merged, notes = merge_graphs(base, ours, theirs)

    def change(tx: Transaction) -> str:
        heal_conflict_markers(tx.graph)
        result, _ = merge_graphs(ours, merged, tx.graph)
        for name in dict.fromkeys([e.name for e in tx.graph.entities] + [e.name for e in result.entities]):
            tx.touch(name)
        tx.touch_relations()
        tx.graph.entities, tx.graph.relations = result.entities, result.relations
        tx.graph.other_lines = result.other_lines
        tx.graph.invalidate()
        return "merged"
    memory.change("merge the unmerged team file from git's three sides", change, use=False)
    return [f"git left {TEAM_DIR}/memory.jsonl unmerged: merged its three sides fact by fact (both sides' new "
            f"facts kept); mark it resolved: git add {TEAM_DIR}/memory.jsonl"] + [f"merge: {n}" for n in notes]


# ── tiers on the command line: --projects, --init --move-private ──
def graph_file_facts(path: Path) -> tuple[int, int] | None:
    """(entities, facts) of a graph file, or None when there is none."""
    data = _file_bytes(path)
    if data is None:
        return None
    graph = parse_graph_bytes(data)
    return len(graph.entities), graph.fact_count()


def describe_tier_file(path: Path) -> str:
    """One line about a tier's graph file: facts, entities and the last write, or that it does not exist yet."""
    counts = graph_file_facts(path)
    if counts is None:
        return f"{path} (no file yet)"
    when = utc_stamp(path.stat().st_mtime)
    return f"{path}: {counts[1]} facts in {counts[0]} entities, last write {when}"


def projects_report(settings: Settings, env: dict[str, str]) -> str:
    """`graphmem --projects`: the tiers of the current directory (which one writes go to) and every private
    project memory in the data dir. Read-only."""
    project = settings.project
    if settings.tier == "file":
        lines = ["MEMORY_FILE_PATH is set: one file, no tiers.",
                 f"  * file    {describe_tier_file(settings.file_path)}"]
    elif project is None:
        lines = ["Here: not inside a git work tree; the global memory is the only tier.",
                 f"  * global  {describe_tier_file(settings.file_path)}"]
    else:
        lines = [f"Here: {project.root} (git work tree; identity {project.identity})",
                 "  * marks the tier writes go to; reads span it and global (scope: \"global\" writes to global)"]
        team = (describe_tier_file(project.team_path) if project.has_team
                else "none (graphmem --init creates .graphmem/)")
        private = describe_tier_file(project.private_path)
        if project.has_team and project.private_path.exists():
            private += " - NOT READ while .graphmem/ exists: graphmem --init --move-private moves it to the team"
        lines += [f"  {'*' if project.has_team else ' '} team    {team}",
                  f"  {' ' if project.has_team else '*'} private {private}",
                  f"    global  {describe_tier_file(settings.global_path)}"]
    folders = projects_dir(env)
    known = sorted(f for f in folders.iterdir() if f.is_dir()) if folders.is_dir() else []
    lines.append(f"Private project memories in {folders}: {len(known)}")
    for folder in known:
        data = read_project_json(folder)
        graph = folder / "memory.jsonl"
        counts = graph_file_facts(graph)
        moved = sorted(folder.glob("memory.jsonl.moved-*"))
        state = (f"{counts[1]} facts, last write {utc_stamp(graph.stat().st_mtime)}" if counts is not None else
                 f"moved to a team tier ({moved[-1].name} kept)" if moved else "no facts yet")
        paths = data.get("paths") or ["?"]
        here = " (here)" if project is not None and folder == project.private_path.parent else ""
        lines.append(f"  {data.get('identity', folder.name)}{here}: {state}; last path {paths[0]}"
                     + (f" (+{len(paths) - 1} more)" if len(paths) > 1 else ""))
        if project is not None and not here and counts and counts[1] and paths[0] == str(project.root) \
                and not project.has_team and graph_file_facts(project.private_path) is None:
            lines.append(f"    ^ last used at this work tree under another identity (a renamed remote?); this project "
                         f"no longer reads it. To keep using it, move the files of {folder} (memory.jsonl, memory.db,"
                         f" archive/) into {project.private_path.parent}")
    return "\n".join(lines)


def move_private(settings: Settings) -> list[str]:
    """`graphmem --init --move-private`: every fact, entity and relation of the project's private memory goes
    into the team file (a union, through the usual write path: nothing there is replaced or dropped). The
    private file is then renamed to memory.jsonl.moved-<time> beside it, a backup. Secret-shaped facts are not
    moved (the team file is committed); they stay in that backup. Idempotent: a second run finds nothing to move."""
    project = settings.project
    if project is None:
        raise ConfigError("--move-private needs a git work tree")
    private = project.private_path
    before = _file_bytes(private)
    graph = parse_graph_bytes(before or b"")
    if not graph.entities and not graph.relations:
        moved = sorted(private.parent.glob("memory.jsonl.moved-*"))
        return [f"no private memory to move ({private})" + (f"; moved earlier: {moved[-1]}" if moved else "")]
    team = Memory(dataclasses.replace(settings, file_path=project.team_path, tier="team", global_path=None), "init")
    counts = {"entities": 0, "facts": 0, "relations": 0, "withheld": 0}
    notes: list[str] = []

    def change(tx: Transaction) -> str:
        for entity in graph.entities:
            if looks_like_secret(entity.name) or looks_like_secret(entity.entityType):
                counts["withheld"] += len(entity.observations) + 1
                continue
            facts = [o for o in entity.observations if not looks_like_secret(o)]
            counts["withheld"] += len(entity.observations) - len(facts)
            target = tx.graph.get(entity.name)
            if target is None:
                tx.touch(entity.name)
                tx.graph.entities.append(Entity(entity.name, entity.entityType, facts, dict(entity.extra)))
                tx.graph.invalidate()
                counts["entities"] += 1
                counts["facts"] += len(facts)
                continue
            new = [o for o in dict.fromkeys(facts) if o not in target.observations]
            if target.entityType != entity.entityType:
                notes.append(f"{entity.name}: kept the team's type {target.entityType!r} "
                             f"(private: {entity.entityType!r})")
            if new:
                tx.touch(entity.name)
                target.observations.extend(new)
                counts["facts"] += len(new)
        existing = {r.key for r in tx.graph.relations}
        for relation in graph.relations:
            if relation.key not in existing and tx.graph.get(relation.frm) and tx.graph.get(relation.to) \
                    and not looks_like_secret(relation.relationType):
                tx.touch_relations()
                tx.graph.relations.append(Relation(*relation.key))
                existing.add(relation.key)
                counts["relations"] += 1
        return "moved"
    team.change("move the private memory into the team tier", change, use=False)
    done = [f"moved into {TEAM_DIR}/memory.jsonl: {counts['entities']} new entities, {counts['facts']} facts, "
            f"{counts['relations']} relations (what the team file had already was kept as it was)"]
    done += notes
    backup = private.with_name(f"memory.jsonl.moved-{utc_stamp(fmt='%Y%m%dT%H%M%SZ')}")
    with GraphStore(dataclasses.replace(settings, file_path=private)).lock():  # no private write in between
        unchanged = _file_bytes(private) == before
        if unchanged:
            os.replace(private, backup)
    if not unchanged:
        return done + [f"{private} changed while moving (a server still writes there); run --init --move-private "
                       "again to move the rest (nothing moves twice)"]
    done.append(f"the private file is kept as a backup: {backup}")
    if counts["withheld"]:
        done.append(f"{counts['withheld']} secret-shaped item(s) were not moved (the team file is committed); "
                    "they are only in that backup")
    archive = side_file_names(private)[1]
    if archive.is_dir() and any(archive.glob("*.md")):
        done.append(f"archived private facts stay in {archive} (not moved; restore any into the team by hand)")
    return done


# ════════════════════════════════════════════════════════════════════════════
# 13b. Sessions: the start-of-session briefing (--context), Markdown out and in (--export, --import)
# ════════════════════════════════════════════════════════════════════════════

CONTEXT_BUDGET = 1500       # tokens: about what a CLAUDE.md section costs; --budget changes it
CONTEXT_FIRST_DAYS = 7      # with no earlier briefing, "what changed" looks back this far
RULE_TYPES = {"rule", "convention", "decision", "policy"}
CONTEXT_REMINDER = ("Memory tools: recall before a task; add_observations for what you learn "
                    "(dated when it can change); open_nodes by name.")
CONTEXT_REMINDER_SHORT = "Use recall before a task."  # when even the reminder would not fit


def briefing(memory: Memory, budget: int, query: str | None) -> str:
    """The session-start briefing, never over `budget` tokens: pinned facts and rules (the project's, then the
    global tier's), what changed since the last briefing, the most used facts, a recall for `query`; then a
    one-line reminder of the tools."""
    graph = memory.store.read()
    memory.meta.reconcile(graph, memory.store.generation, memory.client)
    previous = memory.meta.last_briefing(record=False)
    since = previous or time.time() - CONTEXT_FIRST_DAYS * 86400
    changed = briefing_changes(memory, since)
    if previous is not None:  # after the first briefing: facts other tools or people wrote count too
        listed = {line[:at] for line in changed for at in _positions(line, " (")}  # "+ name: text" before " ("
        changed += [f"+ {name}: {text} (first seen {utc_stamp(ts)[:10]})"
                    for ts, name, text in first_seen(memory.meta, since) if f"+ {name}: {text}" not in listed]
    sections = [("Pinned facts and rules", pinned_and_rules(memory, graph)),
                (f"Changed since {utc_stamp(since)}", changed),
                ("Most used", most_used(memory))]
    other = memory.global_memory(create=False)  # in a project: your own rules hold in every project
    if other is not None:
        sections.insert(1, ("Your global pinned facts and rules", pinned_and_rules(other, other.fresh_graph())))
    if query:
        sections.insert(0, (f"Recall for {_q(query, 60)}", recall_lines(memory, query, budget // 2)))
    head = (f"graphmem memory for this project: {len(graph.entities)} entities, {graph.fact_count()} facts."
            if memory.settings.project is not None or memory.settings.tier == "file" else
            f"graphmem global memory (not in a git project): {len(graph.entities)} entities, "
            f"{graph.fact_count()} facts.")
    memory.meta.last_briefing(record=True)
    return fit_to_budget(head, sections, CONTEXT_REMINDER, budget)


def global_briefing(settings: Settings, budget: int, query: str | None) -> str:
    """The briefing of a project that has no memory of its own yet: the global tier's pinned facts and rules (and
    a recall there for `query`). Nothing is written for the project (no private folder appears)."""
    other = Memory(dataclasses.replace(settings, file_path=settings.global_path, global_path=None, tier="global"),
                   "context")
    graph = other.fresh_graph()
    sections = [("Your global pinned facts and rules", pinned_and_rules(other, graph))]
    if query:
        sections.insert(0, (f"Recall for {_q(query, 60)} (global memory)", recall_lines(other, query, budget // 2)))
    head = (f"graphmem: no memory for this project yet; your global memory: {len(graph.entities)} entities, "
            f"{graph.fact_count()} facts.")
    return fit_to_budget(head, sections, CONTEXT_REMINDER, budget)


def _positions(text: str, part: str) -> Iterator[int]:
    """Where `part` starts in `text`, every occurrence."""
    at = text.find(part)
    while at >= 0:
        yield at
        at = text.find(part, at + 1)


def first_seen(meta: MetaStore, since: float) -> list[tuple[float, str, str]]:
    """Facts first seen after `since`, newest first (written by another tool or by hand: their first sighting)."""
    return sorted(((s.created, entity, text) for (entity, text), s in meta.states.items() if s.created > since),
                  reverse=True)


def fit_to_budget(head: str, sections: list[tuple[str, list[str]]], tail: str, budget: int) -> str:
    """Head, then each section's lines in order while they fit, then what was left out and the tail.
    The whole text is never over `budget` tokens (estimate_tokens)."""
    def size(lines: list[str]) -> int:
        return estimate_tokens("\n".join(lines))
    reserve = estimate_tokens(tail) + 12  # the tail and a "(N more left out ...)" line
    out, left_out = ([head] if size([head]) + reserve <= budget else []), 0
    for title, lines in sections:
        shown = 0
        for line in lines:
            candidate = out + ([f"## {title}"] if not shown else []) + [line]
            if size(candidate) + reserve <= budget:
                out, shown = candidate, shown + 1
        left_out += len(lines) - shown
    ending = [f"({left_out} more left out: recall finds them)"] if left_out else []
    for extra in ending + [tail if size(out + [tail]) <= budget else CONTEXT_REMINDER_SHORT]:
        if size(out + [extra]) <= budget:
            out.append(extra)
    return "\n".join(out)


def pinned_and_rules(memory: Memory, graph: Graph) -> list[str]:
    """Facts of rule, convention and decision entities, then pinned facts, in graph order."""
    pinned = {key for key, state in memory.meta.states.items() if state.pinned}
    lines = []
    for e in graph.entities:
        rule = e.entityType.lower() in RULE_TYPES or e.name.upper().startswith("RULE ")
        if rule or pinned:
            key = db_text(e.name)
            lines += [f"- {e.name}: {o}" for o in e.observations if rule or (key, db_text(o)) in pinned]
    return lines


def briefing_changes(memory: Memory, since: float) -> list[str]:
    """Facts written, archived or removed since `since`, newest first (the briefing's short form)."""
    return change_lines(memory.meta.changes_since(since), stamp=False)


def change_lines(history: list[tuple[float, dict[str, Any]]], stamp: bool = True) -> list[str]:
    """One line per change in the history rows: + written, - deleted, ~ archived, > renamed."""
    lines: list[str] = []
    for ts, changes in history:
        when = utc_stamp(ts) if stamp else utc_stamp(ts)[:10]
        archived = {(name, f) for name, facts, _ in changes.get("archived", []) for f in facts}
        renamed = {old for old, _ in changes.get("renamed", [])} | {new for _, new in changes.get("renamed", [])}
        for old, new in changes.get("renamed", []):
            lines.append(f"> {old} renamed to {new} ({when})")
        for item in changes.get("entities", []):
            if item["name"] in renamed:
                continue
            before = (item.get("before") or {}).get("observations", [])
            after = (item.get("after") or {}).get("observations", [])
            lines += [f"+ {item['name']}: {o} ({when})" for o in after if o not in before]
            lines += [f"- {item['name']}: {o} (deleted {when})" for o in before
                      if o not in after and (item["name"], o) not in archived and item.get("after") is not None]
            if item.get("after") is None and item.get("before") is not None:
                lines.append(f"- {item['name']} deleted with {len(before)} fact(s) ({when})")
        for name, facts, why in changes.get("archived", []):
            lines += [f"~ {name}: {short(f, 100)} (archived: {short(why, 80)}, {when})" for f in facts]
    return lines


def most_used(memory: Memory, limit: int = 30) -> list[str]:
    """The facts agents were shown most often (memory.db's use counts)."""
    used = heapq.nlargest(limit, ((s.uses, key) for key, s in memory.meta.states.items() if s.uses > 0))
    return [f"- {entity}: {text}" for _, (entity, text) in used]


def recall_lines(memory: Memory, query: str, budget: int) -> list[str]:
    """The lines recall answers for `query` within `budget` tokens ([] when it fails): the briefing's last part."""
    text, is_error = memory.call_tool("recall", {"query": query, "budget": max(50, budget)})
    return [] if is_error else text.splitlines()





# ── Markdown out: one file per entity, readable in Obsidian ──
_UNSAFE_FILE = re.compile(r'[\\/:*?"<>|#^\[\]\x00-\x1f]')


def markdown_stem(name: str, taken: set[str]) -> str:
    """A file name for an entity: its name made safe for every file system and for [[wikilinks]]; unique."""
    stem = _UNSAFE_FILE.sub("-", name).strip(" .") or "entity"
    stem = stem[:120]
    if stem.lower() in taken or stem.split(".")[0].lower() in WINDOWS_RESERVED:
        stem = f"{stem}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    taken.add(stem.lower())
    return stem


def markdown_item(text: str) -> str:
    """A fact as a list item that reads back exactly: plain when Markdown keeps it, else a JSON string."""
    plain = text == text.strip() and "\r" not in text and not text.startswith('"') and text and "\n" not in text
    return f"- {text}" if plain else "- " + json.dumps(text, ensure_ascii=False)


def read_markdown_item(line: str) -> str:
    """The text of a "- " item of an exported note (a JSON string when the fact needed quoting)."""
    body = line[2:]
    if body.startswith('"'):
        with contextlib.suppress(ValueError):
            value = json.loads(body)
            if isinstance(value, str):
                return value
    return body


def export_markdown(memory: Memory, folder: Path) -> int:
    """--export markdown DIR: one .md file per entity (front matter, facts, [[wikilink]] relations, archive)."""
    graph = memory.store.read()
    folder.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    stems = {e.name: markdown_stem(e.name, taken) for e in graph.entities}
    outgoing: dict[str, list[tuple[int, Relation]]] = {}  # relations by their from end, in file order
    for i, r in enumerate(graph.relations):
        outgoing.setdefault(r.frm, []).append((i, r))
    for position, e in enumerate(graph.entities):
        lines = ["---", f"name: {json.dumps(e.name, ensure_ascii=False)}",
                 f"type: {json.dumps(e.entityType, ensure_ascii=False)}", f"position: {position}", "---",
                 f"# {short(e.name, 200)}", "",
                 "## Facts", *[markdown_item(o) for o in e.observations]]
        out = outgoing.get(e.name, [])
        if out:
            lines += ["", "## Relations"]
            for i, r in out:  # the comment keeps the graph's relation order for --import
                target = stems.get(r.to) or markdown_stem(r.to, set())
                link = f"[[{target}]]" if target == r.to else f"[[{target}|{r.to}]]"
                lines.append(f"- {r.relationType} {link} <!-- #{i}{'' if r.to in stems else ', missing entity'} -->")
        archived = memory.store.read_archive(e.name)
        if archived:
            lines += ["", "## Archived"]
            for fact in archived:
                lines.append(f"{markdown_item(fact.text)} <!-- {fact.why} · {fact.when} -->")
        data = "\n".join(lines) + "\n"
        (folder / f"{stems[e.name]}.md").write_text(data, encoding="utf-8", errors="surrogatepass")
    return len(graph.entities)


# ── Markdown and JSONL in ──
_WIKILINK = re.compile(r"^- (.+?) \[\[([^\]|]+)(?:\|([^\]]+))?\]\](?: <!-- #(\d+))?")


def parse_exported_entity(text: str) -> tuple[int, str, str, list[str], list[tuple[int, str, str, str]]] | None:
    """(position, name, type, facts, [(relation order, type, target name, target file stem)]) of a file
    --export wrote; None for any other file."""
    lines = text.split("\n")
    if not lines or lines[0] != "---" or "---" not in lines[1:]:
        return None
    end = lines.index("---", 1)
    front = dict(line.split(": ", 1) for line in lines[1:end] if ": " in line)
    try:
        name, etype = json.loads(front["name"]), json.loads(front.get("type", '"unknown"'))
        position = int(front.get("position", "0"))
    except (KeyError, ValueError):
        return None
    facts, relations, section = [], [], None
    for line in lines[end + 1:]:
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("- ") and section == "Facts":
            facts.append(read_markdown_item(line))
        elif line.startswith("- ") and section == "Relations":
            m = _WIKILINK.match(line)
            if m:
                relations.append((int(m.group(4) or 1e9), m.group(1), m.group(3) or m.group(2), m.group(2)))
    return position, name, etype, facts, relations


def export_left_out(folder: Path, read: int) -> str:
    """What an import of an --export folder leaves out, said in its answer: the archived facts (the import reads
    the active facts only) and .md files --export did not write."""
    files = sorted(folder.glob("*.md"))
    archived = 0
    for p in files:
        section = None
        for line in p.read_text(encoding="utf-8", errors="surrogateescape").split("\n"):
            section = line[3:].strip() if line.startswith("## ") else section
            archived += section == "Archived" and line.startswith("- ")
    parts = [f"{archived} archived fact(s) left out (active facts only; they stay in the notes)"] if archived else []
    parts += [f"{len(files) - read} other .md file(s) skipped (not written by --export)"] if len(files) > read else []
    return f" ({'; '.join(parts)})" if parts else ""


def notes_as_facts(path: Path, text: str) -> tuple[str, list[str]]:
    """A CLAUDE.md / AGENTS.md style file: its bullet points, as facts of an entity named by its first heading
    (else the project folder's name)."""
    heading = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("# ")), "")
    name = heading or path.resolve().parent.name or path.stem
    facts = [re.sub(r"^\s*(?:[-*+]|\d+\.)\s+(?:\[[ xX]\]\s+)?", "", line).strip()
             for line in text.splitlines() if re.match(r"^\s*(?:[-*+]|\d+\.)\s+\S", line)]
    return name, [f for f in facts if f]


def import_source(path: Path) -> tuple[list[tuple[str, str, list[str]]], list[tuple[str, str, str]], str]:
    """What to import from `path`: (entities as (name, type, facts), relations, what it was)."""
    if path.is_dir():
        parsed = [(p.stem, parse_exported_entity(p.read_text(encoding="utf-8", errors="surrogateescape")))
                  for p in sorted(path.glob("*.md"))]
        parsed = sorted(((stem, item) for stem, item in parsed if item), key=lambda p: p[1][0])
        by_stem = {stem: item[1] for stem, item in parsed}
        entities = [(name, etype, facts) for _, (_, name, etype, facts, _) in parsed]
        in_file_order = sorted((order, name, rtype, alias, stem) for _, (_, name, _, _, rels) in parsed
                               for order, rtype, alias, stem in rels)
        relations = [(name, by_stem.get(stem, alias), rtype) for _, name, rtype, alias, stem in in_file_order]
        return entities, relations, f"{len(parsed)} exported entity file(s)" + export_left_out(path, len(parsed))
    data = path.read_bytes()
    if path.suffix in (".json", ".jsonl"):
        graph = parse_graph_bytes(data)
        return ([(e.name, e.entityType, e.observations) for e in graph.entities],
                [r.key for r in graph.relations], "a reference-format graph")
    exported = parse_exported_entity(data.decode("utf-8", errors="surrogateescape"))
    if exported is not None:  # one note of an --export folder: that entity, not its lines as notes
        _, name, etype, facts, rels = exported
        return [(name, etype, facts)], [(name, alias, rtype) for _, rtype, alias, _ in sorted(rels)], \
            f"the exported entity file {path.name}"
    name, facts = notes_as_facts(path, data.decode("utf-8", errors="replace"))
    return [(name, "project", list(dict.fromkeys(facts)))], [], f"the notes in {path.name}"


def import_into(memory: Memory, path: Path) -> str:
    """--import PATH: one transaction; new entities keep their facts as written (secrets and over-long facts
    refused), existing ones get new facts through the usual checks. Says what was added, skipped, refused."""
    entities, relations, what = import_source(path)
    counts = {"entities": 0, "facts": 0, "relations": 0, "skipped": 0, "refused": 0, "dangling": 0}

    def change(tx: Transaction) -> str:
        details = []
        for name, etype, facts in entities:
            problem = name_problem("name", name) or name_problem("entityType", etype)
            if problem:
                counts["refused"] += len(facts) + 1
                details.append(f"refused entity {_q(name)}: {problem}")
                continue
            entity = tx.graph.get(name)
            before_added, before_refused = tx.added, tx.refused
            if entity is None:
                tx.touch(name)
                entity = Entity(name, etype, [])
                tx.graph.entities.append(entity)
                tx.graph.invalidate()
                counts["entities"] += 1
                details += import_new_facts(tx, entity, facts, memory.settings)
            else:
                detail = memory.add_facts(tx, entity, facts)
                if ";" in detail:
                    details.append(detail)
            counts["facts"] += tx.added - before_added
            counts["refused"] += tx.refused - before_refused
            counts["skipped"] += len(facts) - (tx.added - before_added) - (tx.refused - before_refused)
        existing = {r.key for r in tx.graph.relations}
        for key in relations:
            if tx.graph.get(key[0]) is None or tx.graph.get(key[1]) is None:
                counts["dangling"] += 1
                continue
            if key in existing:
                counts["skipped"] += 1
                continue
            tx.touch_relations()
            tx.graph.relations.append(Relation(*key))
            existing.add(key)
            counts["relations"] += 1
        head = (f"Imported {what}: {counts['entities']} new entities, {counts['facts']} facts, "
                f"{counts['relations']} relations; {counts['skipped']} already there or duplicates, "
                f"{counts['refused']} refused."
                + (f" {counts['dangling']} relation(s) to entities that do not exist left out." if counts["dangling"]
                   else ""))
        return "\n".join([head] + details[:50])
    return memory.change(f"import {path.name}", change)


def import_new_facts(tx: Transaction, entity: Entity, facts: list[str], settings: Settings) -> list[str]:
    """Facts of an entity the import creates, in their order: refused when unsafe; no duplicate, supersede or
    cap checks here (the source was curated, or is a list of notes), so an exported graph reads back exactly."""
    notes = []
    for text in facts:
        reason = check_new_fact(text, settings)
        if reason:
            tx.refused += 1
            what = "a fact" if "credential" in reason else _q(text, 60)
            notes.append(f"refused {what} of {_q(entity.name)}: {reason}")
        else:  # as written, repeats too: an exported graph reads back exactly
            entity.observations.append(text)
            tx.added += 1
    return notes


# ════════════════════════════════════════════════════════════════════════════
# 14. CLI: maintenance (--lint, --compact, --report), setup (--config, --protocol, --skill), --ui
# ════════════════════════════════════════════════════════════════════════════

def lint_report(memory: Memory, secrets: list[str] | None = None) -> str:
    """Read-only health report of the graph (secrets: secret_findings of it, when the caller has them)."""
    graph = memory.fresh_graph()
    s = memory.settings
    names = set(graph.by_name())
    long_facts = [(e.name, o) for e in graph.entities for o in e.observations if len(o) > s.obs_max_chars]
    over_cap = [e for e in graph.entities if len(e.observations) > s.obs_max]
    dangling = [r for r in graph.relations if r.frm not in names or r.to not in names]
    duplicates = []
    for e in graph.entities:
        seen: dict[str, str] = {}
        for o in e.observations:
            key = normalise_fact(o)
            if key in seen:
                duplicates.append((e.name, o))
            seen[key] = o
    fading = memory.lifecycle.fading_facts(graph)
    movable = sum(len(overflow_to_archive(e, s.obs_max, set(), memory.lifecycle.pinned(e.name))) for e in over_cap)
    lines = [f"{memory.store.path}: {len(graph.entities)} entities, {len(graph.relations)} relations, "
             f"{graph.fact_count()} facts, {_file_size(memory.store.path)} bytes."]
    lines.append(f"over-long facts (> {s.obs_max_chars} chars): {len(long_facts)}")
    lines += [f"  {name}: {len(o)} chars: {short(o, 70)}" for name, o in long_facts[:20]]
    lines.append(f"entities over the cap of {s.obs_max}: {len(over_cap)} "
                 f"({movable} dated facts would move to the archive)")
    lines += [f"  {e.name}: {len(e.observations)} facts" for e in over_cap[:20]]
    lines.append(f"unreadable lines: {len(graph.unreadable)} in the graph"
                 + (f" (lines {', '.join(str(n) for n, _ in graph.unreadable[:10])})" if graph.unreadable else "")
                 + f"; {memory.store.unreadable_set_aside()} set aside in {memory.store.unreadable_path.name}")
    lines.append(f"relations to missing entities: {len(dangling)}")
    lines += [f"  {r.line()}" for r in dangling[:20]]
    lines.append(f"duplicate facts: {len(duplicates)}")
    lines += [f"  {name}: {short(o, 70)}" for name, o in duplicates[:20]]
    lines.append(f"fading facts (retention < {FADING_RETENTION}): {len(fading)}")
    lines += [f"  {r:.2f} {name}: {short(o, 70)}" for r, name, o in fading[:20]]
    lines += memory.anchors.lint(graph)
    markers = sum(1 for _, raw in graph.unreadable if CONFLICT_MARKER.match(raw))
    if markers:
        lines.append(f"git conflict markers: {markers} (merged without the driver): --lint --fix heals the file "
                     "keeping both sides; graphmem --init registers the driver")
    lines += team_driver_lint(memory.settings)
    secrets_found = secret_findings(graph) if secrets is None else secrets
    lines.append(f"secret-shaped text: {len(secrets_found)}" + (" (exit code 1: remove it before committing)"
                                                                if secrets_found else ""))
    lines += [f"  {where}" for where in secrets_found[:20]]
    lines.append(word_table_status())
    lines.append(embeddings_status(memory))
    lines.append("Read-only: the graph was not changed. --compact archives overflow and faded facts (guarded).")
    return "\n".join(lines)


def team_driver_lint(settings: Settings) -> list[str]:
    """A team tier in a clone where the merge driver is not registered (a teammate who never ran --init): git then
    merges memory.jsonl line by line, with conflict markers. One git process, in --lint only."""
    project = settings.project
    if settings.tier != "team" or project is None:
        return []
    lines = []
    if git(project.root, "ls-files", "-u", "--", f"{TEAM_DIR}/memory.jsonl"):
        lines.append(f"git left {TEAM_DIR}/memory.jsonl unmerged (its merge driver is missing or failed): "
                     "--lint --fix merges git's three sides, keeping both sides' facts")
    driver = git(project.root, "config", "merge.graphmem.driver")
    if not driver:
        lines.append("merge driver: not registered in this clone, so git merges memory.jsonl line by line (with "
                     "conflict markers): run graphmem --init once here")
    elif not all(Path(part).exists() for part in shlex.split(driver)[:2] if os.path.isabs(part)):
        lines.append(f"merge driver: its command is gone ({driver}), so a merge leaves theirs out of the file: "
                     "run graphmem --init again here")
    return lines


def secret_findings(graph: Graph) -> list[str]:
    """Where the graph holds something secret-shaped (names, types, facts, relation types); never the value."""
    found = []
    for e in graph.entities:
        for label, text in [("name", e.name), ("type", e.entityType)] + [("fact", o) for o in e.observations]:
            kind = looks_like_secret(text)
            if kind:
                found.append(f"{short(e.name, 40) if label != 'name' else 'an entity'}: {label} looks like a "
                             f"credential ({kind})")
    found += [f"relation {short(r.frm, 30)} -> {short(r.to, 30)}: type looks like a credential "
              f"({looks_like_secret(r.relationType)})" for r in graph.relations if looks_like_secret(r.relationType)]
    for number, raw in graph.unreadable:  # still in the file (and in a commit) until the next write moves them
        kind = looks_like_secret(raw.decode("utf-8", errors="replace"))
        if kind:
            found.append(f"unreadable line {number}: looks like a credential ({kind})")
    found += [f"a line of unknown type: looks like a credential ({looks_like_secret(line)})"
              for line in graph.other_lines if looks_like_secret(line)]
    return found


class PlanOutdated(Exception):
    """The graph changed between planning a compaction and taking the lock to apply it: plan again."""


PLAN_LINES_SHOWN = 200  # facts listed by --compact before "and N more" (--all lists every one); a screenful or few


def compact(memory: Memory, dry_run: bool, show_all: bool = False) -> tuple[str, int]:
    """Archive overflow and faded facts, unless the recall guardrail says a probe would be lost.
    With no probes at all there is nothing to guard recall with: faded facts are then kept (only the cap,
    which every write applies anyway, archives anything).

    The plan and the guardrail's probes run without the writer lock (they take seconds on a big graph);
    the lock is taken only to apply a plan made on the file as it still is, else it plans again.
    --dry-run never takes the lock."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        graph = memory.fresh_graph()
        planned_on = memory.store.cached_key()
        plan, kept = unguarded_fades_kept(memory, compact_plan(memory, graph))
        plan, guard, verdict_ok = guard_plan(memory, graph, plan)
        lines = describe_plan(memory, graph, plan, show_all) + kept + guard
        moved = sum(len(v) for v in plan.values())
        blind = memory.meta.problem or memory.meta.unavailable
        if blind:  # pins, fact ages and probes live there: without them the plan is a guess
            lines.append(f"memory.db could not be read ({blind}): pins, fact ages and probes are unknown, so this "
                         "plan may be wrong" + ("." if dry_run else "; nothing changed. Run it again later."))
        if dry_run:
            return "\n".join(lines + ["dry run: nothing changed."]), 0
        if blind:
            return "\n".join(lines), 1
        if not verdict_ok:
            lines.append("rolled back: nothing changed. Pin the facts those probes need, "
                         "or raise MEMORY_GUARDRAIL_MAX_DROP.")
            return "\n".join(lines), 1
        if not moved:
            return "\n".join(lines + ["nothing to do."]), 0
        backup = memory.store.backup_now("before-compact")
        try:
            memory.change(f"compact: archived {moved} fact(s)", lambda tx: apply_compact_plan(tx, plan, planned_on),
                          use=False)
        except PlanOutdated:
            log(f"the graph changed while compact planned; planning again ({attempt}/{WRITE_ATTEMPTS})")
            continue
        memory.store.prune_backups()  # the before-compact copies too, once the lock is released
        lines.append(f"archived {moved} fact(s); backup {backup}; restore any with archived_observations.")
        return "\n".join(lines), 0
    return f"the graph kept changing while compact planned ({WRITE_ATTEMPTS} tries); nothing changed, run it again.", 1


def compact_plan(memory: Memory, graph: Graph) -> dict[str, list[tuple[str, str]]]:
    """{entity: [(fact, why)]}: dated facts over the cap, and unpinned facts that can fade (can_fade: dated,
    not of a rule, convention or decision) faded past FADED_RETENTION on the activity clock."""
    s, clock = memory.settings, memory.meta.clock()
    plan: dict[str, list[tuple[str, str]]] = {}
    for e in graph.entities:
        over = overflow_to_archive(e, s.obs_max, set(), memory.lifecycle.pinned(e.name))
        faded = [o for o in e.observations if o not in over and can_fade(e.entityType, o)
                 and memory.meta.state(e.name, o).retention(clock) < FADED_RETENTION]
        moves = [(o, "compacted (over cap)") for o in over] + [(o, "compacted (faded)") for o in faded]
        if moves:
            plan[e.name] = moves
    return plan


def describe_plan(memory: Memory, graph: Graph, plan: dict[str, list[tuple[str, str]]], show_all: bool) -> list[str]:
    """Every fact the plan archives, with its reason; past PLAN_LINES_SHOWN, how many more and how to see them."""
    moved = sum(len(v) for v in plan.values())
    lines = [f"plan: archive {moved} fact(s) from {len(plan)} entit{'y' if len(plan) == 1 else 'ies'}"]
    clock = memory.meta.clock()
    for name, moves in plan.items():
        for text, why in moves:
            if not show_all and len(lines) > PLAN_LINES_SHOWN:
                return lines + [f"  … and {moved - PLAN_LINES_SHOWN} more: "
                                "graphmem --compact --dry-run --all lists every one"]
            reason = plan_reason(memory, graph, name, text, why, clock)
            lines.append(f"  {name}: {why.split('(')[1][:-1]}: {text}  ({reason})")
    return lines


def plan_reason(memory: Memory, graph: Graph, name: str, text: str, why: str, clock: ActivityClock) -> str:
    """Why a planned fact leaves the active graph, in numbers a person can check."""
    if why == "compacted (faded)":
        state = memory.meta.state(name, text)
        days = clock.active_hours_since(state.last_used) / 24.0
        return (f"dated, retention {state.retention(clock):.2f} < {FADED_RETENTION}: not used in {days:.0f} "
                f"day(s) of use, half-life {state.stability / 24.0:.0f}")
    entity = graph.get(name)
    count = len(entity.observations) if entity else "?"
    return f"oldest dated of {count} facts, over the cap of {memory.settings.obs_max}"


def apply_compact_plan(tx: Transaction, plan: dict[str, list[tuple[str, str]]],
                       planned_on: tuple[int, int, int] | None) -> str:
    """Under the lock: archive the planned facts, if the file is still the one the plan was made on."""
    if tx.read_key != planned_on:
        raise PlanOutdated()
    for name, moves in plan.items():
        tx.touch(name)
        entity = tx.graph.get(name)
        for text, why in moves:
            entity.observations.remove(text)
            tx.archive(name, [text], why)
    return "compacted"


def manage_probes(memory: Memory, args: argparse.Namespace) -> int:
    """--probe (checked against the graph), --probes (listed with ids), --remove-probe ID."""
    if args.probe and not args.expect:
        raise ConfigError("--probe needs --expect ENTITY (and optionally --fact TEXT)")
    try:
        if args.probe:
            print(memory.add_manual_probe(args.probe, args.expect, args.fact or ""))
        for probe_id in args.remove_probe or []:
            print(memory.remove_probe(probe_id))
        if args.probes:
            rows = memory.probe_listing()
            print(f"{len(rows)} probe(s); --remove-probe ID removes one" if rows else
                  "no probes yet: they are learned when an agent opens what recall found, or add one with --probe")
            for p in rows:
                fact = f": {p['fact']}" if p["fact"] else ""
                print(f"  {p['id']} [{p['source']}] {_q(p['query'])} -> {p['entity']}{fact}")
    except ToolError as err:
        print(f"graphmem: {err}", file=sys.stderr)
        return 1
    except sqlite3.Error as err:
        print(f"graphmem: {describe_db_error(memory.meta.path, err)}", file=sys.stderr)
        return 1
    return 0


def report(memory: Memory) -> str:
    """--report: the savings ledger in words, in all and per tool and client, at the configured price."""
    s = memory.settings
    r = receipts(memory)
    if not r["calls"]:
        return (f"No reads recorded yet in {memory.meta.path}: nothing saved so far. Savings appear after agents call "
                "read_graph, search_nodes, open_nodes or recall.")
    lines = [f"{r['calls']} read calls: {r['tokensUsed']:,} tokens returned; the reference server would have returned "
             f"{r['tokensReference']:,}. Saved {r['tokensSaved']:,} tokens = ${r['dollarsSaved']:.2f} at "
             f"${s.price_per_mtok:g}/M input tokens ({s.price_model}; set MEMORY_PRICE_PER_MTOK / MEMORY_PRICE_MODEL)."]
    for what in ("tool", "client"):
        lines.append(f"per {what}:")
        for name, calls, used, ref in memory.meta.ledger_by(what):
            saved = max(ref - used, 0)
            ratio = f"{ref / used:.1f}x" if used else "-"
            lines.append(f"  {name}: {calls} calls, {used:,} vs {ref:,} tokens ({ratio}), saved {saved:,} = "
                         f"${saved * s.price_per_mtok / 1e6:.2f}")
    return "\n".join(lines)


CLIENTS = ("claude-code", "claude-desktop", "codex", "cursor", "vscode", "gemini", "windsurf", "cline", "zed",
           "opencode", "copilot-cli")
CLIENT_WHERE = {
    "claude-code": "project .mcp.json (or: claude mcp add -s user graphmem{env} -- {cmd})",
    "claude-desktop": "claude_desktop_config.json (Settings > Developer > Edit Config), then restart",
    "codex": "~/.codex/config.toml (or: codex mcp add graphmem{env} -- {cmd})",
    "cursor": "~/.cursor/mcp.json or .cursor/mcp.json",
    "vscode": ".vscode/mcp.json (or the user mcp.json: 'MCP: Open User Configuration')",
    "gemini": "~/.gemini/settings.json (or: gemini mcp add -s user graphmem {cmd}{env})",
    "windsurf": "~/.codeium/windsurf/mcp_config.json",
    "cline": "cline_mcp_settings.json (MCP Servers > Configure)",
    "zed": "~/.config/zed/settings.json",
    "opencode": "opencode.json (project) or ~/.config/opencode/opencode.json",
    "copilot-cli": "~/.copilot/mcp-config.json",
}


# Every MEMORY_* setting: (variable, Settings field, meaning). --help and --config read it; the defaults come
# from Settings itself, and tests/test_cli.py checks that Settings.from_env reads exactly these variables.
SETTINGS_TABLE = (
    ("MEMORY_FILE_PATH", "file_path", "the graph file (relative paths: to the working directory)"),
    ("MEMORY_OBS_MAX_CHARS", "obs_max_chars", "longest new fact"),
    ("MEMORY_OBS_MAX", "obs_max", "facts per entity before the oldest dated ones are archived"),
    ("MEMORY_SEARCH_LIMIT", "search_limit", "entities listed by search_nodes"),
    ("MEMORY_BACKUPS_KEPT", "backups_kept", "backups kept of each kind (daily, before-compact)"),
    ("MEMORY_RECALL_BUDGET", "recall_budget", "default token budget of recall"),
    ("MEMORY_GUARDRAIL_MAX_DROP", "guardrail_max_drop", "largest probe hit-rate drop --compact accepts"),
    ("MEMORY_PRICE_PER_MTOK", "price_per_mtok", "dollars per million input tokens, for --report"),
    ("MEMORY_PRICE_MODEL", "price_model", "the model that price is for"),
    ("MEMORY_PROJECT_ROOT", "project_root",
     "the project (its git work tree) whose memory is used; where code anchors resolve"),
    ("MEMORY_EMBEDDINGS_URL", "embeddings_url", "an OpenAI-compatible embeddings API base: recall by meaning too"),
    ("MEMORY_EMBEDDINGS_MODEL", "embeddings_model", "the embedding model that endpoint serves"),
    ("MEMORY_EMBEDDINGS_KEY_ENV", "embeddings_key_from",
     "the name of the variable holding the endpoint's key (never the key)"),
)
PATH_FIELDS = {"file_path", "project_root"}


def setting_default(field: str) -> str:
    """The default Settings gives a field, in words where it is worked out at start-up."""
    if field == "file_path":
        return (f"the project's memory in a git work tree (graphmem --projects), else "
                f"{default_memory_path(dict(os.environ))} (per-user data dir)")
    default = {f.name: f.default for f in dataclasses.fields(Settings)}[field]
    return "the working directory" if default is None else str(default) if default != "" else "unset"


def settings_help() -> str:
    """The settings part of --help: every MEMORY_* variable, what it sets, its default."""
    lines = ["settings (environment variables; --config copies the ones set here into the client's config):"]
    for name, field, meaning in SETTINGS_TABLE:
        lines.append(f"  {name:<26} {meaning}; default {setting_default(field)}")
    lines.append(f"  with --http: {HTTP_TOKEN_ENV} is the bearer token clients must send (at least 16 characters); "
                 "default: a new one, printed once")
    return "\n".join(lines + ["", EMBEDDINGS_HELP])


# Where `pipx run` (and uvx) keep their throwaway venvs: a pipx venv outside pipx's venvs/ folder, or a folder under
# a cache. pipx: ~/.cache/pipx/<hash> (1.3+; ~/Library/Caches/pipx on macOS, ...\pipx\Cache on Windows),
# ~/.local/pipx/.cache/<hash> (older, and Debian's 1.1), $PIPX_HOME/.cache/<hash>; deleted 14 days after last use.
CACHE_FOLDER_NAMES = {".cache", "cache", "caches"}
RUNNER_FOLDER_NAMES = {"pipx", "uv"}
GRAPHMEM_SCRIPT = "graphmem.exe" if os.name == "nt" else "graphmem"


def server_command() -> list[str]:
    """What a client should start: the installed `graphmem` when it runs this very file, else this Python and
    this file. Absolute paths, so GUI apps with a short PATH find them."""
    this_file = Path(__file__).resolve()
    installed = installed_command(this_file)
    return [installed] if installed else [sys.executable, str(this_file)]


def installed_command(this_file: Path) -> str | None:
    """The absolute path of a `graphmem` script of this Python's environment (PATH's first, e.g. pipx's
    ~/.local/bin link, else the environment's own), if this file is the module that environment imports."""
    libraries, scripts = environment_dirs()
    if this_file.parent not in libraries:
        return None  # a checkout or a copy: a `graphmem` on PATH would run some other file
    for found in (shutil.which("graphmem"), *(folder / GRAPHMEM_SCRIPT for folder in sorted(scripts))):
        if found and Path(found).is_file() and Path(found).resolve().parent in scripts:
            return os.path.abspath(found)
    return None


def environment_dirs() -> tuple[set[Path], set[Path]]:
    """(module folders, script folders) of this Python: its own install scheme and the per-user one (pip --user)."""
    import sysconfig
    schemes = {sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user")}
    libraries = {Path(sysconfig.get_path(kind, scheme)).resolve()
                 for scheme in schemes for kind in ("purelib", "platlib")}
    return libraries, {Path(sysconfig.get_path("scripts", scheme)).resolve() for scheme in schemes}


def temporary_environment(prefix: Path) -> bool:
    """True inside a throwaway venv (pipx run's, uvx's): paths into it stop working when the cache is pruned."""
    folders = {part.lower() for part in prefix.parts}
    pipx_run = (prefix / "pipx_metadata.json").is_file() and prefix.parent.name != "venvs"
    return pipx_run or bool(folders & CACHE_FOLDER_NAMES and folders & RUNNER_FOLDER_NAMES)


def settings_in_env(env: dict[str, str]) -> dict[str, str]:
    """The MEMORY_* settings set in env, for a client's env block; paths made absolute (a client's working
    directory is not this one)."""
    found = {}
    for name, field, _ in SETTINGS_TABLE:
        value = env.get(name, "").strip()
        if value:
            found[name] = os.path.abspath(os.path.expanduser(value)) if field in PATH_FIELDS else value
    return found


# Session hooks: where each client documents a session-start hook whose output reaches the model.
# Claude Code: settings.json "hooks", SessionStart (matchers startup/resume/clear/compact), plain stdout is
# added to the context. Codex: hooks.json, the same event shape (SessionStart: startup/resume/clear); Gemini
# CLI: settings.json "hooks", SessionStart, stdout must be one JSON object. Both get
# hookSpecificOutput.additionalContext (--context --hook-json). The other clients document no such hook.
HOOK_WHERE = {
    "claude-code": ".claude/settings.json in the project (or ~/.claude/settings.json), merged into its \"hooks\"",
    "codex": "~/.codex/hooks.json (or .codex/hooks.json in the repo); Codex asks you to trust it once",
    "gemini": ".gemini/settings.json in the project (or ~/.gemini/settings.json), merged into its \"hooks\"",
}
HOOK_MATCHERS = {"claude-code": "startup|resume|clear|compact", "codex": "startup|resume|clear"}


def hooks_config(client: str, command: list[str]) -> str:
    """The hook entries that run `--context` at session start (and after a compaction or /clear where the
    client has that event), in the client's own format."""
    settings = settings_in_env(dict(os.environ))  # the hook must read the same graph as the server
    if "MEMORY_EMBEDDINGS_URL" in settings:  # never a password or key into a config file
        settings["MEMORY_EMBEDDINGS_URL"] = url_without_credentials(settings["MEMORY_EMBEDDINGS_URL"])[0]
    prefix = "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in settings.items()) + " " if settings else ""
    run = prefix + shlex.join(command) + " --context" + ("" if client == "claude-code" else " --hook-json")
    group: dict[str, Any] = {"hooks": [{"type": "command", "command": run}]}
    if client in HOOK_MATCHERS:
        group = {"matcher": HOOK_MATCHERS[client], **group}
        group["hooks"][0]["timeout"] = 30  # seconds; the briefing takes well under one
    else:
        group["hooks"][0]["name"] = "graphmem-briefing"
    return json.dumps({"hooks": {"SessionStart": [group]}}, indent=2) + "\n"


def print_hooks(client: str) -> int:
    """--config CLIENT --hooks: the session hook config on stdout, where to paste it on stderr."""
    Settings.from_env()  # a bad value is refused here, not copied into the hook
    if client not in HOOK_WHERE:
        log(f"no session hook for {client}: graphmem knows no documented session-start hook of {client} whose "
            f"output reaches the model. Add the memory protocol to its instructions instead: graphmem --protocol "
            f">> AGENTS.md. Hooks are printed for: {', '.join(HOOK_WHERE)}.")
        return 1
    sys.stdout.write(hooks_config(client, server_command()))
    print(f"# paste into {HOOK_WHERE[client]}", file=sys.stderr)
    return 0


def print_config(client: str) -> int:
    """--config CLIENT: the config on stdout; where to paste it, and what to watch for, on stderr."""
    Settings.from_env()  # a bad value is refused here, not copied into the client's config
    command, env = server_command(), settings_in_env(dict(os.environ))
    dropped = []
    if "MEMORY_EMBEDDINGS_URL" in env:
        env["MEMORY_EMBEDDINGS_URL"], dropped = url_without_credentials(env["MEMORY_EMBEDDINGS_URL"])
    sys.stdout.write(client_config(client, command, env))
    # each CLI's own flag, after the name: claude's -e is variadic and would take the name for a variable
    flag = "--env" if client == "codex" else "-e"
    flags = "".join(f" {flag} {shlex.quote(f'{k}={v}')}" for k, v in env.items())
    print(f"# paste into {CLIENT_WHERE[client].format(cmd=shlex.join(command), env=flags)}", file=sys.stderr)
    if env:
        print(f"# with the settings set here: {', '.join(env)}", file=sys.stderr)
    if dropped:
        print(f"# MEMORY_EMBEDDINGS_URL is copied without its {' and '.join(dropped)} (a secret in a config file): "
              "give the endpoint's key through MEMORY_EMBEDDINGS_KEY_ENV, or add it back by hand", file=sys.stderr)
    if os.environ.get("MEMORY_EMBEDDINGS_KEY", "").strip():
        print("# MEMORY_EMBEDDINGS_KEY is not copied (a secret in a config file): set MEMORY_EMBEDDINGS_KEY_ENV to "
              "the name of a variable that holds it in the client's environment", file=sys.stderr)
    if temporary_environment(Path(sys.prefix)):
        log(f"warning: this runs from a temporary cache ({sys.prefix}) that pipx run or uvx deletes after a "
            f"while, and the config above would stop working then. Install for good, then ask again: "
            f"`pipx install graphmem` (from a checkout: `pipx install .`), then `graphmem --config {client}`.")
    return 0


SECRET_QUERY_WORDS = ("key", "token", "secret", "password", "passwd", "sig", "auth")  # query names that hold one


def url_without_credentials(url: str) -> tuple[str, list[str]]:
    """url without user:password@ and without query parameters whose name says key, token, secret, ... (others,
    such as Azure's api-version, stay), and what was left out."""
    parts = urllib.parse.urlsplit(url)
    dropped, netloc = [], parts.netloc
    if "@" in netloc:
        netloc, dropped = netloc.rpartition("@")[2], ["user:password@"]
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    secret = {k for k, _ in pairs if any(word in k.lower() for word in SECRET_QUERY_WORDS)}
    if secret:
        dropped.append("parameter " + ", ".join(sorted(secret)))
    query = urllib.parse.urlencode([(k, v) for k, v in pairs if k not in secret]) if secret else parts.query
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query)), dropped


# Remote (Streamable HTTP) configs: how each client names the URL and whether it expands an environment variable
# in a header, so the token is not pasted in clear. From each client's MCP docs (late 2026): Claude Code .mcp.json
# `type: http` + headers with ${VAR}; VS Code `type: http` + ${input:...} (asked once, kept in its secret
# storage); Cursor `url` + headers with ${env:VAR}; Windsurf `serverUrl` + ${env:VAR}; Gemini CLI `httpUrl`,
# settings values expand $VAR; Codex `url` + bearer_token_env_var; opencode `type: remote` + {env:VAR}.
# Claude Desktop's config file starts only local servers: the mcp-remote bridge carries the header. Zed, Cline and
# Copilot CLI document headers but no variable expansion: the token has to be pasted in (a placeholder is printed).
REMOTE_TOKEN_PLACEHOLDER = "<paste the token>"
REMOTE_WHERE_EXTRA = {
    "claude-code": "project .mcp.json (or: claude mcp add --transport http graphmem {url} "
                   "--header \"Authorization: Bearer $" + "MEMORY_HTTP_TOKEN\", which stores the token itself)",
    "codex": "~/.codex/config.toml (Codex reads the token from the variable bearer_token_env_var names)",
    "gemini": "~/.gemini/settings.json (or .gemini/settings.json in the project)",
}


def remote_shapes(url: str) -> dict[str, Any]:
    """Each client's remote config for a graphmem --http server at url (the header reads MEMORY_HTTP_TOKEN
    where the client can expand variables)."""
    bearer = "Bearer " + REMOTE_TOKEN_PLACEHOLDER
    parts = urllib.parse.urlsplit(url)  # mcp-remote refuses plain http beyond localhost unless told --allow-http
    insecure = ["--allow-http"] if parts.scheme == "http" and parts.hostname not in LOOPBACK_NAMES else []
    def header(value: str) -> dict[str, str]:
        return {"Authorization": value}
    return {
        "claude-code": {"mcpServers": {"graphmem": {"type": "http", "url": url,
                                                    "headers": header("Bearer ${MEMORY_HTTP_TOKEN}")}}},
        "claude-desktop": {"mcpServers": {"graphmem": {
            "command": "npx",
            "args": ["-y", "mcp-remote", url, *insecure, "--header", "Authorization:${GRAPHMEM_AUTH}"],
            "env": {"GRAPHMEM_AUTH": bearer}}}},
        "cursor": {"mcpServers": {"graphmem": {"url": url, "headers": header("Bearer ${env:MEMORY_HTTP_TOKEN}")}}},
        "vscode": {"servers": {"graphmem": {"type": "http", "url": url,
                                            "headers": header("Bearer ${input:graphmem-token}")}},
                   "inputs": [{"type": "promptString", "id": "graphmem-token", "description": "graphmem token",
                               "password": True}]},
        "gemini": {"mcpServers": {"graphmem": {"httpUrl": url, "headers": header("Bearer $MEMORY_HTTP_TOKEN")}}},
        "windsurf": {"mcpServers": {"graphmem": {"serverUrl": url,
                                                 "headers": header("Bearer ${env:MEMORY_HTTP_TOKEN}")}}},
        "cline": {"mcpServers": {"graphmem": {"type": "streamableHttp", "url": url, "headers": header(bearer),
                                              "disabled": False, "autoApprove": []}}},
        "zed": {"context_servers": {"graphmem": {"url": url, "headers": header(bearer)}}},
        "opencode": {"$schema": "https://opencode.ai/config.json",
                     "mcp": {"graphmem": {"type": "remote", "url": url, "enabled": True,
                                          "headers": header("Bearer {env:MEMORY_HTTP_TOKEN}")}}},
        "copilot-cli": {"mcpServers": {"graphmem": {"type": "http", "url": url, "headers": header(bearer),
                                                    "tools": ["*"]}}},
    }


def remote_client_config(client: str, url: str) -> str:
    """The client's own config text for a graphmem --http server at url."""
    if client == "codex":
        return (f"[mcp_servers.graphmem]\nurl = {toml_string(url)}\n"
                f"bearer_token_env_var = {toml_string(HTTP_TOKEN_ENV)}\n")
    return json.dumps(remote_shapes(url)[client], indent=2) + "\n"


def _url_port_ok(parts: Any) -> bool:
    """A URL's port is absent or 1-65535 (0 serves "any free port"; a client needs the one the server printed)."""
    try:
        return parts.port is None or parts.port > 0
    except ValueError:
        return False


def print_remote_config(client: str, url: str) -> int:
    """--config CLIENT --http URL: the remote config on stdout; where it goes and where the token comes from on
    stderr."""
    from urllib.parse import urlsplit
    given = url
    if url.lstrip(":").isdigit():  # a port alone, as `graphmem --http 8000` serves it: that server on this machine
        url = f"127.0.0.1:{url.lstrip(':')}"
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname or not _url_port_ok(parts):
        raise ConfigError(f"--http {given!r}: give the server's URL with the port it printed, e.g. "
                          "http://127.0.0.1:8000/mcp")
    path = HTTP_ENDPOINT if parts.path in ("", "/", HTTP_ENDPOINT + "/") else parts.path  # the server answers /mcp
    url = parts._replace(path=path).geturl()
    text = remote_client_config(client, url)
    sys.stdout.write(text)
    where = REMOTE_WHERE_EXTRA.get(client, CLIENT_WHERE[client]).format(url=url, cmd="...", env="")
    print(f"# paste into {where}", file=sys.stderr)
    if REMOTE_TOKEN_PLACEHOLDER in text:
        print(f"# {client} does not expand environment variables there: replace {REMOTE_TOKEN_PLACEHOLDER} with the "
              f"server's token, and keep that file private", file=sys.stderr)
    elif client == "vscode":
        print("# VS Code asks for the token once and keeps it in its secret storage", file=sys.stderr)
    else:
        print(f"# set {HTTP_TOKEN_ENV} to the server's token in the environment {client} starts in", file=sys.stderr)
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_NAMES:
        log("warning: plain http to another machine sends the token in clear: serve with --tls-cert/--tls-key, "
            "or reach it through an SSH tunnel or a TLS reverse proxy")
    return 0


def client_config(client: str, command: list[str], env: dict[str, str] | None = None) -> str:
    """The client's own config text that starts command, with env (MEMORY_* settings) in its env block."""
    env = env or {}
    if client == "codex":
        return codex_config(command, env)
    cmd, args = command[0], command[1:]
    with_env = {"command": cmd, "args": args, **({"env": env} if env else {})}
    shapes = {
        "claude-code": {"mcpServers": {"graphmem": {"type": "stdio", "command": cmd, "args": args, "env": env}}},
        "claude-desktop": {"mcpServers": {"graphmem": with_env}},
        "cursor": {"mcpServers": {"graphmem": with_env}},
        "vscode": {"servers": {"graphmem": {"type": "stdio", **with_env}}},
        "gemini": {"mcpServers": {"graphmem": with_env}},
        "windsurf": {"mcpServers": {"graphmem": with_env}},
        "cline": {"mcpServers": {"graphmem": {**with_env, "disabled": False, "autoApprove": []}}},
        "zed": {"context_servers": {"graphmem": {"command": cmd, "args": args, "env": env}}},
        "opencode": {"$schema": "https://opencode.ai/config.json",
                     "mcp": {"graphmem": {"type": "local", "command": command, "enabled": True,
                                          **({"environment": env} if env else {})}}},
        "copilot-cli": {"mcpServers": {"graphmem": {"type": "local", **with_env, "tools": ["*"]}}},
    }
    return json.dumps(shapes[client], indent=2) + "\n"


def codex_config(command: list[str], env: dict[str, str]) -> str:
    """Codex CLI's TOML table; env becomes its [mcp_servers.graphmem.env] table."""
    text = (f"[mcp_servers.graphmem]\ncommand = {toml_string(command[0])}\n"
            f"args = [{', '.join(map(toml_string, command[1:]))}]\n")
    if env:
        text += "\n[mcp_servers.graphmem.env]\n" + "".join(f"{k} = {toml_string(v)}\n" for k, v in env.items())
    return text


def toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, as long as non-ASCII stays literal (no surrogate pairs)."""
    return json.dumps(value, ensure_ascii=False)


def protocol_text() -> str:
    """AGENT-PROTOCOL.md as installed beside the server (--protocol prints it)."""
    path = asset_path("AGENT-PROTOCOL.md")
    if path is None:
        raise ConfigError("AGENT-PROTOCOL.md is missing from this installation")
    return path.read_text(encoding="utf-8")


def write_skill(folder: Path) -> Path:
    """Write the graphmem skill (SKILL.md with front matter and the agent protocol) under `folder`; returns its path."""
    target = folder / "graphmem" / "SKILL.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    front = ("---\nname: graphmem\ndescription: Long-term memory across sessions through the graphmem MCP server. "
             "Use at the start of every task (recall), when you learn a decision, gotcha or state change (record it), "
             "and before you finish (record what is pending).\n---\n\n")
    target.write_text(front + protocol_text(), encoding="utf-8")
    return target


def write_demo_graph(settings: Settings) -> None:
    """The demo graph of --ui --demo (a fictional small software shop) with its archive, written to
    settings.file_path."""
    today = dt.date.today()
    settings.file_path.parent.mkdir(parents=True, exist_ok=True)
    settings.file_path.write_text("\n".join(demo_graph_lines(today)), encoding="utf-8")
    store = GraphStore(settings)
    for name, facts in demo_archive().items():
        store.write_archive(name, [ArchivedFact(f, "over cap", f"{today} 09:00 UTC") for f in facts])
    seed_demo_metadata(settings)


def seed_demo_metadata(settings: Settings) -> None:
    """A week of use, so the demo shows pins, fading facts and receipts: real calls on the demo graph, back-dated."""
    memory = Memory(settings)
    graph = memory.fresh_graph()
    rng = random.Random(7)
    now = time.time()
    clients = ["claude-code", "codex", "cursor"]
    for day in range(7, -1, -1):
        memory.client = clients[day % 3]
        memory.call_tool("read_graph", {})
        for entity in rng.sample(graph.entities, 3):
            memory.call_tool("search_nodes", {"query": entity.entityType})
            memory.call_tool("recall", {"query": f"{entity.name} {entity.entityType}"})
        with memory.meta.write() as conn:  # today's rows hold just these calls: move them to their day
            conn.execute("UPDATE ledger_days SET day = date(?, 'unixepoch') WHERE day = date(?, 'unixepoch')",
                         (now - day * 86400.0, now))
    with memory.meta.write() as conn:  # two months of use (the activity clock), so unused dated facts fade
        conn.executemany("INSERT OR IGNORE INTO active_days(day) VALUES (?)",
                         [(int(now // DAY_SECONDS) - day,) for day in range(60)])
    facts = [(e.name, o) for e in graph.entities for o in e.observations]
    fadeable = [(e.name, o) for e in graph.entities for o in e.observations if can_fade(e.entityType, o)]
    for entity, text in rng.sample(fadeable, min(6, len(fadeable))):  # not looked at in those two months: fading
        state = memory.meta.state(entity, text)
        state.last_used = now - 60 * 86400
        state.pinned = False
        memory.meta.save_states([(entity, text)])
    for entity, text in facts[:2]:
        memory.meta.state(entity, text).pinned = True
        memory.meta.save_states([(entity, text)])


def print_briefing(settings: Settings, budget: int, query: str | None, hook_json: bool = False) -> int:
    """--context: the briefing on stdout; nothing at all (exit 0) when there is no memory yet. hook_json: as
    a session hook's JSON answer, `{}` when there is nothing to say."""
    if budget < 1:
        raise ConfigError(f"--budget {budget}: give a number of tokens, at least 1 (default {CONTEXT_BUDGET})")
    text = ""
    if settings.file_path.exists() and settings.file_path.stat().st_size > 0:
        text = briefing(Memory(settings, "context"), budget, query)
    elif settings.global_path is not None and settings.global_path.exists() and settings.global_path.stat().st_size:
        text = global_briefing(settings, budget, query)  # a project with no memory yet: your rules still hold
    if hook_json:
        print(json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
                         if text else {}))
    elif text:
        print(text)
    return 0


def markdown_command(settings: Settings, export: list[str] | None, source: Path | None) -> int:
    """--export markdown DIR and --import DIR: Markdown notes out of and into the graph."""
    memory = Memory(settings, "cli")
    if export:
        if export[0] != "markdown":
            raise ConfigError(f"--export {export[0]}: the one format is markdown (--export markdown DIR)")
        print(f"exported {export_markdown(memory, Path(export[1]))} entities to {export[1]}")
        return 0
    if not source.exists():
        raise ConfigError(f"--import {source}: no such file or folder")
    print(import_into(memory, source))
    return 0


def init_command(move: bool) -> int:
    """--init [--move-private]: set up the team tier; move the private memory into it, or say how."""
    root = Path(os.environ.get("MEMORY_PROJECT_ROOT", "").strip() or Path.cwd()).expanduser()
    for line in init_team(root, server_command()):
        print(line)
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_FILE_PATH"}  # the project's tiers, whatever is set
    settings = Settings.from_env({**env, "MEMORY_PROJECT_ROOT": str(root)})
    if move:
        for line in move_private(settings):
            print(line)
    elif settings.project is not None:
        counts = graph_file_facts(settings.project.private_path)
        if counts and counts[1]:
            print(f"This project has a private memory ({counts[1]} facts, {settings.project.private_path}), not read "
                  "while .graphmem/ exists: graphmem --init --move-private moves it into the team tier.")
    if os.environ.get("MEMORY_FILE_PATH", "").strip():
        print(f"Note: MEMORY_FILE_PATH is set here ({os.environ['MEMORY_FILE_PATH'].strip()}): a server started with "
              f"it uses that one file, not {TEAM_DIR}/memory.jsonl; unset it (and in your client's config) to share.")
    print("Commit .graphmem/ and .gitattributes; each teammate runs `graphmem --init` once after cloning "
          "(it registers the merge driver in their .git/config). Pre-commit check: graphmem --lint.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line: every option with its help text."""
    p = argparse.ArgumentParser(prog="graphmem", description="Lean, self-curating MCP memory server (stdio). "
                                "With no options it serves MCP on stdin/stdout for an agent: set one up with "
                                "--config CLIENT.", epilog=settings_help(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"graphmem {__version__}")
    p.add_argument("--ui", nargs="?", const=8765, type=int, metavar="PORT",
                   help="serve the web UI on 127.0.0.1 (default 8765; 0 = any free port)")
    p.add_argument("--http", metavar="[HOST:]PORT",
                   help="serve MCP over Streamable HTTP at http://HOST:PORT/mcp (default host 127.0.0.1; 0 = any "
                        "free port; clients name their project with an X-Graphmem-Project header); with --config "
                        "CLIENT: the URL of such a server, for a remote config")
    p.add_argument("--tls-cert", type=Path, metavar="FILE", help="with --http: serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", type=Path, metavar="FILE", help="with --http: the certificate's private key (PEM)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="with --http: a browser origin allowed besides loopback pages (e.g. https://app.example)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="with --http on loopback: a Host name a reverse proxy in front may pass on (e.g. mem.example)")
    p.add_argument("--no-open", action="store_true", help="with --ui: print the link, do not open a browser")
    p.add_argument("--demo", action="store_true", help="with --ui: a temporary copy of a fictional demo graph")
    p.add_argument("--lint", action="store_true", help="read-only health report of the graph")
    p.add_argument("--compact", action="store_true", help="archive overflow and faded facts (guarded by probes)")
    p.add_argument("--dry-run", action="store_true", help="with --compact: show the plan, change nothing")
    p.add_argument("--all", action="store_true",
                   help="with --compact: list every planned fact (default: the first 200)")
    p.add_argument("--report", action="store_true", help="tokens and dollars saved, per tool and client")
    p.add_argument("--probe", metavar="QUERY", help="add a guardrail probe: a question recall must keep answering")
    p.add_argument("--expect", metavar="ENTITY", help="with --probe: the entity that answers it")
    p.add_argument("--fact", metavar="TEXT", help="with --probe: the exact fact that answers it")
    p.add_argument("--probes", action="store_true", help="list the guardrail probes (learned and added), with ids")
    p.add_argument("--remove-probe", metavar="ID", type=int, action="append", help="remove a guardrail probe by id")
    p.add_argument("--protocol", action="store_true", help="print AGENT-PROTOCOL.md (for AGENTS.md / CLAUDE.md)")
    p.add_argument("--skill", metavar="DIR", type=Path, help="write DIR/graphmem/SKILL.md (an Agent Skill)")
    p.add_argument("--config", metavar="CLIENT", choices=CLIENTS, help="print a config for: " + ", ".join(CLIENTS))
    p.add_argument("--hooks", action="store_true",
                   help="with --config: the client's session-start hook that runs --context "
                        "(claude-code, codex, gemini)")
    p.add_argument("--hook-json", action="store_true",
                   help="with --context: print the briefing as a hook's JSON (hookSpecificOutput.additionalContext)")
    p.add_argument("--context", action="store_true",
                   help="print a session-start briefing (pinned facts and rules, what changed, most used)")
    p.add_argument("--budget", type=int, metavar="N",
                   help=f"with --context: at most N tokens (default {CONTEXT_BUDGET})")
    p.add_argument("--query", metavar="TEXT", help="with --context: add a recall for this task")
    p.add_argument("--export", nargs=2, metavar=("FORMAT", "DIR"),
                   help="--export markdown DIR: one Markdown file per entity (Obsidian-friendly)")
    p.add_argument("--import", dest="import_path", type=Path, metavar="PATH",
                   help="merge in an --export folder, a memory.json[l], or a CLAUDE.md/AGENTS.md's bullet points")
    p.add_argument("--fix", action="store_true", help="with --lint: heal git conflict markers, keeping both sides")
    p.add_argument("--init", action="store_true",
                   help="share this repository's memory with the team: .graphmem/, .gitattributes, the merge driver")
    p.add_argument("--move-private", action="store_true",
                   help="with --init: move this project's private memory into the team tier (a backup stays)")
    p.add_argument("--projects", action="store_true",
                   help="the memory tiers here (which one writes go to) and every private project memory")
    p.add_argument("--merge", nargs="+", metavar="FILE",
                   help="git merge driver: --merge BASE OURS THEIRS [PATH] (registered by --init)")
    return p


# Options that only mean something beside another one: (dest, its flag, the option it goes with, that option's
# dest). Alone, they used to fall through to serving MCP on stdio, which in a terminal looks like a hang.
COMPANION_OPTIONS = (("hooks", "--hooks", "--config CLIENT", "config"),
                     ("hook_json", "--hook-json", "--context", "context"),
                     ("query", "--query", "--context", "context"), ("budget", "--budget", "--context", "context"),
                     ("fix", "--fix", "--lint", "lint"), ("dry_run", "--dry-run", "--compact", "compact"),
                     ("all", "--all", "--compact", "compact"),
                     ("tls_cert", "--tls-cert", "--http 8000", "http"), ("tls_key", "--tls-key", "--http 8000", "http"),
                     ("allow_origin", "--allow-origin", "--http 8000", "http"),
                     ("allow_host", "--allow-host", "--http 8000", "http"),
                     ("no_open", "--no-open", "--ui", "ui"), ("demo", "--demo", "--ui", "ui"))


def refuse_lone_companions(args: argparse.Namespace) -> None:
    """A ConfigError for an option given without the one it belongs to (e.g. --hooks without --config CLIENT)."""
    for dest, flag, partner, partner_dest in COMPANION_OPTIONS:
        value, owner = getattr(args, dest, None), getattr(args, partner_dest, None)
        if value not in (None, False, []) and (owner is None or owner is False):  # --ui 0 is given (0 == False)
            raise ConfigError(f"{flag} goes with {partner.split()[0]} (graphmem {partner} {flag}); "
                              "alone it does nothing")


def main(argv: list[str] | None = None) -> int:
    """The command line's entry point: maintenance and setup commands, else the MCP server on stdio; exit codes 0, 1
    (findings or failures), 2 (bad usage)."""
    args = build_parser().parse_args(argv)
    try:
        refuse_lone_companions(args)
        if args.protocol:
            sys.stdout.write(protocol_text())
            return 0
        if args.skill:
            print(f"wrote {write_skill(args.skill)}")
            return 0
        if args.config:
            if args.http and args.hooks:
                raise ConfigError("--hooks goes without --http: a session-start hook runs graphmem --context on the "
                                  "client's machine, which reads the memory there, not a remote server's")
            if args.http:
                return print_remote_config(args.config, args.http)
            return print_hooks(args.config) if args.hooks else print_config(args.config)
        if args.merge:
            return merge_command(args.merge)
        if args.init:
            return init_command(args.move_private)
        if args.move_private:
            raise ConfigError("--move-private goes with --init: graphmem --init --move-private")
        settings = Settings.from_env()
        if args.projects:
            print(projects_report(settings, dict(os.environ)))
            return 0
        if args.context:
            return print_briefing(settings, CONTEXT_BUDGET if args.budget is None else args.budget, args.query,
                                  args.hook_json)
        if args.export or args.import_path:
            return markdown_command(settings, args.export, args.import_path)
        if args.ui is not None:
            return serve_ui(settings, args.ui, not args.no_open, args.demo)
        if args.http:
            return serve_http(settings, args.http, args.tls_cert, args.tls_key, args.allow_origin, args.allow_host)
        if args.lint or args.compact or args.report or args.probe or args.probes or args.remove_probe:
            memory = Memory(settings, "cli")
            if args.probe or args.probes or args.remove_probe:
                return manage_probes(memory, args)
            unmerged = heal_unmerged(memory) if args.lint and args.fix else []
            for line in unmerged:
                print(line)
            if args.lint and args.fix and not unmerged:
                before = memory.store.read()
                markers = sum(1 for _, raw in before.unreadable if CONFLICT_MARKER.match(raw))
                memory.change("heal conflict markers", lambda tx: "healed")
                staged = (f"; mark it resolved: git add {TEAM_DIR}/memory.jsonl"
                          if markers and settings.tier == "team" else "")
                print(f"healed {markers} conflict marker line(s); both sides' facts kept{staged}" if markers
                      else "nothing to fix")
            if args.lint:
                found = secret_findings(memory.fresh_graph())
                print(lint_report(memory, found))
                if found:  # on stderr too: a pre-commit hook sends stdout to /dev/null, and must still say why
                    log(f"secret-shaped text in {memory.store.path}: {'; '.join(found[:5])}"
                        + (f" (+{len(found) - 5} more)" if len(found) > 5 else "") + ". Remove it before committing.")
                return 1 if found else 0
            if args.report:
                print(report(memory))
                return 0
            text, code = compact(memory, args.dry_run, args.all)
            print(text)
            return code
        return serve_stdio(settings)
    except ConfigError as err:
        print(f"graphmem: {err}", file=sys.stderr)
        return 2
    except StoreError as err:
        print(f"graphmem: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C in a terminal: a quiet stop, not a traceback
        return 130
    except BrokenPipeError:  # `graphmem --lint | head`: the reader left; stop quietly (the Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as err:  # a full disk, a read-only folder: files are replaced whole, so none is half-written
        where = f" {err.filename}" if err.filename else ""
        print(f"graphmem: cannot write{where}: {err.strerror or err}; nothing was half-written (each file is "
              "replaced whole); free space or fix the permissions, then run it again", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
