"""``rag eval``: retrieval recall and end-to-end answer quality on a SQuAD-style JSONL set."""

from __future__ import annotations

import collections
import json
import random
import re
import statistics
import string
import tempfile
from pathlib import Path
from typing import IO, Callable, Sequence

from ingest.parameters import IngestParameters
from ingest.pipeline import ingest_paths
from rag.core.access import RequestContext
from rag.answering.answerability import refused_whatever_the_score
from rag.answering.evidence import CITATION, TRAILING_GLUE, cuts_a_clause, dangles, first_sentence, glued
from rag.answering.prompt import refers_back
from rag.answering.result import AnswerResult
from rag.answering.service import AnswerRequest, AnswerService, PreparedAnswer, options_from
from app.bench.stats import percentile
from rag.core.errors import BadRequestError
from rag.core.settings import Settings
from app.runtime import Models, answer_service, scratch_store

LOCAL = RequestContext.local()  # an evaluation reads every document, as the operator


PUNCTUATION = frozenset(string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalise_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def token_f1(text: str, answers: list[str]) -> float:
    """SQuAD's token F1 against the best-matching gold answer."""
    best = 0.0
    predicted = normalise_answer(text).split()
    for gold in answers:
        wanted = normalise_answer(gold).split()
        common = sum((collections.Counter(predicted) & collections.Counter(wanted)).values())
        if common:
            precision, recall = common / len(predicted), common / len(wanted)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def exact_match(text: str, answers: list[str]) -> bool:
    return any(normalise_answer(text) == normalise_answer(gold) for gold in answers)


def without_labels(text: str) -> str:
    return " ".join(CITATION.sub(" ", text).split())


def off_topic_questions(language: str = "en") -> list[str]:
    """General-knowledge questions no test corpus answers (kept beside this module), in ``language``: the same
    questions, translated, in de, fr and es."""
    name = "offtopic_questions.txt" if language == "en" else f"offtopic_questions.{language}.txt"
    path = Path(__file__).with_name(name)
    if not path.is_file():
        raise BadRequestError(f"no off-topic questions in language {language!r}: leave out --off-topic or add {name}")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def questions_language(questions: list[dict]) -> str:
    """The language all ``questions`` are asked in (their ``language`` field), English where they say none or
    are mixed."""
    found = {q.get("language") or "en" for q in questions}
    return found.pop() if len(found) == 1 else "en"


# A gold answer this short or shorter ("-X", "128", "ro") must stand as a whole word: "x" is in most answers.
SHORT_GOLD_CHARS = 4


# A command-line option ("-l", "--list", '"-u"'): SQuAD's normalisation would drop its dashes and its case, and
# "-L" (another option) would count for "-l".
OPTION_GOLD = re.compile(r"""["'“‘]?(-{1,2}[A-Za-z0-9][\w-]*)["'”’]?""")


def contains_answer(text: str, answers: list[str]) -> bool:
    """``text`` holds one of ``answers``, as SQuAD compares them; an option as written, dashes and case included."""
    haystack = normalise_answer(text)
    for answer in answers:
        option = OPTION_GOLD.fullmatch(answer.strip())
        if option:
            if re.search(rf"(?<![\w-]){re.escape(option.group(1))}(?![\w-])", text):
                return True
            continue
        gold = normalise_answer(answer)
        if gold and (re.search(rf"(?<!\S){re.escape(gold)}(?!\S)", haystack) if len(gold) <= SHORT_GOLD_CHARS
                     else gold in haystack):
            return True
    return False


def holds_gold(path: str, text: str, question: dict) -> bool:
    """A retrieved chunk (its document path and text) is a gold passage for ``question``: from the
    question's document (when it names one) and containing one of its answers."""
    return _from_document(path, question.get("document")) and supports(text, question)


def answerable(questions: list[dict]) -> list[dict]:
    return [q for q in questions if not q["unanswerable"] and q["answers"]]


def load_questions(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            row["question"], row.setdefault("answers", []), row.setdefault("unanswerable", False)
        except (ValueError, KeyError) as exc:
            raise BadRequestError(f"{path}:{number}: not a question record ({exc})") from exc
        rows.append(row)
    return rows


def evaluate(settings: Settings, questions_file: Path, docs: Path, index: str | None, top_k: int,
             answers: int, seed: int, log: Callable[..., None] = print, followups: int = 0,
             distractors: Sequence[Path] = (), dump: Path | None = None, off_topic: bool = True) -> dict:
    questions = load_questions(questions_file)
    models = Models.load(settings)
    parameters = IngestParameters.from_settings(settings, models.embedder)
    with tempfile.TemporaryDirectory(prefix="rag-eval-") as scratch, \
            scratch_store(settings, Path(scratch)) as (store, scratch_index), \
            _dump_file(dump) as dump_to:
        if index:
            service = answer_service(settings.replace(index=index), models)
        else:
            log(f"ingesting {docs} into a scratch index")
            ingest_paths([docs], store.index(scratch_index), parameters)
            service = answer_service(settings.replace(index=scratch_index), models, store=store)
        try:
            report = retrieval_report(service.retriever(), questions, top_k, log)
            if followups > 0:
                log(f"follow-up retrieval over {followups} two-turn conversations")
                report.update(followup_report(service.retriever(), followup_pairs(questions, followups, seed), top_k))
            if answers > 0:
                report.update(answer_report(service, questions, top_k, answers, seed, log, dump_to))
                if off_topic:
                    report.update(off_topic_report(service, questions, top_k, seed, dump_to))
            if distractors:
                if index:
                    raise BadRequestError("--distractors adds documents to the scratch index: leave out --index")
                log(f"adding distractors {', '.join(map(str, distractors))} to the same index")
                ingest_paths(list(distractors), store.index(scratch_index), parameters)
                with_distractors = {}
                if answers > 0:
                    with_distractors.update(answer_report(service, questions, top_k, answers, seed, log, dump_to,
                                                          label="distractors"))
                with_distractors.update(retrieval_report(service.retriever(), questions, top_k, log))
                report["with_distractors"] = with_distractors
        finally:
            service.close()
    return report


class _dump_file:
    """``--dump FILE``: one JSON line per answer, for a person to read the failures."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.file = path, None

    def __enter__(self) -> IO[str] | None:
        if self.path is not None:
            self.file = self.path.open("w", encoding="utf-8")
        return self.file

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()


def retrieval_report(retriever, questions: list[dict], top_k: int, log: Callable[..., None]) -> dict:
    candidates = answerable(questions)
    log(f"retrieval recall@{top_k} over {len(candidates)} answerable questions")
    found = {"hybrid": 0, "dense": 0, "lexical": 0}
    for q in candidates:
        for mode in found:
            hits = retriever.retrieve(q["question"], top_k, mode=mode).hits
            if any(holds_gold(h.chunk.path, h.chunk.text, q) for h in hits):
                found[mode] += 1
    n = max(1, len(candidates))
    return {"questions": len(questions), "answerable": len(candidates), "k": top_k,
            f"recall@{top_k}": found["hybrid"] / n, f"recall@{top_k}_dense": found["dense"] / n,
            f"recall@{top_k}_lexical": found["lexical"] / n}


def _from_document(path: str, document: str | None) -> bool:
    return document is None or Path(path).name == document


def answer_report(service: AnswerService, questions: list[dict], top_k: int, n: int, seed: int,
                  log: Callable[..., None], dump: IO[str] | None = None, label: str = "") -> dict:
    rng = random.Random(seed)
    candidates = answerable(questions)
    unanswerable = [q for q in questions if q["unanswerable"]]
    sample_a = rng.sample(candidates, min(n, len(candidates)))
    sample_u = rng.sample(unanswerable, min(n, len(unanswerable)))
    options = options_from(service.settings, top_k=top_k)
    service.ask(AnswerRequest(question="warm-up question?", options=options, context=LOCAL))
    verdicts: list[dict] = []
    ttft, total, output_tokens, failures = [], [], [], []
    for i, q in enumerate(sample_a + sample_u, 1):
        prepared = service.prepare(AnswerRequest.conversation(conversation_of(service, q, options), options=options,
                                                              context=LOCAL))
        result = service.ask_prepared(prepared)
        total.append(result.metrics.total_ms)
        if result.metrics.output_tokens:
            ttft.append(result.metrics.ttft_ms)
            output_tokens.append(result.metrics.output_tokens)
        verdict = answer_verdict(q, prepared, result)
        verdicts.append(verdict)
        if not q["unanswerable"] and not result.abstained and not verdict["gold_in_answer"]:
            failures.append({"question": q["question"], "gold": q["answers"], "answer": result.answer})
        if dump is not None:
            dump.write(json.dumps(dump_record(q, result, verdict, label), ensure_ascii=False) + "\n")
        if i % 50 == 0:
            log(f"answered {i}/{len(sample_a) + len(sample_u)}")
    sampling = options.sampling
    report = {"answered_answerable": len(sample_a), "answered_unanswerable": len(sample_u),
              **answer_figures(verdicts, top_k)}
    report["answerability_curve"] = refusal_curve(verdicts)
    types = sorted({v["type"] for v in verdicts})
    if len(types) > 1:
        report["by_type"] = {t: answer_figures([v for v in verdicts if v["type"] == t], top_k) for t in types}
    languages = sorted({v["language"] for v in verdicts if v.get("language")})
    if languages:  # questions that say their language (the multilingual dev set, tools/languages)
        report["by_language"] = {language: answer_figures([v for v in verdicts if v.get("language") == language],
                                                          top_k) for language in languages}
    return {
        **report,
        "output_tokens_mean": sum(output_tokens) / len(output_tokens) if output_tokens else 0.0,
        "ttft_ms_p50": percentile(ttft, 50) or 0.0, "ttft_ms_p95": percentile(ttft, 95) or 0.0,
        "total_ms_p50": percentile(total, 50) or 0.0, "total_ms_p95": percentile(total, 95) or 0.0,
        "model": service.generator.model_id, "top_k": options.top_k, "context_tokens": options.context_tokens,
        "max_tokens": sampling.max_tokens, "temperature": sampling.temperature, "seed": seed,
        "sample_failures": failures[:10],
    }


def conversation_of(service: AnswerService, question: dict, options) -> list[dict[str, str]]:
    """The messages that ask ``question``: its earlier turns (``history``, each answered by the service, so the
    conversation is a real one), then the question itself."""
    messages: list[dict[str, str]] = []
    for turn in question.get("history", ()):
        messages.append({"role": "user", "content": turn})
        reply = service.ask(AnswerRequest.conversation(messages, options=options, context=LOCAL))
        messages.append({"role": "assistant", "content": reply.answer})
    return [*messages, {"role": "user", "content": question["question"]}]


def answer_verdict(question: dict, prepared: PreparedAnswer, result: AnswerResult) -> dict:
    """What a reader gets for one question: the answer line against the gold, the quotes, the refusal."""
    checks = citation_checks(result)
    verdict: dict = {"type": question.get("type") or ("unanswerable" if question["unanswerable"] else "answerable"),
                     "language": question.get("language"), "answered_in": result.language,
                     "unanswerable": question["unanswerable"], "abstained": result.abstained,
                     "reason": result.abstain_reason,
                     "cut": result.finish_reason == "length", "signals": dict(prepared.signals), **checks}
    if question["unanswerable"]:
        return verdict
    answer = "" if result.abstained else without_labels(result.answer)
    gold = question["answers"]
    verdict["hit_if_answered"] = answer_hit(question, answer or without_labels(prepared.withheld or ""))
    ranked = [text for _, text in prepared.ranked]
    verdict.update(
        f1=round(token_f1(answer, gold), 3), em=exact_match(answer, gold), gold_in_answer=answer_hit(question, answer),
        gold_in_first_sentence=bool(answer) and contains_answer(first_sentence(answer), gold),
        gold_in_evidence=any(supports(e.quote, question) for e in result.evidence),
        fragment=bool(answer) and is_fragment(answer, result),
        words=len(answer.split()) if answer else 0,
        **{f"evidence@{k}": any(supports(text, question) for text in ranked[:k]) for k in (1, 3)},
        **evidence_funnel(prepared, question))
    return verdict


def supports(text: str, question: dict) -> bool:
    """``text`` (a quote, an evidence sentence) holds the gold answer; for a yes/no question, whose gold "Yes" or
    "No" no sentence spells, it holds the gold supporting sentence (its first 60 characters, normalised)."""
    if question.get("type") == "yesno" and question.get("evidence"):
        return normalise_answer(question["evidence"])[:60] in normalise_answer(text)
    return contains_answer(text, question["answers"])


def refusal_curve(verdicts: list[dict], steps: int = 20) -> list[dict]:
    """What each answerability threshold would give on these answers: the share of unanswerable questions
    refused, of answerable ones refused (false refusals), and of answerable ones answered right. A question
    refused before any score (no evidence, off the topic), or whatever its score (it names an identifier no
    document holds, or asks of another group than the evidence's rule is for), counts as refused at every
    threshold."""
    def refused(v: dict, threshold: float) -> bool:
        if v["abstained"] and v.get("reason") != "unanswerable":
            return True
        score = v["signals"].get("score")
        return score is not None and (score < threshold or refused_whatever_the_score(v["signals"]))

    answerable_ = [v for v in verdicts if not v["unanswerable"]]
    unanswerable_ = [v for v in verdicts if v["unanswerable"]]
    curve = []
    for step in range(steps + 1):
        threshold = step / steps
        curve.append({
            "threshold": threshold,
            "refused_unanswerable": sum(refused(v, threshold) for v in unanswerable_) / max(1, len(unanswerable_)),
            "false_refusal": sum(refused(v, threshold) for v in answerable_) / max(1, len(answerable_)),
            "answer_hit": sum(v.get("hit_if_answered", False) and not refused(v, threshold) for v in answerable_)
            / max(1, len(answerable_))})
    return curve


def answer_hit(question: dict, answer: str) -> bool:
    """The answer line holds the gold answer: every item of a list question, the "Yes" / "No" of a yes/no
    question as its first word, else any one of the accepted answers."""
    if not answer:
        return False
    if question.get("items"):
        return all(contains_answer(answer, [item]) for item in question["items"])
    if question.get("type") == "yesno":
        return normalise_answer(answer).split()[:1] == normalise_answer(question["answers"][0]).split()[:1]
    return contains_answer(answer, question["answers"])


def is_fragment(answer: str, result: AnswerResult) -> bool:
    """A short answer that ends (or starts) inside a technical token of the quote it comes from ("/etc/rsyslog"
    of "/etc/rsyslog.conf", "net" of "net.ifnames=0") or ends inside a clause ("each file that a user", "If the
    Web can"). Answers made of whole cited sentences are never fragments; a list's items are each checked ("$LC_" of
    '"$LANG"; "$LC_*"' was not)."""
    if CITATION.search(result.answer) or result.answer_kind == "yes_no":
        return False
    if result.answer_kind == "list" and "; " in answer:
        return any(is_fragment(item, result) for item in answer.split("; ") if item)
    if dangles(answer):
        return True
    cut = []
    for evidence in result.evidence:  # every place the quote holds the answer: cut at each of them?
        for found in re.finditer(re.escape(answer), evidence.quote, re.IGNORECASE):
            before, after = evidence.quote[:found.start()], evidence.quote[found.end():]
            cut.append(glued(after) or glued(before[::-1]) or bool(TRAILING_GLUE.match(after).group())
                       or cuts_a_clause(answer, after))
    return bool(cut) and all(cut)


def answer_figures(verdicts: list[dict], top_k: int) -> dict:
    """The answer figures over ``verdicts`` (answerable and unanswerable questions mixed)."""
    answered = [v for v in verdicts if not v["unanswerable"]]
    refused = [v for v in verdicts if v["unanswerable"]]
    na, nu, n = max(1, len(answered)), max(1, len(refused)), max(1, len(verdicts))

    def share(key: str, rows: list[dict] = answered) -> float:
        return sum(bool(v.get(key)) for v in rows) / max(1, len(rows))

    words = [v["words"] for v in answered if v.get("words")]
    quotes = sum(v["quotes"] for v in verdicts)
    figures = {
        "questions_answerable": len(answered), "questions_unanswerable": len(refused),
        # What a reader sees, on the answer with its [n] labels removed (an abstention is an empty answer).
        "answer_f1": sum(v["f1"] for v in answered) / na if answered else 0.0, "answer_em": share("em"),
        "gold_in_answer": share("gold_in_answer"), "gold_in_first_sentence": share("gold_in_first_sentence"),
        "gold_in_evidence": share("gold_in_evidence"),
        "evidence@1": share("evidence@1"), "evidence@3": share("evidence@3"),
        # Where gold answers are lost, over the answerable sample: retrieved (a top-k chunk of the question's
        # document holds it) -> in the compressed context -> in the top-scored sentence -> in the answer.
        f"gold_in_top{top_k}_chunks": share("chunks"), "gold_in_prompt": share("prompt"),
        "gold_in_reply": share("gold_in_answer"),
        "fragments": sum(bool(v.get("fragment")) for v in answered),
        "answer_words_median": statistics.median(words) if words else 0,
        "answer_words_mean": sum(words) / len(words) if words else 0.0,
        "cut_by_token_limit": sum(v["cut"] for v in verdicts) / n,
        # Every evidence quote is the source's text at its offsets; an answer is mislabelled when it cites a
        # source that does not hold what it says.
        "citation_precision": sum(v["quotes_verified"] for v in verdicts) / quotes if quotes else 1.0,
        "mislabelled_answers": sum(v["mislabelled"] for v in verdicts),
        "accuracy": share("gold_in_answer"),  # the old containment figure, kept as one figure among others
        "false_abstention": share("abstained"),
        "abstention_unanswerable": sum(v["abstained"] for v in refused) / nu if refused else 0.0,
    }
    return figures


def citation_checks(result: AnswerResult) -> dict:
    """Each evidence quote against its source's text at its offsets, and the answer against what it cites:
    a short answer must be held by a quote of the source it cites (each item of a list answer by one), an
    answer of cited sentences must have each sentence in the source its label names; a yes/no answer's quote is
    the sentence that decides it (the answer is no phrase of it), so it needs a quote only."""
    by_number = {s.number: s for s in result.sources}
    verified = sum(1 for e in result.evidence
                   if e.source in by_number and by_number[e.source].text[e.start:e.end] == e.quote)
    mislabelled = False
    if not result.abstained and result.sources:
        labelled = re.findall(r"(.+?)\s*\[(\d{1,2})\]", result.answer)
        if labelled:
            mislabelled = any(int(n) not in by_number
                              or normalise_answer(text) not in normalise_answer(by_number[int(n)].text)
                              for text, n in labelled)
        else:
            quotes = [normalise_answer(e.quote) for e in result.evidence if e.source in result.citations]
            parts = result.answer.split("; ") if result.answer_kind == "list" else [result.answer]
            mislabelled = not quotes if result.answer_kind == "yes_no" else \
                not all(any(normalise_answer(part) in q for q in quotes) for part in parts)
    return {"quotes": len(result.evidence), "quotes_verified": verified, "mislabelled": mislabelled}


def dump_record(question: dict, result: AnswerResult, verdict: dict, label: str = "") -> dict:
    return {"run": label or "main", "question": question["question"], "gold": question.get("answers", []),
            "unanswerable": question.get("unanswerable", False), "answer": result.answer,
            "abstained": result.abstained, "abstain_reason": result.abstain_reason,
            "finish_reason": result.finish_reason,
            "evidence": [{"source": e.source, "quote": e.quote, "start": e.start, "end": e.end}
                         for e in result.evidence],
            "sources": [{"number": s.number, "title": s.title, "path": s.path, "score": s.score,
                         "snippet": s.snippet} for s in result.sources],
            "verdict": verdict}


def off_topic_report(service: AnswerService, questions: list[dict], top_k: int, seed: int,
                     dump: IO[str] | None = None) -> dict:
    """Off-topic refusal: general-knowledge questions asked alone, and as the third turn of a conversation
    whose first two questions were about the documents (answered, so the history is a real one)."""
    rng = random.Random(seed)
    options = options_from(service.settings, top_k=top_k)
    on_topic = answerable(questions)
    refused_alone = refused_later = 0
    # Asked in the language of the set's questions: a German set is checked with German off-topic questions.
    off_topic = off_topic_questions(questions_language(questions))
    for question in off_topic:
        alone = service.ask(AnswerRequest(question=question, options=options, context=LOCAL))
        first, second = rng.sample(on_topic, 2)
        messages: list[dict[str, str]] = []
        for turn in (first["question"], second["question"]):
            messages.append({"role": "user", "content": turn})
            reply = service.ask(AnswerRequest.conversation(messages, options=options, context=LOCAL))
            messages.append({"role": "assistant", "content": reply.answer})
        messages.append({"role": "user", "content": question})
        later = service.ask(AnswerRequest.conversation(messages, options=options, context=LOCAL))
        refused_alone += alone.abstained
        refused_later += later.abstained
        if dump is not None:
            for run, result in (("off_topic_alone", alone), ("off_topic_third_turn", later)):
                dump.write(json.dumps(dump_record({"question": question, "unanswerable": True}, result,
                                                  {"refused": result.abstained}, run), ensure_ascii=False) + "\n")
    n = max(1, len(off_topic))
    return {"off_topic_questions": len(off_topic), "off_topic_refused_alone": refused_alone / n,
            "off_topic_refused_third_turn": refused_later / n}


def evidence_funnel(prepared: PreparedAnswer, question: dict) -> dict[str, bool]:
    """Whether an answerable question's gold answer survived each step before generation."""
    hits = prepared.retrieval.hits if prepared.retrieval is not None else []
    return {
        "chunks": any(holds_gold(h.chunk.path, h.chunk.text, question) for h in hits),
        "prompt": supports(" ".join(p.text for p in prepared.passages), question),
    }


# --------------------------------------------------------------------------- follow-up questions
# A name: capitalised words (with "of"/"de"/"the" inside), optionally after "the", standing as whole words.
CAPITALISED_SPAN = re.compile(r"(?<![\w.])(?:(?:the|The) )?[A-Z][\w'-]*(?: (?:of |de |the )?[A-Z][\w'-]*)*(?![\w.]\w)")


def followup_pairs(questions: list[dict], n: int, seed: int) -> list[dict]:
    """Conversations of two turns built from SQuAD: two answerable questions on one paragraph, the second
    rewritten as a follow-up by putting a pronoun in place of the name it shares with the first question
    or the article's title ("When did Rollo die?" after a question on Rollo -> "When did he die?").
    Each pair keeps the original second question, so retrieval can be compared with the full name, with
    the pronoun alone, and with the pronoun plus the conversation."""
    by_paragraph: dict[tuple, list[dict]] = {}
    for q in answerable(questions):
        by_paragraph.setdefault((q.get("document"), q.get("paragraph")), []).append(q)
    pairs = []
    for group in by_paragraph.values():
        for first, second in zip(group, group[1:]):
            followup = pronoun_followup(second["question"], first["question"], second.get("title", ""))
            if followup:
                pairs.append({"first": first["question"], "original": second["question"], "followup": followup,
                              "answers": second["answers"], "document": second.get("document")})
    rng = random.Random(seed)
    pairs = rng.sample(pairs, min(n, len(pairs)))
    for pair in pairs:  # a change of topic: the same second question after one on another article
        pair["unrelated_first"] = rng.choice([q["question"] for q in answerable(questions)
                                             if q.get("document") != pair["document"]])
    return pairs


def pronoun_followup(question: str, earlier: str, title: str) -> str | None:
    """``question`` with its longest name shared with ``earlier`` or ``title`` replaced by a pronoun, or
    None when it names nothing they name (no follow-up can be made of it)."""
    in_earlier = set(re.findall(r"\w+", earlier.lower()))
    known = in_earlier | set(re.findall(r"\w+", title.lower()))

    def words(text: str) -> set[str]:
        return set(re.findall(r"\w+", text.lower())) - {"the", "of", "de"}

    spans = [m for m in CAPITALISED_SPAN.finditer(question) if m.start() > 0 and words(m.group()) <= known]
    if not spans:
        return None
    # The name the earlier question used, else the title's; the longest of those.
    span = max(spans, key=lambda m: (words(m.group()) <= in_earlier, len(m.group())))
    name = re.sub(r"^(?:the|The) ", "", span.group())
    pronoun = "they" if name.endswith("s") and not name.endswith("ss") else "it"
    return (question[:span.start()] + pronoun + question[span.end():]).strip()


def followup_report(retriever, pairs: list[dict], top_k: int) -> dict:
    """Retrieval recall@k of the second turn: with the name, with the pronoun alone (retrieval on the last
    message only), and with the pronoun plus the conversation (history-aware retrieval); and, as a control,
    the named question after a question on another article, alone and with that history."""
    found = {"original": 0, "followup_alone": 0, "followup_with_history": 0, "topic_change_with_history": 0}
    for pair in pairs:
        # "with history" follows the answer flow's rule: the conversation is searched only when the question
        # refers back to it.
        def history(question: str, earlier: str) -> tuple[str, ...]:
            return (earlier,) if refers_back(question) else ()

        runs = {"original": (pair["original"], ()), "followup_alone": (pair["followup"], ()),
                "followup_with_history": (pair["followup"], history(pair["followup"], pair["first"])),
                "topic_change_with_history": (pair["original"], history(pair["original"], pair["unrelated_first"]))}
        for name, (question, history) in runs.items():
            hits = retriever.retrieve(question, top_k, history=history).hits
            found[name] += any(_from_document(h.chunk.path, pair.get("document"))
                               and contains_answer(h.chunk.text, pair["answers"]) for h in hits)
    n = max(1, len(pairs))
    return {"followup_pairs": len(pairs),
            **{f"followup_recall@{top_k}_{name}": count / n for name, count in found.items()},
            "followup_examples": pairs[:3]}
