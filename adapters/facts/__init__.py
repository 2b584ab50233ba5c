"""Upstream fact sheets: what a pinned release of an engine defines (launcher flags, environment,
response fields, error types, metric names, defaults, behaviours), read from its source at a tag
and checked in as data beside the adapters. Tests hold the adapters, parsers and test doubles to
these rows; the rows themselves are facts, each naming its upstream file and tag."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

KINDS = ("flag", "env", "field", "metric", "default", "behaviour")


@dataclass(frozen=True)
class Fact:
    key: str
    kind: str  # one of KINDS
    type: str  # "posint", "enum:a,b", "str|null", "absent", "rule", ...
    value: Any  # the default, the literal, or the rule in words (None: none)
    file: str  # upstream path, relative to the repository root
    tag: str
    note: str = ""

    def choices(self) -> tuple[str, ...] | None:
        """An enum's values, else None."""
        base = self.type.split("|")[0]
        return tuple(base[5:].split(",")) if base.startswith("enum:") else None


@dataclass(frozen=True)
class FactSheet:
    framework: str
    repo: str
    tag: str
    rows: tuple[Fact, ...]

    def get(self, key: str, kind: str | None = None) -> Fact | None:
        return next((r for r in self.rows if r.key == key and (kind is None or r.kind == kind)), None)

    def require(self, key: str, kind: str | None = None) -> Fact:
        """A row the tool cannot do without: a missing one is a broken fact sheet, not a user's error."""
        row = self.get(key, kind)
        if row is None:
            raise KeyError(f"{self.repo}@{self.tag} fact sheet has no row {key!r}")
        return row

    def of(self, kind: str) -> dict[str, Fact]:
        return {r.key: r for r in self.rows if r.kind == kind}

    def cite(self, key: str) -> str:
        """'upstream/file@tag' for a row (for messages and docs)."""
        r = self.get(key)
        return f"{r.file}@{r.tag}" if r else f"{self.repo}@{self.tag}"


@lru_cache(maxsize=None)
def load(name: str) -> FactSheet:
    """The sheet ``adapters/facts/NAME.json`` (e.g. ``tgi-v3.3.7``): package data, read once."""
    raw = json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8"))
    rows = tuple(Fact(**r) for r in raw["rows"])
    bad = [r.key for r in rows if r.kind not in KINDS]
    if bad:
        raise ValueError(f"{name}.json: rows with an unknown kind: {', '.join(bad)}")
    return FactSheet(raw["framework"], raw["repo"], raw["tag"], rows)
