"""``rag bench serve``: streaming load against any OpenAI-compatible ``/chat/completions``.

Remote models cannot be tokenised here, so a scenario's input size is approximated
by word count (about 0.75 words per token) and its output size is ``max_tokens``
(the server may stop earlier). Output tokens are taken from the final ``usage``
chunk when the server sends one (we ask with ``stream_options.include_usage``),
else counted as content chunks. Inter-token latency is the gap between content
chunks. Only the given base URL is contacted (``/chat/completions`` and, when no
model is named, ``/models``); proxies from the environment are not used.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import httpx

from app.bench.engine import NEUTRAL_TEXT
from app.bench.stats import summarise

SCENARIOS: dict[str, tuple[int, int]] = {  # name: (input tokens, output tokens)
    "chatbot": (128, 128),
    "generation": (128, 2048),
    "summarization": (2048, 128),
    "long": (2048, 2048),
}
WORDS_PER_TOKEN = 0.75
LATENCY_PERCENTILES = (50, 90, 95, 99)


# --------------------------------------------------------------------------- SSE
@dataclass(frozen=True)
class SSEEvent:
    done: bool = False  # the ``[DONE]`` sentinel
    data: Any = None  # the decoded JSON payload otherwise


def parse_sse_line(line: str) -> SSEEvent | None:
    """One line of an SSE stream: a ``data:`` event, or None (blank line, comment, other field, non-JSON)."""
    line = line.rstrip("\r\n")
    if not line.startswith("data:"):
        return None  # "", ": keep-alive", "event: ...", "id: ...", "retry: ..."
    payload = line[5:]
    if payload.startswith(" "):
        payload = payload[1:]
    if payload.strip() == "[DONE]":
        return SSEEvent(done=True)
    try:
        return SSEEvent(data=json.loads(payload))
    except ValueError:
        return None


def chunk_fields(data: Any) -> tuple[str, int | None, str | None]:
    """(content text, completion tokens from ``usage`` or None, error message or None) of one chunk."""
    if not isinstance(data, dict):
        return "", None, None
    error = data.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else str(error)
        return "", None, str(message or error)
    text = ""
    for choice in data.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")  # chat | completions
        if isinstance(piece, str):
            text += piece
    usage = data.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return text, (int(tokens) if isinstance(tokens, (int, float)) else None), None


# --------------------------------------------------------------------------- requests
def synthetic_prompt(input_tokens: int, output_tokens: int, variant: int = 0) -> str:
    """A user message of about ``input_tokens`` tokens (by word count); ``variant`` rotates the text."""
    if output_tokens > input_tokens:
        instruction = ("Continue the following description of a small town at length, adding new details "
                       "about its people, places and history:")
    else:
        instruction = "Summarise the following description of a small town in a few sentences:"
    words = NEUTRAL_TEXT.split()
    budget = max(1, round(input_tokens * WORDS_PER_TOKEN) - len(instruction.split()))
    offset = (variant * 37) % len(words)  # different text per request defeats naive prefix caches
    body = [words[(offset + i) % len(words)] for i in range(budget)]
    return instruction + "\n\n" + " ".join(body)


def request_body(model: str | None, prompt: str, max_tokens: int, no_retrieval: bool) -> dict:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "stream": True,
                            "max_tokens": max_tokens, "temperature": 0,
                            "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    if no_retrieval:
        body["use_context"] = False  # this project's server: plain chat; foreign servers never see it
    return body


@dataclass
class RequestRecord:
    start: float
    end: float = 0.0
    status: int | None = None
    outcome: str = "error"  # ok | error | shed | timeout
    error: str | None = None
    chunk_times: list[float] = field(default_factory=list)  # arrival of each non-empty content chunk
    usage_tokens: int | None = None
    done: bool = False


def request_metrics(record: RequestRecord, origin: float | None = None) -> dict:
    """Per-request figures (seconds in, milliseconds out); a pure function of the record.

    ``origin`` (the level's start) gives ``start_s``, when the request was sent relative to it.
    """
    times = record.chunk_times
    e2e = record.end - record.start
    tokens = record.usage_tokens if record.usage_tokens is not None else len(times)
    ttft = times[0] - record.start if times else None
    tpot = (e2e - ttft) / (tokens - 1) if ttft is not None and tokens > 1 else None
    return {"outcome": record.outcome, "status": record.status,
            "start_s": None if origin is None else round(record.start - origin, 6),
            "ttft_ms": ms(ttft), "e2e_ms": ms(e2e),
            "tpot_ms": ms(tpot), "itl_ms": [round((b - a) * 1000, 3) for a, b in zip(times, times[1:])],
            "output_tokens": tokens, "chunks": len(times),
            "token_source": "usage" if record.usage_tokens is not None else "chunks",
            "tokens_per_s": round(tokens / e2e, 3) if e2e > 0 else None, "error": record.error}


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def summarise_level(scenario: str, concurrency: int, metrics: Sequence[dict], wall_s: float) -> dict:
    """One result row: outcome counts, throughput and latency percentiles over the successful requests."""
    ok = [m for m in metrics if m["outcome"] == "ok"]
    row: dict[str, Any] = {
        "scenario": scenario, "concurrency": concurrency, "requests": len(metrics), "ok": len(ok),
        "errors": sum(m["outcome"] == "error" for m in metrics), "shed": sum(m["outcome"] == "shed" for m in metrics),
        "timeouts": sum(m["outcome"] == "timeout" for m in metrics), "wall_s": round(wall_s, 3),
        "requests_per_s": round(len(ok) / wall_s, 3) if wall_s > 0 else None,
        "output_tokens": sum(m["output_tokens"] for m in ok),
        "aggregate_tokens_per_s": round(sum(m["output_tokens"] for m in ok) / wall_s, 3) if wall_s > 0 else None,
        "token_source": "/".join(sorted({m["token_source"] for m in ok})) or None,
    }
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        values = [v for m in ok for v in (m[key] if key == "itl_ms" else [m[key]])]
        stats = summarise(values, LATENCY_PERCENTILES, prefix=key)
        stats.pop(f"{key}_min"), stats.pop(f"{key}_max")
        row.update(stats)
    stats = summarise([m["tokens_per_s"] for m in ok], (50,), prefix="request_tokens_per_s")
    row.update({k: v for k, v in stats.items() if k.endswith(("_mean", "_p50"))})
    return row


async def one_request(client: Any, endpoint: str, body: dict, timeout_s: float) -> RequestRecord:
    record = RequestRecord(start=time.perf_counter())

    async def stream() -> None:
        async with client.stream("POST", endpoint, json=body) as response:
            record.status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", errors="replace")
                record.outcome = "shed" if response.status_code == 503 else "error"
                record.error = f"HTTP {response.status_code}: {text[:200]}"
                return
            async for line in response.aiter_lines():
                event = parse_sse_line(line)
                if event is None:
                    continue
                if event.done:
                    record.done = True
                    break
                text, tokens, error = chunk_fields(event.data)
                if error:
                    record.outcome, record.error = "error", f"stream error: {error}"
                    return
                if text:
                    record.chunk_times.append(time.perf_counter())
                if tokens is not None:
                    record.usage_tokens = tokens
            record.outcome = "ok"

    try:
        await asyncio.wait_for(stream(), timeout_s)
    except (asyncio.TimeoutError, httpx.TimeoutException):
        record.outcome, record.error = "timeout", f"no complete answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        record.outcome, record.error = "error", f"{type(exc).__name__}: {exc}"
    record.end = time.perf_counter()
    return record


def make_client(concurrency: int, timeout_s: float, api_key: str | None) -> Any:
    headers = {"Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)), headers=headers, trust_env=False,
        follow_redirects=False,
        limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency))


async def run_level(url: str, model: str | None, scenario: str, input_tokens: int, output_tokens: int,
                    concurrency: int, requests: int | None, duration_s: float | None, timeout_s: float,
                    api_key: str | None, no_retrieval: bool) -> tuple[dict, list[dict]]:
    """C workers share one client; duration mode: loop until the deadline; requests mode: N in total."""
    endpoint = url.rstrip("/") + "/chat/completions"
    records: list[RequestRecord] = []
    issued = 0
    async with make_client(concurrency, timeout_s, api_key) as client:
        start = time.perf_counter()
        deadline = start + duration_s if duration_s is not None else None

        async def worker() -> None:
            nonlocal issued
            while True:
                if deadline is None and issued >= (requests or 0):
                    return
                number = issued
                issued += 1
                body = request_body(model, synthetic_prompt(input_tokens, output_tokens, number), output_tokens,
                                    no_retrieval)
                # Checked after building the body, right before sending (one_request stamps its start before
                # its first await), so no request starts after the deadline.
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                records.append(await one_request(client, endpoint, body, timeout_s))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    metrics = [request_metrics(r, start) for r in records]
    return summarise_level(scenario, concurrency, metrics, wall), metrics


async def discover_model(url: str, api_key: str | None, timeout_s: float) -> str | None:
    """The first model id from ``GET {url}/models``, or None if the server does not say."""
    async with make_client(1, min(timeout_s, 10.0), api_key) as client:
        try:
            response = await client.get(url.rstrip("/") + "/models")
            data = response.json().get("data") if response.status_code == 200 else None
            return str(data[0]["id"]) if data else None
        except (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            return None


def bench_serve(url: str, model: str | None, scenarios: Sequence[str], concurrency: Sequence[int],
                requests: int | None, duration_s: float | None, max_output: int | None, timeout_s: float,
                api_key: str | None, no_retrieval: bool, progress: Callable[[str], None] = lambda m: None,
                warn: Callable[[str], None] = lambda m: None) -> dict:
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if model is None:
        model = asyncio.run(discover_model(url, api_key, timeout_s))
        if model is None:
            warn(f"{url}/models named no model; sending requests without a model field (use --model)")
    rows, samples = [], []
    for scenario in scenarios:
        input_tokens, output_tokens = SCENARIOS[scenario]
        if max_output:
            output_tokens = min(output_tokens, max_output)
        for c in concurrency:
            n = None if duration_s is not None else (requests or 4 * c)
            progress(f"{scenario} × {c}: " + (f"{duration_s:g} s" if duration_s is not None else f"{n} requests"))
            row, metrics = asyncio.run(run_level(url, model, scenario, input_tokens, output_tokens, c, n,
                                                 duration_s, timeout_s, api_key, no_retrieval))
            row.update(input_tokens_approx=input_tokens, max_output_tokens=output_tokens)
            rows.append(row)
            samples.extend({"scenario": scenario, "concurrency": c, **m} for m in metrics)
            failed = [m for m in metrics if m["outcome"] != "ok"]
            if failed:
                warn(f"{scenario} × {c}: {len(failed)} request(s) failed, first: {failed[0]['error']}")
            if row["ok"] and not row["output_tokens"]:
                warn(f"{scenario} × {c}: the server generated no tokens (a RAG server may have abstained for "
                     f"lack of evidence; this project's server chats without retrieval with --no-retrieval)")
    return {"benchmark": "serve", "model": model, "results": rows, "samples": samples}
