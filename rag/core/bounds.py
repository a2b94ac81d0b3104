"""The bounds of a request's answer options, stated once: the answering and generation layers check them
(``AnswerOptions.validate``, ``SamplingOptions.validate``) and the API's request schemas state them (the same
numbers in the OpenAPI schema), so a value the HTTP schema lets through is one the service takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rag.core.errors import BadRequestError


@dataclass(frozen=True)
class Bound:
    name: str
    low: int | float
    high: int | float
    low_open: bool = False  # ``low`` itself is out of bounds

    def __contains__(self, value: int | float) -> bool:
        return (self.low < value if self.low_open else self.low <= value) and value <= self.high

    @property
    def message(self) -> str:
        if self.low_open:
            return f"{self.name} must be in ({self.low:g}, {self.high:g}]"
        return f"{self.name} must be between {self.low:g} and {self.high:g}"

    def check(self, value: int | float) -> None:
        """Raises BadRequestError (with ``message``) for a value out of bounds."""
        if value not in self:
            raise BadRequestError(self.message)

    def schema(self) -> dict[str, Any]:
        """As ``msgspec.Meta`` keywords."""
        return {"gt" if self.low_open else "ge": self.low, "le": self.high}


MAX_TOKENS = Bound("max_tokens", 1, 4096)  # new tokens per answer
TEMPERATURE = Bound("temperature", 0.0, 2.0)
TOP_P = Bound("top_p", 0.0, 1.0, low_open=True)
TOP_K = Bound("top_k", 1, 50)  # retrieval depth: chunks retrieved per question
TOP_K_SAMPLING = Bound("top_k_sampling", 0, 1000)  # sampling top-k (0: off)
