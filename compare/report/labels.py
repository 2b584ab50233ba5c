"""Short labels for long backend names (topologies: ``replicas@2*vllm-server:lb=lor``), so tables
and plots stay narrow; a legend maps each label back to the full name, printed once."""
from __future__ import annotations

from typing import Iterable

MAX_LEN = 14


def short_labels(names: Iterable[str], max_len: int = MAX_LEN) -> dict[str, str]:
    """name -> label: names up to ``max_len`` characters stay as they are, longer ones become
    A, B, C ... (skipping any letter that is itself a backend name)."""
    names = list(names)
    taken = set(names)
    letters = (c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in taken)
    out = {}
    for n in names:
        out[n] = n if len(n) <= max_len else next(letters, n)
    return out


def legend(labels: dict[str, str]) -> list[str]:
    """'A = replicas@2*vllm-server:lb=lor' for every shortened name (empty when none was)."""
    return [f"{short} = {name}" for name, short in labels.items() if short != name]
