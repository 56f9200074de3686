"""Sizes in bytes as users write them: ``3GiB``, ``512MiB``, ``2000000000``."""

from __future__ import annotations

import math

# An exbibyte: far above any machine's memory or disk; a larger size is a typo, not a plan.
MAX_BYTES = 2**60


def parse_size(text: str, allow_zero: bool = False) -> int:
    """``"3GiB"``, ``"512MiB"``, ``"2000000000"`` → bytes (``0GiB`` only with ``allow_zero``)."""
    units = {
        "kib": 2**10,
        "mib": 2**20,
        "gib": 2**30,
        "tib": 2**40,
        "kb": 10**3,
        "mb": 10**6,
        "gb": 10**9,
        "b": 1,
    }
    lowered = text.strip().lower()
    unit = next((u for u in units if lowered.endswith(u)), "")
    number, factor = (lowered[: -len(unit)], units[unit]) if unit else (lowered, 1)
    try:
        value = float(number) * factor
    except ValueError:
        raise ValueError(f"{text!r} is not a size such as 3GiB or 512MiB") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"must be positive, got {text}")
    if value > MAX_BYTES:
        raise ValueError(f"{text!r} is more than {MAX_BYTES} bytes")
    if 0 < value < 1:  # "0.5b" is not "no limit"
        raise ValueError(f"{text!r} is less than one byte")
    return int(value)
