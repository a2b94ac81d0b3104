"""Per-language figures on the multilingual dev set (``tests/data/multilingual``): ``rag eval`` once per pair of
question language and page language, same-language pairs and cross-language ones (a German question over the
English pages only, an English one over the German pages only, ...).

    .venv/bin/python tools/languages/eval_languages.py [--pairs en:en,de:de,fr:fr,es:es,de:en,en:de,fr:en]
        [--answers 0] [--off-topic] [--json OUT.json] [--dump-dir DIR]

The embedder and generator are the settings' (RAG_EMBEDDER_DIR=models/embeddinggemma-300m-int8 for the
multilingual one). Prints one row per pair: recall@5 (hybrid, dense, lexical), and with --answers N the answer
hit, refusals of the unanswerable questions and false refusals; with --off-topic too, the refusal of the 55
general-knowledge questions in the question language (``app/bench/offtopic_questions*.txt``), alone and as the third
turn of a conversation.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.bench.evaluate import evaluate  # noqa: E402
from rag.core.settings import load_settings  # noqa: E402

DATA = ROOT / "tests" / "data" / "multilingual"
DEFAULT_PAIRS = "en:en,de:de,fr:fr,es:es,de:en,fr:en,en:de"


def flat_questions(question_language: str, page_language: str) -> list[dict]:
    """The parallel records as ``rag eval`` reads them: the question in one language, the gold answers, evidence
    and document in the pages' language."""
    rows = []
    for file in sorted(DATA.glob("parallel-*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            unanswerable = rec["type"] == "unanswerable"
            rows.append({"id": f"{rec['id']}-{question_language}-{page_language}", "type": rec["type"],
                         "language": question_language, "question": rec["question"][question_language],
                         "answers": rec["answers"][page_language], "unanswerable": unanswerable,
                         "document": f"{rec['chapter']}.{page_language}.html",
                         **({} if unanswerable else {"evidence": rec["evidence"][page_language]})})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=DEFAULT_PAIRS, help="question:pages language pairs")
    parser.add_argument("--answers", type=int, default=0, help="answer this many questions of each kind per pair")
    parser.add_argument("--off-topic", action="store_true",
                        help="with --answers: also ask the off-topic questions in the question language")
    parser.add_argument("--json", type=Path, help="write every pair's report here")
    parser.add_argument("--dump-dir", type=Path, help="one answer dump per pair (JSONL) in this folder")
    args = parser.parse_args()
    settings = load_settings()
    reports = {}
    print(f"embedder {settings.embedder_path.name}, generator {settings.generator_path.name}")
    print("pair   recall@5 dense  lexical | answer hit  refused (unanswerable)  false refusal"
          + ("  | off-topic refused: alone  third turn" if args.off_topic else ""))
    for pair in args.pairs.split(","):
        question_language, page_language = pair.split(":")
        with tempfile.TemporaryDirectory(prefix="rag-languages-") as scratch:
            questions = Path(scratch) / "questions.jsonl"
            questions.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n"
                                         for q in flat_questions(question_language, page_language)), encoding="utf-8")
            dump = args.dump_dir / f"{question_language}-{page_language}.jsonl" if args.dump_dir else None
            if dump:
                dump.parent.mkdir(parents=True, exist_ok=True)
            report = evaluate(settings, questions, DATA / "docs" / page_language, None, 5, args.answers, 0,
                              log=lambda *_: None, dump=dump, off_topic=args.off_topic)
        reports[pair] = report
        line = (f"{question_language}>{page_language}  {report['recall@5']:.3f}    {report['recall@5_dense']:.3f}  "
                f"{report['recall@5_lexical']:.3f}")
        if args.answers:
            line += (f"   | {report['gold_in_answer']:.3f}       {report['abstention_unanswerable']:.3f}"
                     f"                  {report['false_abstention']:.3f}")
        if args.answers and args.off_topic:
            line += f"          | {report['off_topic_refused_alone']:.3f}  {report['off_topic_refused_third_turn']:.3f}"
        print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps(reports, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
