"""Token-length distributions of a workload (its input, output and session turn lengths)."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


# the longest length drawn (sampled lengths are clipped to it): 1M tokens is beyond any served context
MAX_LENGTH = 1 << 20


class LengthDist(BaseModel):
    """A token-length distribution. ``fixed``: value; ``uniform``: [min, max];
    ``normal``: mean/std; ``lognormal``: mean/std of the *lengths* (not of the log)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    dist: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    value: int | None = Field(None, gt=0, le=MAX_LENGTH)
    min: int | None = Field(None, gt=0, le=MAX_LENGTH)
    max: int | None = Field(None, gt=0, le=MAX_LENGTH)
    mean: float | None = Field(None, gt=0, le=MAX_LENGTH)
    std: float | None = Field(None, ge=0, le=MAX_LENGTH)

    @model_validator(mode="after")
    def _check(self) -> "LengthDist":
        need = {"fixed": ("value",), "uniform": ("min", "max"), "normal": ("mean", "std"),
                "lognormal": ("mean", "std")}[self.dist]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"length dist '{self.dist}' needs {', '.join(missing)}")
        if self.dist == "uniform" and self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("uniform length: min must be <= max")
        return self

    def upper(self) -> int:
        """The longest length :meth:`sample` can draw."""
        return self.value if self.dist == "fixed" and self.value else (self.max or MAX_LENGTH)

    def sample(self, rng: np.random.Generator, n: int) -> list[int]:
        lo = self.min or 1
        hi = self.max or MAX_LENGTH
        if self.dist == "fixed":
            out = np.full(n, self.value)
        elif self.dist == "uniform":
            out = rng.integers(lo, hi + 1, size=n)  # (both given: the check above; lo, hi are them)
        elif self.dist == "normal":
            out = np.rint(rng.normal(self.mean, self.std, size=n))
        else:
            # parametrise so that the lengths themselves have the given mean and std
            assert self.mean is not None  # (the check above: lognormal needs it)
            m, s = float(self.mean), float(self.std or 0.0)
            sigma2 = np.log1p((s / m) ** 2)
            out = np.rint(rng.lognormal(np.log(m) - sigma2 / 2, np.sqrt(sigma2), size=n))
        return [int(x) for x in np.clip(out, lo, hi)]
