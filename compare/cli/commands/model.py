"""``compare model tiny --out DIR``: build the tiny real Qwen2 model used by the default run."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="build local models (no download)")
    msub = p.add_subparsers(dest="model_cmd", metavar="KIND", required=True)
    t = msub.add_parser("tiny", help="a tiny random-weight Qwen2 + locally trained tokenizer")
    t.add_argument("--out", type=Path, default=None, help="directory (default: the cache)")
    t.set_defaults(func=_tiny)


def _tiny(args: argparse.Namespace) -> int:
    from backends.models.tiny import ensure_tiny_model

    print(ensure_tiny_model(args.out))
    return 0
