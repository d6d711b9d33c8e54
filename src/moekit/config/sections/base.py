"""The base of every config section, and the scalar a raw MaxText key holds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

Scalar = str | int | float | bool | None


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)
