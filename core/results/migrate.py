"""Older run.json layouts -> the current models.

Schema 1 (untyped dicts) had the layout that schema 2 declares, so its files are read as they
are. A schema-1 file that does not fit the models (a field that older writers produced and no
reader understands any more) is refused with the version that wrote it and how to re-render it.
"""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from core.errors import UserError
from core.results.models import SCHEMA_VERSION, RunResults

READABLE = (1, SCHEMA_VERSION)


def first_problem(e: ValidationError, model: Any = RunResults) -> str:
    """The first thing ``model`` refused: the field, the value and what is allowed."""
    from core.shape import first_problem as shape_problem

    return str(shape_problem(e, model))


def writer_version(run: dict[str, Any]) -> str | None:
    """The llm-compare version that wrote a run, when its hardware fingerprint recorded it."""
    hw = run.get("hardware")
    pkgs = hw.get("packages") if isinstance(hw, dict) else None
    version = pkgs.get("llm-compare") if isinstance(pkgs, dict) else None
    return str(version) if version else None


def from_v1(run: dict[str, Any], where: str = "run.json") -> RunResults:
    try:
        return RunResults.model_validate({**run, "schema_version": SCHEMA_VERSION})
    except ValidationError as e:
        ver = writer_version(run)
        how = (f"re-render them with llm-compare {ver} (`pip install llm-compare=={ver}`, then `compare report "
               f"DIR`)" if ver else "re-render them with the llm-compare release that wrote them (`compare "
               "report DIR`)")
        raise UserError(f"{where}: schema-1 results written by llm-compare {ver or '(version not recorded)'} "
                        f"cannot be migrated ({first_problem(e)}); {how} or re-run them") from None


def _newer_writer(run: dict[str, Any]) -> str | None:
    """The writer's version when it is newer than this llm-compare (its files may hold what this
    one does not know)."""
    ver = writer_version(run)
    if not ver:
        return None
    try:
        from importlib.metadata import version

        from packaging.version import Version

        mine = version("llm-compare")
        return ver if Version(ver) > Version(mine) else None
    except (ImportError, ValueError):  # no package metadata or packaging here, an odd version: cannot tell
        return None


def to_current(run: Any, where: str = "run.json") -> RunResults:
    """A run.json document of any readable schema version as ``RunResults`` (UserError if not)."""
    if not isinstance(run, dict):
        raise UserError(f"{where}: not a run.json object; pass a results directory written by `compare run`")
    version = run.get("schema_version")
    if version == 1:
        return from_v1(run, where)
    newer = _newer_writer(run)
    upgrade = (f"; it was written by llm-compare {newer}, newer than this one: upgrade (`pip install -U "
               f"llm-compare`) or re-render it with that version" if newer else "")
    if version != SCHEMA_VERSION:
        raise UserError(f"{where}: schema_version {version} is not one this llm-compare reads "
                        f"({', '.join(map(str, READABLE))})"
                        + (upgrade or "; re-render it with the llm-compare that wrote it"))
    try:
        return RunResults.model_validate(run)
    except ValidationError as e:
        raise UserError(f"{where}: not a valid schema-{SCHEMA_VERSION} run.json ({first_problem(e)})"
                        + (upgrade or "; pass a results directory written by `compare run`")) from None
