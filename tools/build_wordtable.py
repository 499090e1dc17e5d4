#!/usr/bin/env python3
"""Build wordtable.tsv.gz, graphmem's table of related words, from WordNet 3.0.

    apt-get install wordnet-base        # Debian/Ubuntu; the dict files land in /usr/share/wordnet
    python3 tools/build_wordtable.py [--wordnet DIR] [--out wordtable.tsv.gz]

Stdlib only, deterministic: two runs give the same bytes (gzip mtime 0, sorted keys, fixed
tie-breaks). The header names every input file with its sha256, so a rebuild can be checked
(tests/test_recall.py does when wordnet-base is installed).

Three sections (design and weights: notes/relevance.md, measured in a spike outside the project):
  [query]  key -> up to QUERY_NEIGHBOURS related words, for expanding a query's words.
           Keys: every WordNet lemma with a sense-tagged count (SemCor, shipped with WordNet:
           the only word frequency used, and only here, to choose keys), and 2-3 word lemmas
           made of such words ("give back").
  [index]  key -> up to INDEX_NEIGHBOURS broader words, for generalising a fact's words when it
           is indexed: synonyms, hypernyms and the "part of" chain
           (Cape Town -> South Africa -> Africa).
  [forms]  irregular inflections (WordNet's *.exc files) of the keys: "went" -> "go".
Weights are integer percent. Words are lower case; a phrase's words are joined by spaces.
Nothing here is chosen from a benchmark's questions.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import subprocess
import sys

POS = ("noun", "verb", "adj", "adv")
POS_TAG = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}

# Relation weights (notes/relevance.md, chosen in the spike on LoCoMo-free data).
QUERY_RELATIONS = {
    "+": 90,                                  # derived form
    "\\": 80, "<": 80,                        # pertainym, participle
    "&": 70, "$": 70,                         # similar to, verb group
    "@": 60, "@i": 60, "#m": 60, "#s": 60, "#p": 60, "=": 60, "^": 60,   # hypernym, holonym, attribute, also see
    "~": 50, "~i": 50, "%m": 50, "%s": 50, "%p": 50, "*": 50, ">": 50,   # hyponym, meronym, entailment, cause
}
SYNONYM = 100
NARROWER = {"~", "~i", "%m", "%s", "%p"}
NARROWER_PER_SYNSET = 40      # at most this many hyponyms or meronyms from one synset
QUERY_NEIGHBOURS = 20
INDEX_NEIGHBOURS = 3          # per key: indexing cost grows with it (notes: 8 in the spike, 3 when cost matters)
INDEX_SENSES = 2              # only a word's first senses generalise at write time
INDEX_BROADER = {"@": (60, 40), "@i": (60, 40), "#p": (70, 60, 50), "#m": (70, 60, 50)}  # weight per step up
MIN_WEIGHT = 20
PART_OF = {"#p", "#m"}


def sense_factor(rank: int) -> float:
    """A word's later senses count less: max(0.3, 1 / (1 + 0.35 * rank)), rank 0 = most frequent sense."""
    return max(0.3, 1.0 / (1.0 + 0.35 * rank))


def lemma_text(word: str) -> str:
    """WordNet lemma -> table word: lower case, '_' -> ' ', adjective markers like '(a)' dropped."""
    if word.endswith(")") and "(" in word:
        word = word[:word.index("(")]
    return word.replace("_", " ").lower()


class WordNet:
    """The parts of WordNet's dict files the table needs."""

    def __init__(self, folder: str):
        self.folder = folder
        self.synsets: dict[tuple[str, int], tuple[list[str], list[tuple[str, str, int, int, int]]]] = {}
        self.senses: dict[str, list[tuple[str, int]]] = {}     # lemma -> synsets, most frequent first per pos
        self.tagged: dict[str, int] = {}                          # lemma -> sense-tagged count, all pos
        self.exceptions: dict[str, list[str]] = {}
        for pos in POS:
            self._read_data(pos)
            self._read_index(pos)
            self._read_exceptions(pos)

    def _lines(self, name: str) -> list[str]:
        with open(os.path.join(self.folder, name), encoding="latin-1") as fh:
            return [line for line in fh.read().split("\n") if line and not line.startswith("  ")]

    def _read_data(self, pos: str) -> None:
        for line in self._lines("data." + pos):
            fields = line.split("|")[0].split()
            offset, n_words = int(fields[0]), int(fields[3], 16)
            words = [lemma_text(fields[4 + 2 * i]) for i in range(n_words)]
            at = 4 + 2 * n_words
            pointers = []
            for i in range(int(fields[at])):
                symbol, target, tag, st = fields[at + 1 + 4 * i: at + 5 + 4 * i]
                pointers.append((symbol, POS_TAG[tag], int(target), int(st[:2], 16), int(st[2:], 16)))
            self.synsets[(pos, offset)] = (words, pointers)

    def _read_index(self, pos: str) -> None:
        for line in self._lines("index." + pos):
            fields = line.split()
            lemma, n_synsets, n_pointers = lemma_text(fields[0]), int(fields[2]), int(fields[3])
            tagged = int(fields[5 + n_pointers])
            offsets = [int(x) for x in fields[6 + n_pointers: 6 + n_pointers + n_synsets]]
            self.senses.setdefault(lemma, []).extend((pos, off) for off in offsets)
            self.tagged[lemma] = self.tagged.get(lemma, 0) + tagged

    def _read_exceptions(self, pos: str) -> None:
        for line in self._lines(pos + ".exc"):
            form, *bases = line.split()
            for base in bases:
                self.exceptions.setdefault(lemma_text(form), []).append(lemma_text(base))

    def ranked_senses(self, lemma: str) -> list[tuple[int, tuple[str, int]]]:
        """(rank within its part of speech, synset) for each sense of the lemma."""
        out, seen_pos = [], {}
        for key in self.senses.get(lemma, []):
            rank = seen_pos.get(key[0], 0)
            seen_pos[key[0]] = rank + 1
            out.append((rank, key))
        return out

    def targets(self, key: tuple[str, int], pointer: tuple[str, str, int, int, int], lemma: str) -> list[str]:
        """Words a pointer leads to: all words of the target synset, or one word for a lexical pointer."""
        symbol, pos, offset, source, target = pointer
        words = self.synsets[(pos, offset)][0]
        if source == 0:
            return words
        own = self.synsets[key][0]
        if source - 1 < len(own) and own[source - 1] == lemma and target - 1 < len(words):
            return [words[target - 1]]
        return []


def add(found: dict[str, int], word: str, weight: float, key: str) -> None:
    """Keep a neighbour's best weight; a key is not its own neighbour."""
    w = int(round(weight))
    if word != key and w >= MIN_WEIGHT and found.get(word, 0) < w:
        found[word] = w


def query_neighbours(wn: WordNet, lemma: str) -> dict[str, int]:
    """Related words of every sense, weighted by relation and sense rank."""
    found: dict[str, int] = {}
    for rank, key in wn.ranked_senses(lemma):
        factor = sense_factor(rank)
        words, pointers = wn.synsets[key]
        for word in words:
            add(found, word, SYNONYM * factor, lemma)
        narrower = 0
        for pointer in pointers:
            weight = QUERY_RELATIONS.get(pointer[0])
            if weight is None:
                continue
            if pointer[0] in NARROWER:
                narrower += 1
                if narrower > NARROWER_PER_SYNSET:
                    continue
            for word in wn.targets(key, pointer, lemma):
                add(found, word, weight * factor, lemma)
    return found


def index_neighbours(wn: WordNet, lemma: str) -> dict[str, int]:
    """Broader words of the first senses: common synonyms and hypernyms, and the whole "part of" chain
    (a city's country is rarely tagged in WordNet's corpus but is what a question names). Derived forms are
    left to the server's stemmer."""
    found: dict[str, int] = {}
    for rank, key in wn.ranked_senses(lemma):
        if rank >= INDEX_SENSES:
            continue
        factor = sense_factor(rank)
        for word in wn.synsets[key][0]:
            if common(wn, word):
                add(found, word, SYNONYM * factor, lemma)
        for symbol, weights in INDEX_BROADER.items():
            _climb(wn, key, symbol, weights, lemma, factor, found)
    return found


def _climb(wn: WordNet, key: tuple[str, int], symbol: str, weights: tuple[int, ...], lemma: str, factor: float,
           found: dict[str, int]) -> None:
    """Up one chain (hypernyms or holonyms), a weaker weight per step; only common words, and
    on the part-of chain each place's own name (its synset's first word: "sweden", not "sverige")."""
    level = [key]
    for weight in weights:
        nxt = []
        for k in level:
            for pointer in wn.synsets[k][1]:
                if pointer[0] == symbol and pointer[3] == 0:
                    target = (pointer[1], pointer[2])
                    nxt.append(target)
                    for n, word in enumerate(wn.synsets[target][0]):
                        if (symbol in PART_OF and n == 0) or common(wn, word):
                            add(found, word, weight * factor, lemma)
        level = nxt


def common(wn: WordNet, word: str) -> bool:
    """A word people use: WordNet's sense-tagged corpus saw it at least once."""
    return wn.tagged.get(word, 0) > 0


def plain_phrase(wn: WordNet, lemma: str) -> bool:
    """A 2-3 word lemma made of common words ("give back", "sum of money"): a query says it in those words."""
    words = lemma.split(" ")
    return 2 <= len(words) <= 3 and all(common(wn, w) for w in words)


def top(found: dict[str, int], limit: int, keep: "callable") -> list[tuple[str, int]]:
    """The strongest neighbours worth keeping, ties broken by the word: the output is deterministic."""
    kept = [(w, v) for w, v in found.items() if keep(w)]
    return sorted(kept, key=lambda wv: (-wv[1], wv[0]))[:limit]


def line(key: str, neighbours: list[tuple[str, int]]) -> str:
    return key + "".join(f"\t{w}|{v}" for w, v in neighbours)


def build(wn: WordNet) -> tuple[list[str], list[str], list[str]]:
    """The three sections' lines, sorted by key."""
    keys = sorted(k for k in wn.senses if (common(wn, k) or plain_phrase(wn, k)) and "\t" not in k and "|" not in k)
    query, index = [], []
    for key in keys:
        near = top(query_neighbours(wn, key), QUERY_NEIGHBOURS, lambda w: common(wn, w))
        if near:
            query.append(line(key, near))
    broad_keys = sorted(k for k in wn.senses if "\t" not in k and "|" not in k
                        and (common(wn, k) or _is_place(wn, k)))
    for key in broad_keys:
        up = top(index_neighbours(wn, key), INDEX_NEIGHBOURS, lambda w: True)
        if up:
            index.append(line(key, up))
    known = {k.split("\t", 1)[0] for k in query} | {k.split("\t", 1)[0] for k in index}
    forms = sorted(line(form, [(b, 100) for b in sorted(set(bases)) if b in known])
                   for form, bases in wn.exceptions.items() if form not in known and any(b in known for b in bases))
    return query, index, forms


def _is_place(wn: WordNet, lemma: str) -> bool:
    """A named thing that is part of something (a city in a country): worth generalising though rarely tagged.
    Named things are WordNet's instances (an instance-hypernym pointer); "part of" is a part-holonym pointer."""
    senses = wn.ranked_senses(lemma)
    symbols = {p[0] for p in wn.synsets[senses[0][1]][1]} if senses else set()
    return "@i" in symbols and "#p" in symbols


def package_version() -> str:
    """The wordnet-base package version, when dpkg knows it."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "wordnet-base"], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


LICENCE = """WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.
Permission to use, copy, modify and distribute this software and database and its documentation for any
purpose and without fee or royalty is hereby granted, provided that you agree to comply with the following
copyright notice and statements, including the disclaimer, and that the same appear on ALL copies of the
software, database and documentation, including modifications that you make for internal use or for
distribution.
THIS SOFTWARE AND DATABASE IS PROVIDED "AS IS" AND PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR
WARRANTIES, EXPRESS OR IMPLIED. BY WAY OF EXAMPLE, BUT NOT LIMITATION, PRINCETON UNIVERSITY MAKES NO
REPRESENTATIONS OR WARRANTIES OF MERCHANTABILITY OR FITNESS FOR ANY PARTICULAR PURPOSE OR THAT THE USE OF
THE LICENSED SOFTWARE, DATABASE OR DOCUMENTATION WILL NOT INFRINGE ANY THIRD PARTY PATENTS, COPYRIGHTS,
TRADEMARKS OR OTHER RIGHTS.
The name of Princeton University or Princeton may not be used in advertising or publicity pertaining to
distribution of the software and/or database. Title to copyright in this software, database and any
associated documentation shall at all times remain with Princeton University and LICENSEE agrees to
preserve same."""


def header(folder: str) -> list[str]:
    """Comment lines: what the table is, its inputs with their hashes, and WordNet's licence notice."""
    inputs = sorted(f"{kind}.{pos}" for pos in POS for kind in ("data", "index")) + \
        ["adj.exc", "adv.exc", "noun.exc", "verb.exc"]
    out = [f"# graphmem word table 1: related words from WordNet 3.0 (Debian wordnet-base {package_version()}), "
           "built by tools/build_wordtable.py"]
    for name in inputs:
        with open(os.path.join(folder, name), "rb") as fh:
            out.append(f"# input {name} sha256 {hashlib.sha256(fh.read()).hexdigest()}")
    out += ["# " + text for text in LICENCE.split("\n")]
    return out


def render(folder: str) -> bytes:
    """The whole gzipped file, byte-identical on every run over the same inputs."""
    wn = WordNet(folder)
    query, index, forms = build(wn)
    text = "\n".join(header(folder) + ["[query]"] + query + ["[index]"] + index + ["[forms]"] + forms) + "\n"
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wordnet", default="/usr/share/wordnet", help="WordNet dict folder (default /usr/share/wordnet)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "wordtable.tsv.gz"))
    args = ap.parse_args(argv)
    if not os.path.exists(os.path.join(args.wordnet, "data.noun")):
        print(f"no WordNet dict files in {args.wordnet}: apt-get install wordnet-base", file=sys.stderr)
        return 1
    data = render(args.wordnet)
    with open(args.out, "wb") as fh:
        fh.write(data)
    print(f"{args.out}: {len(data):,} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
