"""Pure statistics helpers (no numpy needed, so they are cheap to import and to test)."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

DEFAULT_PERCENTILES = (50, 90, 95, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation (numpy's default); None when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], not {q}")
    data = sorted(float(v) for v in values)
    if not data:
        return None
    position = (len(data) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(values: Iterable[float | None], percentiles: Sequence[float] = DEFAULT_PERCENTILES,
              prefix: str = "", digits: int | None = 3) -> dict[str, float | int | None]:
    """``{prefix_n, prefix_mean, prefix_min, prefix_max, prefix_p50, ...}`` over the non-None values.

    Empty input gives ``n = 0`` and None everywhere else (a missing figure, not a zero).
    """
    data = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    key = (lambda name: f"{prefix}_{name}") if prefix else (lambda name: name)

    def rounded(value: float | None) -> float | None:
        return None if value is None or digits is None else round(value, digits)

    out: dict[str, float | int | None] = {key("n"): len(data), key("mean"): rounded(mean(data)),
                                          key("min"): rounded(min(data)) if data else None,
                                          key("max"): rounded(max(data)) if data else None}
    for q in percentiles:
        out[key(f"p{q:g}")] = rounded(percentile(data, q))
    return out


def parse_int_list(text: str, minimum: int = 1) -> list[int]:
    """``"1, 5,10"`` -> ``[1, 5, 10]``; raises ValueError on anything else (empty, non-integer, < minimum)."""
    items = [part.strip() for part in str(text).split(",") if part.strip()]
    if not items:
        raise ValueError("expected a comma-separated list of integers")
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise ValueError(f"{item!r} is not an integer") from None
        if value < minimum:
            raise ValueError(f"{value} is smaller than {minimum}")
        values.append(value)
    return values
