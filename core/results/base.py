"""The two kinds of results model every section derives from: closed (an unknown key is an error:
the layout drifted) and open (unknown keys kept: an older or newer writer's extra)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Closed(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Open(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")
