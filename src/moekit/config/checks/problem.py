"""What a check returns: one Problem (key, what is wrong, the override that fixes it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from moekit.config.schema import Config


class Problem(NamedTuple):
    """One thing wrong with a config: the key, what is wrong and the override that fixes it (may be empty)."""

    key: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.what}" + (f"\n    fix: {self.fix}" if self.fix else "")


Check = Callable[[Config], Iterator[Problem]]
