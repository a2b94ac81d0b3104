"""``rag bench``: the generation engine, any OpenAI-compatible server, the RAG pipeline.

Modules: ``stats`` (percentiles and summaries), ``environment`` (what a result was
measured on), ``engine`` (in-process ``LocalGenerator`` at exact prompt lengths),
``serve`` (streaming load generator for ``/chat/completions`` with an SSE parser),
``pipeline`` (per-stage RAG latency), ``report`` (tables, JSON, CSV, PNG).
Each benchmark returns one plain dict: ``benchmark``, ``environment``, ``config``,
``results`` (flat rows, the CSV), plus its own extras; heavy imports stay lazy.
"""

from app.bench.stats import parse_int_list, percentile, summarise

__all__ = ["parse_int_list", "percentile", "summarise"]
