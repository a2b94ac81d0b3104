"""Generation on an OpenAI-compatible server (setting ``generator_url``): vLLM, llama.cpp server, Ollama,
or another ``rag serve``.

``RemoteGenerator`` implements the ``Generator`` interface over streamed ``POST /chat/completions``: it sends
the messages the answering layer built (same compression, citations and abstention as with the local
model), reads the server-sent events as they come, and records TTFT and output tokens from the stream.
Closing the iterator (a client that went away) closes the upstream connection, which cancels the upstream
generation. Failures become clear errors: unreachable or overloaded (503), timed out (504), anything else
the upstream answers that is not a completion stream (502).

Token counts (context budget, question length) come from a ``tokenizer.json``: the remote model's own
(``generator_tokenizer``) counts exactly; without it the embedder's tokenizer is used, an approximation
(within a few percent of the default generator's counts on English text, see docs/scaling.md, "Scaling out").
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import numpy as np

from rag.core import observe
from rag.core.errors import (BadRequestError, ConfigError, UpstreamError, UpstreamTimeout, UpstreamUnavailable)
from rag.core.text import public_host, without_credentials
from rag.generation.base import GenerationStats, Message, Prompt, SamplingOptions
from rag.generation.stopping import StopMatcher

log = logging.getLogger(__name__)
# Chat-template tokens around each message (role markers, separators) and before the reply; the exact
# number depends on the model's template, so this is part of the approximation.
TEMPLATE_TOKENS_PER_MESSAGE = 4
TEMPLATE_TOKENS_REPLY = 3
MESSAGE_CHARS = 500  # of an upstream error body, in our error message


class TokenCounter:
    """Counts tokens with a ``tokenizers`` tokenizer.json (no special tokens, no truncation)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    @classmethod
    def from_file(cls, path: Path) -> "TokenCounter":
        from tokenizers import Tokenizer  # lazy: only a remote generator that counts tokens locally needs it

        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises untyped errors
            raise ConfigError(f"cannot read the tokenizer {path}: {exc}") from exc
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return cls(tokenizer)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int32)

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def upstream_message(status: int, body: bytes) -> str:
    """The error an upstream answered with, in a few words: its ``error.message`` when it sent JSON."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
        error = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(error, dict):
            text = str(error.get("message") or error.get("detail") or error)
        elif error:
            text = str(error)
    except ValueError:
        pass
    return f"HTTP {status}: {text[:MESSAGE_CHARS] or 'no body'}"


def status_error(status: int, body: bytes, where: str) -> UpstreamError:
    message = f"the generator at {where} answered {upstream_message(status, body)}"
    if status in (429, 502, 503):
        return UpstreamUnavailable(message)
    if status in (408, 504):
        return UpstreamTimeout(message)
    return UpstreamError(message)


class RemoteGenerator:
    """An OpenAI-compatible ``/chat/completions`` server as the ``Generator``."""

    device = "remote"
    remote = True

    def __init__(self, url: str, counter: TokenCounter, model: str | None = None, api_key: str | None = None,
                 timeout_s: float = 60.0, context_length: int = 2048, extra_body: str | dict = "{}") -> None:
        self.url = url.rstrip("/")
        self.host = public_host(self.url)  # what messages and /healthz show: never user:password@
        self.counter = counter
        self.context_length = context_length
        self.timeout_s = timeout_s
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        extra = json.loads(extra_body) if isinstance(extra_body, str) else dict(extra_body)
        if not isinstance(extra, dict):
            raise ConfigError("generator_extra_body must be a JSON object")
        self.extra_body: dict[str, Any] = extra

    @property
    def model_id(self) -> str:
        return self._model or "remote"

    # ------------------------------------------------------------------ tokens
    def count_tokens(self, text: str) -> int:
        return self.counter.count(text)

    def encode(self, text: str) -> np.ndarray:
        """Token ids by the counting tokenizer (the copy bias is a local logits step; a remote server ignores it)."""
        return self.counter.encode(text)

    def prompt(self, messages: Sequence[Message]) -> Prompt:
        tokens = np.concatenate([self.counter.encode(m["content"]) for m in messages] or [np.zeros(0, np.int32)])
        length = len(tokens) + TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + TEMPLATE_TOKENS_REPLY
        if length >= self.context_length:
            raise BadRequestError(f"the prompt (about {length} tokens) does not fit the remote model's "
                                  f"{self.context_length}-token context (setting generator_context)")
        padded = np.zeros(length, dtype=np.int32)  # the count is what matters: the server tokenises itself
        padded[:len(tokens)] = tokens
        return Prompt(tuple(messages), padded)

    # ------------------------------------------------------------------ generation
    def _client(self):
        import httpx  # lazy: keeps rag --help fast (httpx: ~0.2 s)

        return httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s), headers=self._headers)

    async def _resolve_model(self, client) -> str:
        """The model to ask for: the setting, else the first the server lists under /models."""
        if self._model is None:
            async with self._errors():
                response = await client.get(f"{self.url}/models")
            if response.status_code >= 400:
                raise status_error(response.status_code, response.content, self.host)
            try:
                self._model = str(response.json()["data"][0]["id"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise UpstreamError(f"the generator at {self.host} lists no model under /models; "
                                    "set generator_model") from exc
        return self._model

    def warm_up(self) -> None:
        """Learn the model name now if the server is up (a server started before its upstream learns it on
        the first request instead)."""
        if self._model is not None:
            return
        import httpx  # lazy: keeps rag --help fast (httpx: ~0.2 s)

        try:
            response = httpx.get(f"{self.url}/models", headers=self._headers, timeout=min(self.timeout_s, 10.0))
            self._model = str(response.json()["data"][0]["id"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            log.warning("the generator at %s did not list its models yet (%s); asking again on the first request",
                        self.host, without_credentials(str(exc), self.url))

    def request_body(self, model: str, messages: Sequence[Message], options: SamplingOptions) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model, "messages": list(messages), "stream": True, "max_tokens": options.max_tokens,
            "temperature": options.temperature, "top_p": options.top_p,
            "stream_options": {"include_usage": True}, **self.extra_body}
        if options.stop:
            body["stop"] = list(options.stop)
        if options.top_k_sampling:
            body["top_k"] = options.top_k_sampling
        return body

    def _errors(self) -> "_TransportErrors":
        return _TransportErrors(self.host, self.timeout_s, self.url)

    async def stream(self, prompt: Prompt, options: SamplingOptions, stats: GenerationStats) -> AsyncIterator[str]:
        """Text pieces as the server streams them; fills ``stats``. Closing the iterator closes the upstream
        stream (the server cancels the generation)."""
        started = time.perf_counter()
        stats.prompt_tokens, stats.finish_reason = prompt.length, "length"
        stop = StopMatcher(options.stop) if options.stop else None
        pieces = 0
        client = self._client()
        try:
            model = await self._resolve_model(client)
            body = self.request_body(model, prompt.messages, options)
            async with self._errors():
                async with client.stream("POST", f"{self.url}/chat/completions", json=body,
                                         headers=observe.trace_headers()) as response:
                    if response.status_code >= 400:
                        raise status_error(response.status_code, await response.aread(), self.host)
                    if response.headers.get("content-type", "").startswith("application/json"):
                        events = _whole_reply(json.loads(await response.aread() or b"null"), self.host)
                    else:
                        events = _sse_events(response.aiter_lines(), self.host)
                    ended = False
                    async for event in events:
                        content, finish, usage = _read_event(event, self.host)
                        if content:
                            pieces += 1
                            if pieces == 1:
                                stats.ttft_s = time.perf_counter() - started
                            piece = stop.feed(content) if stop is not None else content
                            if piece:
                                yield piece
                            if stop is not None and stop.stopped:
                                stats.finish_reason, ended = "stop", True
                                break
                        if finish:
                            stats.finish_reason, ended = ("length" if finish == "length" else "stop"), True
                        if usage:
                            stats.output_tokens = int(usage.get("completion_tokens") or 0)
                            details = usage.get("prompt_tokens_details") or {}
                            stats.prompt_tokens = int(usage.get("prompt_tokens") or stats.prompt_tokens)
                            stats.cached_tokens = int(details.get("cached_tokens") or 0)
                    if not ended:
                        raise UpstreamError(f"the generator at {self.host} ended its stream without finishing "
                                            "the reply (no finish_reason)")
            if stop is not None and not stop.stopped:
                rest = stop.flush()
                if rest:
                    yield rest
        except GeneratorExit:
            stats.finish_reason = "cancelled"
            raise
        finally:
            stats.output_tokens = stats.output_tokens or pieces
            stats.total_s = time.perf_counter() - started
            await client.aclose()


class _TransportErrors:
    """Maps httpx transport failures to the upstream errors (an async context manager)."""

    def __init__(self, host: str, timeout_s: float, url: str = "") -> None:
        self.host = host
        self.timeout_s = timeout_s
        self.url = url  # its credentials never reach a message

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        import httpx  # lazy: keeps rag --help fast (httpx: ~0.2 s)

        if exc is None or not isinstance(exc, httpx.HTTPError):
            return False
        if isinstance(exc, httpx.TimeoutException):
            raise UpstreamTimeout(f"the generator at {self.host} did not answer within {self.timeout_s:g} s "
                                  "(setting generator_timeout_s)") from exc
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            raise UpstreamUnavailable(without_credentials(f"cannot reach the generator at {self.host}: {exc}",
                                                          self.url)) from exc
        raise UpstreamError(without_credentials(f"the connection to the generator at {self.host} failed: {exc!r}",
                                                self.url)) from exc


async def _sse_events(lines: AsyncIterator[str], host: str) -> AsyncIterator[dict]:
    async for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, comments (": ping"), event names
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise UpstreamError(f"the generator at {host} sent an unreadable event: {data[:80]!r}") from exc
        if not isinstance(event, dict):
            raise UpstreamError(f"the generator at {host} sent an unreadable event: {data[:80]!r}")
        yield event


async def _whole_reply(body: Any, host: str) -> AsyncIterator[dict]:
    """A server that ignored ``stream: true`` and sent one JSON completion: read it as a single event."""
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise UpstreamError(f"the generator at {host} answered JSON that is not a chat completion")
    choices = [{"delta": {"content": (c.get("message") or {}).get("content")}, "finish_reason": c.get("finish_reason")}
               for c in body["choices"] if isinstance(c, dict)]
    yield {"choices": choices, "usage": body.get("usage")}


def _read_event(event: dict, host: str) -> tuple[str, str | None, dict | None]:
    """(content, finish_reason, usage) of one stream event; an error event or a malformed one raises."""
    if "error" in event:
        error = event["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise UpstreamError(f"the generator at {host} failed mid-stream: {str(message)[:MESSAGE_CHARS]}")
    choices = event.get("choices")
    usage = event.get("usage") if isinstance(event.get("usage"), dict) else None
    if not isinstance(choices, list):
        raise UpstreamError(f"the generator at {host} sent an event without choices")
    content, finish = "", None
    for choice in choices[:1]:
        if not isinstance(choice, dict):
            raise UpstreamError(f"the generator at {host} sent a malformed choice")
        delta = choice.get("delta") or {}
        text = delta.get("content") if isinstance(delta, dict) else None
        if text is not None and not isinstance(text, str):
            raise UpstreamError(f"the generator at {host} sent non-text content")
        content, finish = text or "", choice.get("finish_reason")
    return content, finish, usage
