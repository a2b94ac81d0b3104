"""Schemathesis hooks for fuzzing the API (tests/test_fuzz.py, and the long run described in docs/api.md, "Fuzzing").

Load them with ``SCHEMATHESIS_HOOKS=tests.fuzz_hooks`` (run from the repository root).
"""

from __future__ import annotations

from typing import Any

import schemathesis

# Valid ``max_tokens`` values above this are lowered to it before the request is sent, so a fuzzed request
# that reaches generation stays short on a CPU (the server runs with RAG_MAX_TOKENS=4 for requests that
# leave it out). Out-of-range values (0, 5000, "x") are sent as generated: they must still be refused.
GENERATION_CAP = 4
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    body = case.body
    if isinstance(body, dict):
        for name in TOKEN_FIELDS:
            value = body.get(name)
            if type(value) in (int, float) and GENERATION_CAP < value <= 4096 and float(value).is_integer():
                body[name] = GENERATION_CAP
