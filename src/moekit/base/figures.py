"""Measured figures as text with significant digits, never fixed decimals: a CPU's 0.004 TFLOP/s prints as 0.004,
not 0.0 (pure)."""

from __future__ import annotations

import math


def significant(x: float | None, digits: int = 3, missing: str = "-") -> str:
    """`x` with `digits` significant digits ('0.00412', '12.3', '4570'); whole numbers from 10**digits up keep every
    digit ('123456'); `missing` for None, NaN stays 'nan'."""
    if x is None:
        return missing
    if not math.isfinite(x) or x == 0:
        return str(x) if not math.isfinite(x) else "0"
    rounded = float(f"{x:.{digits}g}")  # 99.96 -> 100: its digits are counted after rounding
    if abs(rounded) >= 10 ** (digits - 1):
        return f"{x:.0f}"
    return f"{x:.{digits - 1 - math.floor(math.log10(abs(rounded)))}f}"
