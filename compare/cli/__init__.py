"""The command line: `compare` / `llm-compare` (the top layer; nothing below imports it)."""
from compare.cli.main import main

__all__ = ["main"]
