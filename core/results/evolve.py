"""Changing a frozen results model: a validated copy with some fields replaced."""
from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def evolve(m: M, **changes: Any) -> M:
    """``m`` with ``changes``, validated (a ``model_copy(update=...)`` that checks what it is given:
    a dict for a typed field becomes that model, a wrong type fails here, not at the next write).
    Fields ``m`` had set stay set and unset ones stay unset, so what is written keeps its layout;
    nested models already of the right type are taken as they are, without another validation."""
    data = {k: v for k, v in m if k in m.model_fields_set}
    data.update(changes)
    return type(m).model_validate(data)
