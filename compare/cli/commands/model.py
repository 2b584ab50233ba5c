"""``compare model tiny [--trained] [--out DIR]``: build the tiny real Qwen2 models.

Without ``--trained``: random weights, seconds to build, used wherever only speed matters (the
default run, the speed tests). With ``--trained``: the same shape and tokenizer trained for
minutes on the stdlib sources (backends/models/train.py), for quality numbers that mean something;
its provenance (corpus, steps, seed, final train loss, held-out perplexity) is printed to stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="build local models (no download)")
    msub = p.add_subparsers(dest="model_cmd", metavar="KIND", required=True)
    t = msub.add_parser("tiny", help="a tiny Qwen2 + locally trained tokenizer (random or trained weights)")
    t.add_argument("--out", type=Path, default=None, help="directory (default: the cache)")
    t.add_argument("--trained", action="store_true",
                   help="train it on the stdlib sources (minutes on 2 cores; cached) instead of random weights")
    t.set_defaults(func=_tiny)


def _tiny(args: argparse.Namespace) -> int:
    if args.out is not None:
        from core.fsutil import check_dir_option

        check_dir_option(args.out, "--out")
    if not args.trained:
        from backends.models.tiny import ensure_tiny_model

        print(ensure_tiny_model(args.out))
        return 0
    from backends.models.train import ensure_trained_model, provenance

    d = ensure_trained_model(args.out, log=lambda s: print(s, file=sys.stderr, flush=True))
    prov = provenance(d)
    print(json.dumps({k: prov.get(k) for k in ("version", "train", "heldout")}), file=sys.stderr)
    print(d)
    return 0
