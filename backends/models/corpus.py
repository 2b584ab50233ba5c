"""The training text of the trained models and its held-out split, named so that a model's
provenance file says which text it learned from and which text its quality is measured on.

Two corpora, both Python source already on any machine that runs this tool (nothing downloaded):

* ``stdlib``: the top-level ``*.py`` files of this interpreter's standard library (the first 200,
  sorted): the tiny model's tokenizer and training text (a few MB; minutes of CPU).
* ``python``: every ``*.py`` file under the standard library and the interpreter's site-packages
  (sorted by path relative to its root, files over 1 MB skipped), up to a byte budget: tens of
  millions of tokens, enough for a model of a few hundred million parameters trained on a GPU.

A file is held out when sha256 of its name (``stdlib``) or of its path relative to its root
(``python``) is 0 modulo 20: ~5 %, the same files on every machine with the same sources.
"""
from __future__ import annotations

import hashlib
import os
import sysconfig
from pathlib import Path
from typing import Any

from backends.models.tiny import tokenizer_files

HELDOUT_MODULUS = 20
CORPORA = ("stdlib", "python")
MAX_FILE_BYTES = 1 << 20


def _held(key: str) -> bool:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % HELDOUT_MODULUS == 0


def is_heldout(path: str) -> bool:
    """The ``stdlib`` rule: by the file's name."""
    return _held(os.path.basename(path))


def python_roots() -> list[str]:
    """The roots of the ``python`` corpus: the standard library, then site-packages (purelib and
    platlib, once each)."""
    paths = sysconfig.get_paths()
    roots: list[str] = []
    for k in ("stdlib", "purelib", "platlib"):
        p = os.path.realpath(paths[k])
        if os.path.isdir(p) and p not in roots:
            roots.append(p)
    return roots


def _python_files(roots: list[str], max_bytes: int) -> list[tuple[str, str]]:
    """(root, relative path) of the corpus's files, in order, up to ``max_bytes`` in all (0: no cap).
    A root inside an earlier root (site-packages under the standard library's prefix) is walked
    once, by the earlier root, skipping nothing twice."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    total = 0
    for root in roots:
        found = []
        for d, dirs, files in os.walk(root):
            dirs.sort()
            if any(d != r and os.path.realpath(d) == r for r in roots):  # another root, walked on its own
                dirs[:] = []
                continue
            for f in files:
                if f.endswith(".py"):
                    found.append(os.path.relpath(os.path.join(d, f), root))
        for rel in sorted(found):
            full = os.path.join(root, rel)
            try:
                size = os.path.getsize(full)
            except OSError:
                continue
            if size > MAX_FILE_BYTES or os.path.realpath(full) in seen:
                continue
            if max_bytes and total + size > max_bytes:
                return out
            seen.add(os.path.realpath(full))
            total += size
            out.append((root, rel))
    return out


def corpus_split(corpus: str = "stdlib", max_bytes: int = 0) -> tuple[list[str], list[str]]:
    """(train files, held-out files) as full paths, each in corpus order."""
    if corpus == "stdlib":
        files = tokenizer_files()
        return [f for f in files if not is_heldout(f)], [f for f in files if is_heldout(f)]
    if corpus == "python":
        pairs = _python_files(python_roots(), max_bytes)
        return ([os.path.join(r, p) for r, p in pairs if not _held(p)],
                [os.path.join(r, p) for r, p in pairs if _held(p)])
    raise ValueError(f"unknown corpus {corpus!r}; one of {', '.join(CORPORA)}")


def token_stream(tok: Any, files: list[str]) -> list[int]:
    """The files' tokens, one document after another, separated by <|endoftext|> (tokenized in
    batches: the fast tokenizer encodes a batch on every core, with the same ids as one by one)."""
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    ids: list[int] = []
    for i in range(0, len(files), 256):
        texts = []
        for f in files[i:i + 256]:
            with open(f, encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
        for enc in tok(texts, verbose=False)["input_ids"]:
            ids += enc + [eot]
    return ids


def heldout_files_of(provenance: dict[str, Any]) -> list[str]:
    """The held-out files a trained model's provenance names (``stdlib`` when it names none)."""
    c = provenance.get("corpus") or {}
    if c.get("name", "stdlib") == "stdlib":
        return corpus_split("stdlib")[1]
    missing = [p for p in c.get("heldout_paths", []) if not Path(p).is_file()]
    if missing or not c.get("heldout_paths"):
        raise FileNotFoundError(f"the held-out text of this model ({len(missing)} files, e.g. "
                                f"{(missing or ['none named'])[0]}) is not on this machine")
    return list(c["heldout_paths"])


def windows_of(tok: Any, files: list[str], windows: int, length: int) -> list[list[int]]:
    """Consecutive non-overlapping ``length``-token windows of the files' text (at most ``windows``)."""
    ids = token_stream(tok, files)
    return [ids[i:i + length] for i in range(0, len(ids) - length + 1, length)][:windows]
