"""ONNX sentence embedder (an encoder, pooling + normalisation from its config).

One implementation serves documents (batched, sorted by length to cut padding) and queries. A model trained
with task prompts (EmbeddingGemma: "task: search result | query: " before a question, "title: none | text: "
before a passage) names them in its config; ``embed`` writes the document one, ``embed_queries`` the query one.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from rag.core.errors import ModelError
from rag.core.settings import resolve_threads

EMBEDDER_FILES = ("model.onnx", "tokenizer.json", "embedder.json")


@dataclass(frozen=True)
class EmbedderConfig:
    name: str
    precision: str
    dimension: int
    pooling: str
    normalize: bool
    max_length: int
    inputs: tuple[str, ...]
    output: str
    query_prefix: str = ""
    document_prefix: str = ""
    languages: str = "en"  # what it was trained on, as `rag info` says it: "en" or "multilingual"

    @property
    def identity(self) -> str:
        """What an index records: vectors from another identity are not comparable."""
        return f"{self.name}@{self.dimension}"


def validate_embedder_dir(path: Path) -> EmbedderConfig:
    if not path.is_dir():
        raise ModelError(f"embedder dir {path} does not exist; run `rag models prepare` or set RAG_EMBEDDER_DIR")
    missing = [name for name in EMBEDDER_FILES if not (path / name).is_file()]
    if missing:
        raise ModelError(f"embedder dir {path} is missing {', '.join(missing)}")
    try:
        raw = json.loads((path / "embedder.json").read_text(encoding="utf-8"))
        config = EmbedderConfig(
            name=str(raw["name"]), precision=str(raw.get("precision", "fp32")), dimension=int(raw["dimension"]),
            pooling=str(raw.get("pooling", "mean")), normalize=bool(raw.get("normalize", True)),
            max_length=int(raw.get("max_length", 256)),
            inputs=tuple(raw.get("inputs", ("input_ids", "attention_mask", "token_type_ids"))),
            output=str(raw.get("output", "last_hidden_state")),
            query_prefix=str(raw.get("query_prefix", "")), document_prefix=str(raw.get("document_prefix", "")),
            languages=str(raw.get("languages", "en")),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{path / 'embedder.json'} is invalid: {exc}") from exc
    if config.pooling not in ("mean", "cls", "none"):
        raise ModelError(f"{path / 'embedder.json'}: pooling {config.pooling!r} is not 'mean', 'cls' or 'none' "
                         "(the model's output is the sentence vector)")
    return config


class Embedder:
    """Batches run side by side, one core each: for this small encoder that beat one batch at a time on
    every core (all-MiniLM int8, 2 cores: 82-86 vs 67-81 chunks/s, interleaved runs; docs/performance.md, "Growth")."""

    def __init__(self, path: Path, threads: int = 0, batch_size: int = 4) -> None:
        # lazy: keeps rag --help fast (onnxruntime with numpy: ~0.35 s of a CLI start)
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.path = path
        self.config = validate_embedder_dir(path)
        self.batch_size = max(1, batch_size)
        self.workers = resolve_threads(threads)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._session = ort.InferenceSession(str(path / "model.onnx"), options, providers=["CPUExecutionProvider"])
            self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise ModelError(f"cannot load embedder from {path}: {exc}") from exc
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.config.max_length)
        self._input_names = {i.name for i in self._session.get_inputs()}

    @property
    def dimension(self) -> int:
        return self.config.dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages (chunks, sentences) in length-sorted batches; rows come back in input order."""
        return self._embed([self.config.document_prefix + text for text in texts])

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed questions (and their rewrites) as the model was trained to see them."""
        return self._embed([self.config.query_prefix + text for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        batches = [order[start:start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        if len(batches) == 1 or self.workers == 1:
            for rows in batches:
                out[rows] = self._embed_batch([encodings[i] for i in rows])
            return out
        with ThreadPoolExecutor(self.workers) as pool:  # onnxruntime releases the GIL while it runs
            for rows, vectors in zip(batches, pool.map(lambda rows: self._embed_batch([encodings[i] for i in rows]),
                                                       batches)):
                out[rows] = vectors
        return out

    def _embed_batch(self, encodings: list) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        feeds = {k: v for k, v in feeds.items() if k in self._input_names}
        hidden = self._session.run([self.config.output], feeds)[0]
        if self.config.pooling == "none":
            pooled = hidden
        elif self.config.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        if self.config.normalize:
            pooled = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled.astype(np.float32)
