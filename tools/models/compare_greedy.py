"""Greedy replies of two (or more) ORT GenAI model folders on the same fixed prompts, side by side.

    .venv/bin/python tools/models/compare_greedy.py models/A models/B [--tokens 48] [--json out.json]

Prints per prompt whether the replies are identical, else the length of their common token prefix and
both texts; ends with the counts. Used to check a new import recipe against the one it replaces
(docs/models.md, "Models").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PROMPTS = (
    "What is the capital of France?",
    "Name three primary colours.",
    "Translate 'good morning' into Spanish.",
    "What is 17 plus 25?",
    "Write a haiku about the sea.",
    "Explain in one sentence what a CPU does.",
    "Who wrote Romeo and Juliet?",
    "Give me a synonym for 'happy'.",
    "What is the boiling point of water in Celsius?",
    "List the days of the week.",
    "How do I list files in a directory on Linux?",
    "What does HTTP stand for?",
    "Write a Python function that returns the square of a number.",
    "Why is the sky blue? Answer briefly.",
    "What is the largest planet in the solar system?",
    "Summarise: The meeting was moved from Monday to Wednesday because the room was booked.",
    "Context: The Normans were the people who in the 10th and 11th centuries gave their name to Normandy. "
    "Question: In what country is Normandy located?",
    "Context: The file /etc/cron.allow lists the users who may use crontab. Question: Which file lists the "
    "users allowed to use crontab?",
    "What is the opposite of 'ancient'?",
    "How many legs does a spider have?",
)


def replies(path: Path, tokens: int) -> list[tuple[list[int], str]]:
    from rag.generation.base import SamplingOptions
    from rag.generation.ort import LocalGenerator

    generator = LocalGenerator(path)
    out = []
    for prompt in PROMPTS:
        ids = generator.encode(generator.chat_prompt([{"role": "user", "content": prompt}]))
        text, _ = generator.generate(ids, SamplingOptions(max_tokens=tokens))
        out.append((list(generator.encode(text)), text))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs = {str(m): replies(m, args.tokens) for m in args.models}
    base, *others = list(runs)
    summary = {}
    for other in others:
        same, prefixes = 0, []
        for i, prompt in enumerate(PROMPTS):
            (a_ids, a), (b_ids, b) = runs[base][i], runs[other][i]
            common = next((j for j, (x, y) in enumerate(zip(a_ids, b_ids)) if x != y), min(len(a_ids), len(b_ids)))
            prefixes.append(common)
            if a == b:
                same += 1
                print(f"= {prompt[:60]!r}: identical")
            else:
                print(f"~ {prompt[:60]!r}: first {common} tokens shared\n    A: {a!r}\n    B: {b!r}")
        summary[other] = {"identical": same, "prompts": len(PROMPTS),
                          "mean_shared_prefix_tokens": round(sum(prefixes) / len(prefixes), 1)}
        print(f"{other} vs {base}: {same}/{len(PROMPTS)} identical, "
              f"mean shared prefix {summary[other]['mean_shared_prefix_tokens']} tokens")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "replies": {k: [t for _, t in v] for k, v in runs.items()}},
                                        indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
