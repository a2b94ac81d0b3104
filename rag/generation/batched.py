"""Decode steps of several requests in one model call, with ONNX Runtime on the generator's own ``model.onnx``.

ORT GenAI 0.18 has no continuous batching on CPU (its ``og.Engine`` batches statically, at most 4 requests, and
cannot run a ``prune_lm_head`` build: see ``scheduler``). This runs the same decoder file directly. Every layer's
KV cache is one buffer ``[rows, kv_heads, window, head_size]``, bound as both the past and the present of the
model's ``GroupQueryAttention`` (ORT GenAI's own "past_present_share_buffer"): the attention writes the new
token's keys in place and reads, per row, only as far as that row's attention mask says. So rows of different
lengths step together: row ``r`` holds request ``r``'s prompt and reply so far, and one call advances them all.
On 2 cores (Qwen2.5-Coder-0.5B int4, AVX-512 VNNI), one step took 26 ms for 1 row, 42 ms for 4 and 74 ms for
10 at 300 tokens of context: 38 -> 135 tokens/s in all.

Active requests occupy rows ``0..n-1`` (the caller moves a later row into a finished one's), so a call passes
the first rows of each buffer: a contiguous view, no copy. Each request's prompt is prefilled alone into its row
(``prefill``), in chunks, so that the other rows can step between two chunks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag.core.errors import ModelError
from rag.generation.prefix_cache import reusable

# Prompt tokens prefilled per round: while one prompt goes in, the other rows wait for it. A 960-token prompt on
# Qwen2.5-Coder-0.5B, 2 cores: 3.39-3.64 s in chunks of 128, 3.42-3.59 s of 256, 3.69-3.86 s whole, 3.69-3.71 s
# of 64 (ORT GenAI: 3.69-3.83 s); so 128, about 0.45 s of waiting for the others.
PREFILL_CHUNK = 128

ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int32)": np.int32,
             "tensor(int64)": np.int64}


@dataclass(frozen=True)
class DecoderLayout:
    """What ``genai_config.json`` says of the decoder's inputs and outputs."""

    model_file: Path
    layers: int
    kv_heads: int
    head_size: int
    input_ids: str
    attention_mask: str
    past: tuple[str, ...]  # key then value, layer by layer
    present: tuple[str, ...]
    logits: str

    @classmethod
    def read(cls, folder: Path) -> "DecoderLayout":
        try:
            decoder = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))["model"]["decoder"]
            inputs, outputs = decoder["inputs"], decoder["outputs"]
            layers = int(decoder["num_hidden_layers"])
            past = tuple(inputs[f"past_{kind}_names"] % i for i in range(layers) for kind in ("key", "value"))
            present = tuple(outputs[f"present_{kind}_names"] % i for i in range(layers) for kind in ("key", "value"))
            return cls(folder / decoder["filename"], layers, int(decoder["num_key_value_heads"]),
                       int(decoder["head_size"]), inputs["input_ids"], inputs["attention_mask"], past, present,
                       outputs["logits"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"cannot read the decoder's layout from {folder}: {exc}") from exc


@dataclass
class _Held:
    """What a row's cache holds: these tokens, of this asker's scope (``PrefixCache``)."""

    tokens: list[int]
    scope: str = ""


@dataclass
class _Spare:
    """A finished request's cache, kept (compact, ``[kv_heads, tokens, head_size]`` per buffer) for prompts that
    start alike."""

    held: _Held
    caches: list[np.ndarray]


def _rounded_up(value: int, step: int) -> int:
    return -(-value // step) * step


class BatchedDecoder:
    """Rows of requests sharing each decode step. Not thread-safe: one thread (the scheduler's) uses it.

    The buffers are as large as the requests in them need, no more: they grow (copying what they hold) when a
    request needs another row or a longer window, and go when the last request has finished. Allocated for
    every row at once and touched lazily, the same layout cost 0.4-0.5 s and 360 MB at each row's first use
    on a machine with transparent huge pages (SmolLM2-135M: one 2 MB page per layer, key or value, and head).
    A prompt starting like one already held, by an active row or by one of the ``spares`` last finished requests,
    gets that prefix copied into its row and prefills only the rest, within the limits of
    ``prefix_cache.reusable`` (another asker's prompt: only the fixed shared prefix)."""

    def __init__(self, folder: Path, threads: int, rows: int, window: int, spares: int = 4,
                 prefill_chunk: int = PREFILL_CHUNK) -> None:
        import onnxruntime as ort  # lazy: keeps rag --help fast

        self.layout = layout = DecoderLayout.read(folder)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(str(layout.model_file), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ModelError(f"cannot load {layout.model_file} for batching: {exc}") from exc
        types = {i.name: i.type for i in self._session.get_inputs()}
        expected = {layout.input_ids, layout.attention_mask, *layout.past}
        if set(types) != expected:
            # position_ids, or a cache of another form: this decoder cannot drive it
            raise ModelError(f"the decoder's inputs are not the ones batching drives: {sorted(set(types) ^ expected)}")
        self._ids_type = ORT_TYPES[types[layout.input_ids]]
        self._mask_type = ORT_TYPES[types[layout.attention_mask]]
        self._kv_type = ORT_TYPES[types[layout.past[0]]]
        self._ort = ort
        self.rows = rows
        self.window = window
        self.prefill_chunk = prefill_chunk
        self._kv: list[np.ndarray] = []  # per layer, key then value: [row capacity, kv_heads, window, head_size]
        self._bound: tuple[tuple, object] | None = None
        self._rows: list[_Held] = []  # the active rows' caches
        self._spares: list[_Spare] = []  # least recently finished first
        self.spares = spares
        self.shared_tokens = 0  # the fixed prefix every answer prompt starts with (``PrefixCache.shared_tokens``)
        self.steps = 0  # decode calls, and the rows they advanced in all: how much the steps were shared
        self.rows_stepped = 0

    @property
    def active(self) -> int:
        return len(self._rows)

    def length(self, row: int) -> int:
        return len(self._rows[row].tokens)

    def fits(self, prompt_length: int, max_tokens: int) -> bool:
        return prompt_length + max_tokens <= self.window

    def _grow(self, rows: int, window: int) -> None:
        """Buffers with room for ``rows`` rows of ``window`` tokens, holding what the active rows hold."""
        capacity, width = (self._kv[0].shape[0], self._kv[0].shape[2]) if self._kv else (0, 0)
        if rows <= capacity and window <= width:
            return
        capacity = min(self.rows, max(rows, 2 * capacity, 4))
        width = min(self.window, max(window, width, _rounded_up(window, 256)))
        layout, used = self.layout, max((len(h.tokens) for h in self._rows), default=0)
        grown = []
        for buffer in self._kv or [None] * len(layout.past):
            bigger = np.zeros((capacity, layout.kv_heads, width, layout.head_size), dtype=self._kv_type)
            if buffer is not None and self._rows:
                bigger[:self.active, :, :used] = buffer[:self.active, :, :used]
            grown.append(bigger)
        self._kv, self._bound = grown, None

    def _binding(self, rows: slice) -> object:
        """The caches of ``rows`` bound as past and present; kept while the rows and buffers stay the same
        (binding 2 x layers views anew each step cost SmolLM2-135M ~7% of its one-stream speed)."""
        key = (rows.start, rows.stop, id(self._kv[0]))
        if self._bound is None or self._bound[0] != key:
            binding = self._session.io_binding()
            binding.bind_output(self.layout.logits)
            for past, present, buffer in zip(self.layout.past, self.layout.present, self._kv):
                value = self._ort.OrtValue.ortvalue_from_numpy(buffer[rows])  # a view: the attention writes into it
                binding.bind_ortvalue_input(past, value)
                binding.bind_ortvalue_output(present, value)
            self._bound = (key, binding)
        return self._bound[1]

    def _run(self, rows: slice, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        binding = self._binding(rows)
        binding.bind_cpu_input(self.layout.input_ids, ids.astype(self._ids_type, copy=False))
        binding.bind_cpu_input(self.layout.attention_mask, mask.astype(self._mask_type, copy=False))
        self._session.run_with_iobinding(binding)
        logits = binding.get_outputs()[0].numpy()
        return logits.reshape(logits.shape[0], -1)

    def add(self, prompt: np.ndarray, max_tokens: int, scope: str = "", reuse: bool = True) -> int:
        """A new row for ``prompt`` and a reply of up to ``max_tokens`` (the prompt then goes in with ``prefill``),
        holding already the longest prefix of it another cache may give (none without ``reuse``, or without spares:
        the prefix cache is off); returns the row's index (``length(row)``: the prompt tokens reused). A reused
        prefix makes the prompt's last token go in alone, which may change the logits' last digits, as
        ``PrefixCache`` does."""
        if self.active >= self.rows:
            raise ModelError("no free row for another request")
        tokens = np.asarray(prompt)
        needs = len(tokens) + max_tokens
        if needs > self.window:
            raise ModelError(f"{needs} tokens do not fit a row of {self.window}")
        self._grow(self.active + 1, needs)
        row = self.active
        sources: list[tuple[_Held, object]] = [(h, r) for r, h in enumerate(self._rows)] + \
            [(spare.held, spare) for spare in self._spares] if reuse and self.spares else []
        served = [(reusable(np.asarray(h.tokens), h.scope, tokens, scope, self.shared_tokens), i)
                  for i, (h, _) in enumerate(sources)]
        reused, best = max(served, default=(0, -1))
        reused = max(0, min(reused, len(tokens) - 1))  # the last prompt token is fed, for the logits after it
        if reused:
            source = sources[best][1]
            for index, buffer in enumerate(self._kv):
                buffer[row, :, :reused] = (source.caches[index][:, :reused] if isinstance(source, _Spare)
                                           else buffer[source, :, :reused])
        self._rows.append(_Held([int(t) for t in tokens[:reused]], scope))
        return row

    def prefill(self, row: int, tokens: np.ndarray) -> np.ndarray | None:
        """Feed the next chunk of ``tokens`` (the whole prompt) into ``row``; the logits after the prompt's last
        token once it is all in, else None (call again)."""
        held = self._rows[row]
        done = len(held.tokens)
        chunk = np.asarray(tokens[done:done + self.prefill_chunk]).reshape(1, -1)
        total = done + chunk.shape[1]
        logits = self._run(slice(row, row + 1), chunk, np.ones((1, total), dtype=np.int64))
        held.tokens.extend(int(t) for t in chunk[0])
        return logits[0] if total >= len(tokens) else None

    def step(self, tokens: list[int]) -> np.ndarray:
        """Feed one token to each of the first ``len(tokens)`` rows (``tokens[r]`` to row ``r``; a row still being
        prefilled comes after them); the logits that follow, ``[len(tokens), vocab]``."""
        count = len(tokens)
        lengths = np.asarray([len(held.tokens) for held in self._rows[:count]])
        mask = (np.arange(int(lengths.max()) + 1)[None, :] <= lengths[:, None]).astype(np.int64)
        logits = self._run(slice(0, count), np.asarray(tokens, dtype=np.int64).reshape(count, 1), mask)
        for held, token in zip(self._rows, tokens):
            held.tokens.append(int(token))
        self.steps += 1
        self.rows_stepped += count
        return logits

    def keep(self, row: int) -> None:
        """Keep ``row``'s cache as a spare (the least recently kept one goes), for prompts that start alike."""
        if not self.spares:
            return
        held = self._rows[row]
        length = len(held.tokens)
        self._spares.append(_Spare(_Held(list(held.tokens), held.scope),
                                   [np.ascontiguousarray(buffer[row, :, :length]) for buffer in self._kv]))
        del self._spares[:-self.spares]

    def move(self, source: int, target: int) -> None:
        """Copy row ``source``'s cache into row ``target`` (whose request has gone)."""
        length = self.length(source)
        for buffer in self._kv:
            buffer[target, :, :length] = buffer[source, :, :length]
        self._rows[target] = self._rows[source]

    def pop(self) -> None:
        """Free the last row; the buffers go with the last one."""
        self._rows.pop()
        if not self._rows:
            self._kv, self._bound = [], None
