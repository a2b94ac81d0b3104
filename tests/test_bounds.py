"""Request bounds live in rag.core.bounds: the service's checks and the API's schema state the same numbers."""

from __future__ import annotations

import msgspec
import pytest

from api.protocol import AskRequest, ChatCompletionRequest
from rag.answering.service import AnswerOptions
from rag.core import bounds
from rag.core.errors import BadRequestError
from rag.generation.base import SamplingOptions


def test_the_api_schema_states_the_bounds_the_service_checks():
    ask = msgspec.json.schema(AskRequest)["$defs"]["AskRequest"]["properties"]
    chat = msgspec.json.schema(ChatCompletionRequest)["$defs"]["ChatCompletionRequest"]["properties"]
    for field, bound in (("top_k", bounds.TOP_K), ("max_tokens", bounds.MAX_TOKENS),
                         ("temperature", bounds.TEMPERATURE), ("top_k_sampling", bounds.TOP_K_SAMPLING)):
        schema = ask[field]["anyOf"][0]
        assert (schema["minimum"], schema["maximum"]) == (bound.low, bound.high), field
    top_p = chat["top_p"]["anyOf"][0]
    assert (top_p["exclusiveMinimum"], top_p["maximum"]) == (0.0, 1.0)


@pytest.mark.parametrize("options, message", [
    (AnswerOptions(top_k=51), "top_k must be between 1 and 50"),
    (AnswerOptions(top_k=0), "top_k must be between 1 and 50"),
    (AnswerOptions(sampling=SamplingOptions(max_tokens=4097)), "max_tokens must be between 1 and 4096"),
    (AnswerOptions(sampling=SamplingOptions(temperature=2.5)), "temperature must be between 0 and 2"),
    (AnswerOptions(sampling=SamplingOptions(top_p=0.0)), r"top_p must be in \(0, 1\]"),
    (AnswerOptions(sampling=SamplingOptions(top_k_sampling=1001)), "top_k_sampling must be between 0 and 1000")])
def test_a_value_out_of_bounds_is_refused_as_before(options: AnswerOptions, message: str):
    with pytest.raises(BadRequestError, match=message):
        options.validate()


def test_the_edges_are_inside():
    AnswerOptions(top_k=50, sampling=SamplingOptions(max_tokens=4096, temperature=2.0, top_p=1.0,
                                                     top_k_sampling=1000)).validate()
    AnswerOptions(top_k=1, sampling=SamplingOptions(max_tokens=1, temperature=0.0, top_k_sampling=0)).validate()
