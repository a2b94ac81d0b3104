"""Durations as people write them: "90s", "15m", "12h", "30d", "2w" (a bare number is seconds). One grammar for
key expiries (``rag keys create --expires``, ``POST /v1/keys``), audit windows (``rag audit show --since``) and
source schedules (``rag sources add --every``, where "off" means no schedule)."""

from __future__ import annotations

import math

from rag.core.errors import BadRequestError

UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
OFF = ("off", "never", "none")  # no schedule (where the caller allows it)
# The grammar as a JSON-schema pattern, for request schemas: a number (up to 9 digits, leading zeros aside),
# then a unit; ``parse_duration`` reads every string it matches (and a few more: "1e3", "1_000s").
PATTERN = r"^\s*0*([0-9]{1,9}(\.[0-9]*)?|\.[0-9]+)\s*[smhdwSMHDW]?\s*$"


def parse_duration(text: str, what: str = "a duration", allow_off: bool = False) -> float:
    """Seconds in ``text``: a positive number of at least one second, then an optional unit (s, m, h, d, w;
    none: seconds), letter case and spaces aside. ``allow_off``: "off", "never" or "none" read as 0. ``what``
    names the value in the error (e.g. "an interval")."""
    value = text.strip().lower()
    if allow_off and value in OFF:
        return 0.0
    unit = value[-1:] if value[-1:] in UNIT_S else "s"
    number = value[:-1] if value[-1:] in UNIT_S else value
    try:
        seconds = float(number) * UNIT_S[unit]
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 1:
        off = "; off: none" if allow_off else ""
        raise BadRequestError(f"cannot read {text!r} as {what}: use a positive number of at least one second and "
                              f"a unit (s, m, h, d, w), e.g. 90s, 15m, 2h, 30d{off}")
    return seconds
