"""One duration grammar (rag.core.durations) for key expiries, audit windows and source schedules: every form
any of the three read before still reads the same."""

from __future__ import annotations

import re

import pytest

from rag.core.durations import PATTERN, parse_duration
from rag.core.errors import BadRequestError


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("15m", 900), ("12h", 43200), ("30d", 30 * 86400), ("2w", 14 * 86400), ("1s", 1),
    (" 90 d ", 90 * 86400), ("90", 90), ("1.5h", 5400), ("2H", 7200), ("0000000001d", 86400), ("1e3", 1000)])
def test_a_duration_reads_as_seconds(text: str, seconds: float):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "d", "0d", "-5m", "0.5s", "inf", "nan", "1e400", "1e308w", "off"])
def test_what_is_not_a_duration_is_a_bad_request(text: str):
    with pytest.raises(BadRequestError, match="as an interval"):
        parse_duration(text, "an interval")


@pytest.mark.parametrize("text", ["off", "Never", " none "])
def test_off_reads_as_zero_where_it_is_allowed(text: str):
    assert parse_duration(text, allow_off=True) == 0.0


@pytest.mark.parametrize("text", ["90d", " 1 s ", "000000001w", "999999999m", "1.5h", "12H", "90", ".5d"])
def test_the_wire_pattern_takes_what_the_function_reads(text: str):
    assert re.match(PATTERN, text) and parse_duration(text) > 0


@pytest.mark.parametrize("text", ["off", "soon", "-1d", "1234567890d", "d", ""])
def test_the_wire_pattern_refuses_what_is_no_duration_or_too_long(text: str):
    assert not re.match(PATTERN, text)
