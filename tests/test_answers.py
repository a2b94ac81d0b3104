"""Answers a reader can trust: a short answer first, verbatim evidence with verified offsets, no fragments,
refusals that hold in a conversation, and the eval that measures what a reader sees.
Real models and a real index (test_rag's two SQuAD documents); no mocks.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from test_rag import doc_ids, options, rag_home, retriever, service, squad_rows  # noqa: F401 (fixtures)
from rag.answering.compress import names_an_asked_token
from rag.answering.english import defines
from rag.answering.evidence import (align, answer_starts, candidate_spans, clean_reply, cut_cleanly,
                                    holds_code_words, holds_the_asked_type, phrase_features,
                                    sentence_quote, start_priors)
from rag.answering.prompt import ABSTENTION_MESSAGE, refers_back
from rag.answering.question import QuestionShape
from rag.answering.result import AnswerResult
from rag.answering.service import AnswerRequest, AnswerService
from app.bench.evaluate import citation_checks, evaluate, exact_match, off_topic_questions, token_f1
from rag.core.settings import Settings
from rag.generation.base import SamplingOptions
from rag.generation.logits import SpanConstraint, SpanSearch, TokenSpan, best_span

Q = QuestionShape.of
VICTORIA_SENTENCE = ("As of August 2010, Victoria had 1,548 public schools, 489 Catholic schools and 214 "
                     "independent schools.")


def assert_trustworthy(result: AnswerResult) -> None:
    """What every non-abstaining answer from the documents must satisfy."""
    assert not result.abstained
    assert result.evidence, "an answer without evidence"
    by_number = {s.number: s for s in result.sources}
    for quote in result.evidence:
        assert by_number[quote.source].text[quote.start:quote.end] == quote.quote
    assert result.citations == list(dict.fromkeys(q.source for q in result.evidence))
    assert not re.fullmatch(r"(?:\s*\[\d+\])*\s*", result.answer), f"degenerate answer {result.answer!r}"  # labels only
    assert result.finish_reason == "stop"
    assert citation_checks(result)["mislabelled"] is False, result


# --------------------------------------------------------------------------- spans and alignment (pure)
def test_when_before_a_clause_of_its_own_opens_a_leading_clause():
    """tests/data/unseen-docs' "When I do in-place substitutions with perl, which argument keeps a backup …?" was a
    time question (answered "over all given files"), and "When I'm done practising …, how do I delete it …?" too
    ("After your practice"). A "When" followed by a verb of asking still asks a time."""
    perl = Q("When I do in-place substitutions with perl, which argument keeps a backup of each original file?")
    assert not perl.numeric and not perl.timing
    delete = Q("When I'm done practising with the throwaway account fish, how do I delete it along with its home?")
    assert delete.howto and delete.procedure and not delete.timing
    wait = Q("When no WAL is available from streaming, how long does the standby wait before trying again?")
    assert wait.numeric and not wait.timing
    for question in ("When did Rollo arrive?", "When was it built?", "When?", "When and where was it signed?",
                     "When is autovacuum started?"):
        assert Q(question).timing and Q(question).numeric, question


def test_a_default_asked_for_in_other_words_is_a_default_asked_for():
    """tests/data/unseen-docs-2 asks for defaults without the word: "Unless I change it, which method is used to
    compress TOASTed values …?" was answered "default_toast_compression" (the setting, not its default "pglz"),
    "… if jit_provider is left alone?" "a non-existent library" (not "llvmjit")."""
    for question in ("What is the default wal_level?", "Out of the box, which privileges does PUBLIC get?",
                     "Unless I change it, which method compresses TOASTed values?",
                     "Which library is the JIT provider if jit_provider is left alone?",
                     "On a freshly installed server where nobody has touched search_path, what is the lookup order?",
                     "If I don't pass a timeout, how long does pg_isready keep trying?",
                     "What is the compiled-in DateStyle?"):
        assert Q(question).default, question
    for question in ("If I don't want a superuser, which role may copy to a file?", "How do I change the timeout?",
                     "Which library does the server load as its JIT provider?", "Was the box left open?"):
        assert not Q(question).default, question


def test_a_quantity_before_its_verb_asks_for_a_number():
    """tests/data/unseen-docs-2: "What cost does the planner assume by default for reading a disk page out of
    sequence (random_page_cost)?" was answered "seq_page_cost", "Which exit code does pg_isready hand back …?"
    "command line arguments": a quantity asked for before its verb, as "What is the cost …?" asks one."""
    for question in ("What cost does the planner assume by default (random_page_cost)?",
                     "Out of the box, what estimated query cost has to be exceeded before JIT compilation is on?",
                     "Which exit code does pg_isready hand back when the server is starting?",
                     "Which port does PostgreSQL listen on by default?", "What timeout does pg_isready use?"):
        assert Q(question).numeric and Q(question).counting, question
    for question in ("Which command does it run?", "What port forwarding does ssh offer?",
                     "Which setting does the planner read?"):
        assert not Q(question).numeric, question


def test_a_default_asked_for_is_the_default_of_the_entry_asked_about():
    """A definition list's entry: its first sentence names the setting and says what it does, a later one states
    its default. The ranker put the first first (tests/data/unseen-docs-2: "Out of the box, what estimated query
    cost has to be exceeded before JIT compilation is switched on …?" was answered "jit_above_cost", not "100000"),
    or the default of the entry next to the one the question names ("What is work_mem set to by default?" got
    "2.0" of hash_mem_multiplier, whose sentence says "the usual work_mem base amount")."""
    from rag.answering.compress import candidate_sentences, default_of_the_entry
    sentences = candidate_sentences([
        "jit_above_cost (floating point)\n\nSets the query cost above which JIT compilation is activated, if "
        "enabled. Performing JIT costs planning time but can accelerate query execution. The default is 100000.\n\n"
        "hash_mem_multiplier (floating point)\n\nUsed to compute the maximum amount of memory that hash-based "
        "operations can use. The default value is 2.0, which makes hash-based operations use twice the usual "
        "work_mem base amount.\n\nwork_mem (integer)\n\nSets the base maximum amount of memory to be used by a "
        "query operation. The default value is four megabytes (4MB)."])
    text = [s.text for s in sentences]
    assert [s.term for s in sentences] == ["jit_above_cost"] * 3 + ["hash_mem_multiplier"] * 2 + ["work_mem"] * 2
    jit = "Out of the box, what estimated query cost has to be exceeded before JIT compilation is switched on?"
    order = default_of_the_entry(Q(jit), jit, sentences, range(len(sentences)))
    assert text[order[0]] == "The default is 100000." and sorted(order) == list(range(len(sentences)))
    work_mem = "What is work_mem set to by default?"
    order = default_of_the_entry(Q(work_mem), work_mem, sentences, [4, 5, 6, 0])
    assert text[order[0]] == "The default value is four megabytes (4MB)."
    # a follow-up names the entry in the question it refers back to
    assert text[default_of_the_entry(Q("What is its default?"), "What does work_mem do? What is its default?",
                                     sentences, [4, 5, 6])[0]] == "The default value is four megabytes (4MB)."
    # no default asked for, or how to set one: the ranker's order
    for question in ("What does work_mem do?", "How do I change the default work_mem?",
                     "Why is work_mem only 4MB by default?"):
        assert default_of_the_entry(Q(question), question, sentences, [5, 6, 4]) == [5, 6, 4], question


def test_answer_starts_follow_the_question_type():
    words = lambda question: [VICTORIA_SENTENCE[i:].split()[0] for i in answer_starts(VICTORIA_SENTENCE, Q(question))]
    assert words("How many Catholic schools were in Victoria?") == ["1,548", "489", "214"]  # a count: no year, month
    # "2010" continues the date "August 2010": an answer starts where the date does
    assert words("When were there 489 Catholic schools in Victoria?") == ["August", "1,548", "214"]
    launch = "BSkyB's digital service was officially launched on 1 October 1998 under the name Sky Digital."
    assert [launch[i:].split()[0] for i in answer_starts(launch, Q("When was BSkyB's digital service launched?"))] \
        == ["1"]
    assert "Victoria" not in words("Where are schools in Victoria?")
    assert "public" in words("What kind of schools did Victoria have?")
    assert "schools" not in words("What kind of schools are there?")  # the question's own words never start it
    router = "The Sky Q range has a broadband router (Sky Q Hub)."
    assert "Q" not in [router[i:].split()[0] for i in answer_starts(router, Q("What is Sky Q's router called?"))]


def test_a_path_naming_a_question_word_starts_an_answer_and_none_starts_inside_a_sum():
    """A technical token the question does not spell is new, even where its parts run together share the stem of
    a question word ("gnupggpgconf" of "GnuPG"); a number after an operator is inside a sum, which is answered
    whole, from its bracket; a protocol's version ("TLSv1.2") starts a number asked for, "IPv6" does not."""
    gnupg = 'A good default keyserver set up in "~/.gnupg/gpg.conf" (or old location "~/.gnupg/options") contains it.'
    starts = [gnupg[i:].split()[0] for i in answer_starts(gnupg, Q("Where do I set GnuPG's default keyserver?"))]
    assert '~/.gnupg/gpg.conf"' in starts and '~/.gnupg/options")' in starts
    fat = "For FAT filesystems by its design, the maximum file size is (2^32 - 1) bytes = (4GiB - 1 byte)."
    starts = [fat[i:].split()[0] for i in answer_starts(fat, Q("What is the maximum file size on a FAT filesystem?"))]
    assert starts == ["(2^32", "(4GiB"]
    tls = "The default is TLSv1.2, which satisfies industry best practices as of this writing."
    minimum = Q("What is the default minimum TLS version the server accepts?")  # a number is asked for: "minimum"
    assert [tls[i:].split()[0] for i in answer_starts(tls, minimum)] == ["TLSv1.2,"]  # a version is one
    assert not answer_starts("It speaks IPv6 on every interface.", Q("What is the minimum number of interfaces?"))
    aside = "The castle was built by the Normans (1066 onwards)."
    assert "(1066" not in [aside[i:].split()[0] for i in answer_starts(aside, Q("Who built the castle?"))]



def test_a_name_built_on_a_question_word_starts_an_answer():
    """"Under systemd, what should I use for network time synchronisation?" was answered "NTP" from the runner-up:
    "systemd-timesyncd" of the best sentence began with a question word, so no answer started there; a name that
    joins one to other words by hyphens is new (a hyphenated phrase of the question's own words is not)."""
    ntp = "Under systemd, use systemd-timesyncd for the network time synchronization instead."
    starts = [ntp[i:].split()[0] for i in answer_starts(ntp, Q("Under systemd, what should I use for network time "
                                                                "synchronisation?"))]
    assert "systemd-timesyncd" in starts and "systemd," not in starts
    apt = '"apt-get source" and "apt-cache showsrc" commands require "deb-src" entry in "/etc/apt/sources.list".'
    starts = [apt[i:].split()[0] for i in answer_starts(apt, Q("What does apt-get source need in sources.list?"))]
    assert "apt-cache" not in starts and '"apt-cache' not in starts  # the question says "apt" only in "apt-get"
    pitr = "It offers point-in-time recovery from a base backup."
    assert "point-in-time" not in [pitr[i:].split()[0] for i in answer_starts(pitr, Q("What offers point in time "
                                                                                     "recovery?"))]

def test_candidate_spans_stop_only_at_word_ends(generator):
    sentence = "The class DTIME(f(n)) holds 76,000 to 540,000 problems."
    spans = candidate_spans(sentence, Q("What holds problems?"), generator.encode)
    assert spans
    ends = set()
    for span in spans:
        for k in span.ends:
            ends.add(generator.decode(span.tokens[:k]))
    assert "DTIME(f(n))" in ends and "76,000 to 540,000" in ends
    assert "76" not in ends and "DTIME(f(n" not in ends
    crowds = "The final usually draws crowds of over 12 million people along the river."
    ends = {generator.decode(span.tokens[:k]) for span in candidate_spans(crowds, Q("How many come?"), generator.encode)
            for k in span.ends}
    assert "12 million" in ends and "12" not in ends  # a number keeps its magnitude
    assert not any(end.endswith(" along") for end in ends)  # nor does an answer end on a preposition
    gold = "Victoria produced one third of the world's gold in 1851–1860."
    ends = {generator.decode(span.tokens[:k]) for span in candidate_spans(gold, Q("How much did it mine?"),
                                                                                  generator.encode)
            for k in span.ends}
    assert "one third of the world's gold" in ends and "one third of the world's" not in ends  # no possessive end
    hd = "Sky+ HD material is broadcast using MPEG-4 and most of the HD material uses the DVB-S2 standard."
    ends = {generator.decode(span.tokens[:k]) for span in candidate_spans(hd, Q("What is Sky+ HD using?"),
                                                                                generator.encode)
            for k in span.ends}
    assert "MPEG-4" in ends and not any(end.endswith(" uses") for end in ends)  # no verb without its object
    router = "The range has three boxes (Sky Q, Sky Q Mini), a broadband router (Sky Q Hub) and apps."
    for span in candidate_spans(router, Q("What is the router?"), generator.encode):
        for k in span.ends:
            text = generator.decode(span.tokens[:k])
            assert text.count("(") == text.count(")") and not text.startswith("("), text
            assert "), a broadband router (" not in text or text.endswith(")"), text

    # A quantity keeps its unit and ends inside the brackets it is given in (the sixth unseen set's Exim page was
    # answered "7"); a name inside brackets still ends with them or not at all ("Vic" answers no "Where …?").
    exim = ("When it consults the data during a delivery it ignores any that is older than the value set in "
            "retry_data_expire (default 7 days).")
    ends = {generator.decode(span.tokens[:k]) for span in candidate_spans(
        exim, Q("How old can retry hints data get before Exim ignores it by default?"), generator.encode)
        for k in span.ends}
    assert "7 days" in ends and "7" not in ends
    victoria = "Victoria (abbreviated as Vic) is a state in the south-east of Australia."
    ends = {generator.decode(span.tokens[:k]) for span in candidate_spans(victoria, Q("Where is Victoria?"),
                                                                            generator.encode) for k in span.ends}
    assert "Vic" not in ends and "Australia" in ends


def test_a_name_in_capitals_with_a_digit_is_new_where_the_question_says_its_first_part():
    """"Which HMAC algorithm …?" over '… the defaults are "tsig-key", HMAC-SHA256, and 256 bits, respectively.' was
    answered "256 bits" (sixth unseen set): "HMAC-SHA256" was no start, the question saying "HMAC"."""
    tsig = ('The key name, algorithm, and size can be specified by command-line parameters; the defaults are '
            '"tsig-key", HMAC-SHA256, and 256 bits, respectively.')
    question = Q("If I run tsig-keygen without options, which HMAC algorithm does the generated key use?")
    assert tsig.index("HMAC-SHA256") in answer_starts(tsig, question)
    saxon = tsig.replace("HMAC-SHA256", "Anglo-Saxon")
    assert saxon.index("Anglo") not in answer_starts(saxon, Q("Which Anglo dialect does the key use?"))


def test_a_contracted_opener_reads_as_written_out():
    """"What's the command to make a TSIG secret …?" (sixth unseen set) was read as no how-to question at all."""
    contracted = QuestionShape.of("What's the command to make a TSIG secret that two of my servers will share?")
    assert contracted.howto and contracted.procedure and contracted.text.startswith("What's")
    assert contracted == dataclasses.replace(QuestionShape.of("What is the command to make a TSIG secret that two of my "
                                                              "servers will share?"), text=contracted.text)
    assert QuestionShape.of("Where's the journal kept?").place

    # A leading phrase that opens with a preposition and a question word is the question itself: not Yes or No.
    order = QuestionShape.of("In what order of precedence, highest first, does git consult the places ignore "
                             "patterns come from?")
    assert not order.yes_no
    assert QuestionShape.of("If I track sid, do I get security updates?").yes_no


def test_span_constraint_masks_to_the_spans_and_ends_only_at_their_ends():
    spans = [TokenSpan((5, 6, 7), frozenset({2, 3})), TokenSpan((5, 8), frozenset({2}))]
    constraint = SpanConstraint(spans, eos_ids=[0], stop_ids=[1])
    logits = np.arange(10, dtype=np.float32).reshape(1, 10)
    masked = constraint.apply(logits.copy())
    assert set(np.flatnonzero(np.isfinite(masked[0]))) == {5}  # only a span's first token; no end yet
    constraint.advance(5)
    masked = constraint.apply(logits.copy())
    assert set(np.flatnonzero(np.isfinite(masked[0]))) == {6, 8}
    constraint.advance(6)
    masked = constraint.apply(logits.copy())
    assert set(np.flatnonzero(np.isfinite(masked[0]))) == {0, 7}  # the first span may stop after two tokens
    constraint.advance(7)
    masked = constraint.apply(logits.copy())
    assert set(np.flatnonzero(np.isfinite(masked[0]))) == {0}  # nothing can follow: the reply must end
    # A span's prior is added to its first token only (the larger, where two spans share it).
    spans = [TokenSpan((5, 6), frozenset({2}), prior=2.0), TokenSpan((3,), frozenset({1})),
             TokenSpan((5, 4), frozenset({2}), prior=-1.0)]
    constraint = SpanConstraint(spans, eos_ids=[0])
    masked = constraint.apply(logits.copy())
    assert masked[0, 5] == 7.0 and masked[0, 3] == 3.0
    constraint.advance(5)
    assert constraint.apply(logits.copy())[0, 6] == 6.0


def toy_extend(model):
    """``best_span``'s ``extend`` over a toy ``model`` of the tokens fed since the prompt."""
    fed: list[int] = []

    def extend(tokens: list[int], restart: bool) -> np.ndarray:
        if restart:
            fed.clear()
        fed.extend(tokens)
        return model(tuple(fed))

    return extend


def test_span_search_scores_whole_phrases_where_greedy_commits_to_its_first_token():
    """A toy model over ten tokens: it likes token 5 first, but after 5 it would rather go on than stop where
    the span must end; after 3 it stops at once. Greedy (width 1) copies "5 6", the search "3"; an end's bonus
    and the lead bonus are added to the whole phrase's score; ``seen`` gets every phrase scored."""
    spans = (TokenSpan((5, 6), frozenset({2}), bonus=((2, 0.0),)), TokenSpan((3,), frozenset({1}), bonus=((1, 0.0),)))

    def model(history: tuple[int, ...]) -> np.ndarray:
        logits = np.zeros(10, dtype=np.float32)
        logits[{(): 5, (5,): 6, (5, 6): 7, (3,): 0}[history]] = 6.0
        if history == ():
            logits[3] = 5.0
        return logits.reshape(1, 10)

    def search(width: int, lead: float = 0.0, seen: list | None = None, bonus: float = 0.0,
               limit: int = 16) -> list[int]:
        chosen = [dataclasses.replace(spans[0], bonus=((2, bonus),)), spans[1]]
        return best_span(model(()), SpanConstraint(chosen, eos_ids=[0], stop_ids=[1]), toy_extend(model),
                         SpanSearch(width, 1.0, lead), limit, seen)

    assert search(1) == [5, 6]
    seen: list = []
    assert search(4, seen=seen) == [3]
    assert sorted(tokens for tokens, *_ in seen) == [[3], [5, 6]]
    assert search(4, bonus=6.0) == [5, 6]  # an end's bonus counts
    assert search(4, lead=6.0) == [5, 6]  # the lead bonus counts for the likeliest first token only
    assert search(4, bonus=6.0, limit=1) == [3]  # no phrase longer than ``limit`` tokens


def test_span_search_follows_the_other_way_where_spans_sharing_a_first_token_part():
    """Two phrases begin with the same token ("/etc/" of "/etc/nsswitch.conf" and "/etc/resolv.conf"): the toy
    model would rather go on with the second (6), whose span's start has a prior of -3 (a runner-up sentence's);
    followed greedily, the first (4) is never scored and the larger prior of the shared first token is counted
    for the second. With branches, both are scored, each with its own span's prior, and the first wins."""
    spans = (TokenSpan((5, 4), frozenset({2}), prior=0.0), TokenSpan((5, 6), frozenset({2}), prior=-3.0))

    def model(history: tuple[int, ...]) -> np.ndarray:
        logits = np.zeros(10, dtype=np.float32)
        if history == ():
            logits[5] = 6.0
        elif history == (5,):
            logits[6], logits[4] = 6.0, 4.5
        else:
            logits[0] = 6.0  # stop
        return logits.reshape(1, 10)

    def search(branches: int, seen: list | None = None) -> list[int]:
        return best_span(model(()), SpanConstraint(spans, eos_ids=[0]), toy_extend(model),
                         SpanSearch(4, 1.0, 0.0, branches), 16, seen)

    assert search(0) == [5, 6]
    seen: list = []
    assert search(1, seen) == [5, 4]
    assert sorted((tokens, prior) for tokens, _, prior, _ in seen) == [([5, 4], 0.0), ([5, 6], -3.0)]


def test_a_searched_short_answer_is_a_whole_technical_token_the_question_asks_for(generator):
    """"Where does psql store its command-line history?": token by token the default model began the sentence
    it meant to copy ("The command-line"); the span search answers with the file."""
    from rag.answering.evidence import SPAN_WEIGHTS, short_answer_messages

    question = "Where does psql store its command-line history?"
    sentence = ("The command-line history is stored in the file ~/.psql_history, or %APPDATA%\\postgresql\\"
                "psql_history on Windows.")
    spans = candidate_spans(sentence, Q(question), generator.encode)
    assert any(bonus > 0 for span in spans for _, bonus in span.bonus)  # technical tokens asked for
    prompt = generator.prompt(short_answer_messages(question, sentence))
    text, _ = generator.generate(prompt.tokens, SamplingOptions(max_tokens=17, spans=tuple(spans),
                                                                span_search=SPAN_WEIGHTS.search(8)))
    assert text.strip() in sentence and "psql_history" in text


def test_a_list_asked_for_is_answered_with_every_item_the_phrase_names(generator):
    """"Which full-featured backup suites …?" was answered "Bacula" of "Bacula, Amanda, and BackupPC are …": the
    model's log-probability favours the shortest phrase; ``SpanWeights.listed`` weighs a phrase naming several
    items where several are asked for."""
    from rag.answering.evidence import SPAN_WEIGHTS, phrase_features, short_answer_messages

    question = "Which full-featured backup suites are meant for scheduled backups across the network?"
    sentence = ("Bacula, Amanda, and BackupPC are full featured backup suite utilities which are focused on regular "
                "backups over network.")
    assert phrase_features("Bacula, Amanda, and BackupPC", Q(question)).listed == 1.0
    assert phrase_features("Bacula", Q(question)).listed == 0.0
    assert phrase_features("Bacula, Amanda, and BackupPC", Q("Which suite is meant for backups?")).listed == 0.0
    spans = candidate_spans(sentence, Q(question), generator.encode)
    prompt = generator.prompt(short_answer_messages(question, sentence))
    text, _ = generator.generate(prompt.tokens, SamplingOptions(max_tokens=17, spans=tuple(spans),
                                                                span_search=SPAN_WEIGHTS.search(8)))
    # SmolLM2-135M (VNNI) scores the list -11.7 with the weight, -12.7 without: "regular backups" (-12.3) won then.
    # Only the winner is asserted; the runner-up's margin is too thin to hold on every CPU's int4 kernels.
    assert text.strip() == "Bacula, Amanda, and BackupPC"


def test_a_where_question_weighs_a_path_above_a_unit_name():
    """"Where does it keep the persistent logs?" (after "Which program reads the systemd journal?") was answered
    "systemd-journald.service" of a passage naming "/var/log/journal": both technical, the unit name likelier to the
    model. ``SpanWeights.located`` weighs a phrase that is a path where the question asks where."""
    from rag.answering.evidence import SPAN_WEIGHTS, phrase_features

    where = Q("Where does journald keep the persistent logs?")
    assert phrase_features("/var/log/journal", where).located == 1.0
    assert phrase_features('"~/.gnupg/gpg.conf"', where).located == 1.0
    assert phrase_features("systemd-journald.service", where).located == 0.0
    assert phrase_features("/var/log/journal", Q("Which program keeps the persistent logs?")).located == 0.0
    assert SPAN_WEIGHTS.bonus("/var/log/journal", where) > SPAN_WEIGHTS.bonus("systemd-journald.service", where)


def test_a_quoted_hyphenated_name_is_a_technical_token():
    """"Which make target gives me .deb packages?" was answered "menuconfig" of a passage saying 'use the "deb-pkg"
    target': a quoted lowercase name with a hyphen is code in documentation (a make target, a package), weighed as
    a technical token is; prose words with a hyphen, unquoted, are not."""
    from rag.answering.evidence import SPAN_WEIGHTS, phrase_features

    target = Q("I built a kernel from kernel.org sources; which make target gives me .deb packages?")
    assert phrase_features('the "deb-pkg" target', target).technical_asked == 1.0
    assert phrase_features('"linux-image-amd64"', target).technical == 1.0
    assert phrase_features("a well-known target", target).technical == 0.0
    assert phrase_features('a "Non-Free" section', target).technical == 0.0
    assert SPAN_WEIGHTS.bonus('the "deb-pkg" target', target) > SPAN_WEIGHTS.bonus("menuconfig", target) + 4

def test_constrained_generation_copies_a_span(generator):
    from rag.answering.evidence import short_answer_messages

    question = "How many Catholic schools were in Victoria?"
    spans = candidate_spans(VICTORIA_SENTENCE, Q(question), generator.encode)
    prompt = generator.prompt(short_answer_messages(question, VICTORIA_SENTENCE))
    text, stats = generator.generate(prompt.tokens, SamplingOptions(max_tokens=25, spans=tuple(spans)))
    assert text and text in VICTORIA_SENTENCE and stats.finish_reason == "stop"
    assert re.fullmatch(r"[\w,]+(?: [\w,]+)*", text) and not text.endswith(",")


def test_spans_are_placed_and_cut_by_the_question(generator):
    """The number next to the question's words is preferred; a span never runs on through the question;
    "U.S." is one word; clause openers never start an answer."""
    question = "How many Catholic schools were in Victoria?"
    by_word = start_priors(VICTORIA_SENTENCE, Q(question))
    priors = {VICTORIA_SENTENCE[s:].split()[0]: next(p for at, p in by_word.items() if at >= s)
              for s in answer_starts(VICTORIA_SENTENCE, Q(question))}
    assert priors["489"] == max(priors.values()) and priors["489"] > priors["1,548"]
    normans = "In 1066 the Normans won at Hastings."
    assert start_priors(normans, Q("When did the Normans win?"))[3] > \
        start_priors(normans, Q("What did the Normans win?"))[3]

    usgs = "The USGS has released a California Earthquake forecast which models Earthquake occurrence."
    texts = {generator.decode(span.tokens[:k]).strip()
             for span in candidate_spans(usgs, Q("Which organization released a California Earthquake forecast?"),
                                         generator.encode) for k in span.ends}
    assert "The USGS" in texts and "The USGS has released a California" in texts
    assert not any("forecast" in t for t in texts)  # the third of the question's words ends every span

    farms = "In one of the richest agricultural regions in the U.S., cattle and citrus were major industries."
    texts = {generator.decode(span.tokens[:k]).strip()
             for span in candidate_spans(farms, Q("What industries were in the regions?"), generator.encode)
             for k in span.ends}
    assert "U.S., cattle" in texts and not any(t == "U" or t.endswith(" U") for t in texts)
    glued = "The average time taken for sorting is O(n log n), and the midpoint lies at 37° 9' north."
    texts = {generator.decode(span.tokens[:k]).strip()
             for span in candidate_spans(glued, Q("What is the average sorting time?"), generator.encode)
             for k in span.ends}
    assert "37° 9' north" in texts and not any(t.endswith((" O", "37", " at")) for t in texts), texts
    exactly = "The midpoint lies at exactly 37 degrees, south of San Jose."
    texts = {generator.decode(span.tokens[:k]).strip()
             for span in candidate_spans(exactly, Q("Where is the midpoint?"), generator.encode) for k in span.ends}
    assert "lies at exactly 37 degrees" in texts and "lies at exactly" not in texts, texts
    opener = "Although time and space are well known, any complexity measure can be a resource."
    assert not any(opener[s:].startswith("Although") for s in answer_starts(opener, Q("What is a resource?")))


def test_align_and_clean():
    sentences = [(2, "Rollo, a Viking leader, swore fealty to King Charles III in 911.")]
    assert align("rollo", sentences) == (2, sentences[0][1], "Rollo")
    assert align("King Charles III", sentences)[2] == "King Charles III"
    assert align("charles iii!", sentences)[2] == "Charles III"
    assert align("Napoleon", sentences) is None and align("", sentences) is None
    complexity = [(1, "It is complex, and whether P equals NP is open.")]
    assert align("p", complexity)[2] == "P"  # the word, never the p inside "complex"
    assert align("x", complexity) is None
    assert clean_reply(' "Rollo [1]." ') == "Rollo"
    assert clean_reply("[1]\n\n[2]\n\n[3]") == ""


def test_sentence_quote_offsets_survive_line_breaks():
    chunk = "Title line\nFirst sentence here. Second\nsentence there."
    quote = sentence_quote(3, chunk, "Second sentence there.")
    assert quote is not None and chunk[quote.start:quote.end] == quote.quote == "Second\nsentence there."
    assert sentence_quote(3, chunk, "Not in it.") is None


def test_cut_cleanly_ends_at_a_sentence_or_word():
    assert cut_cleanly("One full sentence here. And then a cut mid-wo") == "One full sentence here. …"
    assert cut_cleanly("no sentence end at all but a cut wo") == "no sentence end at all but a cut …"


def test_question_shapes():
    assert Q("Why did the Normans invade England?").explanatory and Q("Describe the climate.").explanatory
    assert not Q("How many schools are there?").explanatory
    assert Q("Who was Rollo?").explanatory and Q("What is photosynthesis?").explanatory  # definitions
    assert not Q("What is the capital of Victoria?").explanatory
    assert not Q("What is Melbourne's population?").explanatory and not Q("Where is Victoria?").explanatory
    assert holds_the_asked_type("In ten years the population grew from 76,000 to 540,000.", Q("How many live there?"))
    assert not holds_the_asked_type("The area was inhabited by the Koori.", Q("How many people live in Melbourne?"))
    assert not holds_the_asked_type("The Koori lived there.", Q("What is Melbourne's population?"))
    assert holds_the_asked_type("The Koori lived there.", Q("Who lived there?"))
    # A time without a number answers "when" too; it is not a count.
    assert holds_the_asked_type("The rocket launches from the harbour every Tuesday at noon.",
                                Q("When does it launch?"))
    assert not holds_the_asked_type("The rocket launches every Tuesday.", Q("How many rockets launch?"))
    assert defines("Rollo", "…and the famed Viking ruler Rollo, and was situated in Neustria.")
    assert defines("Victoria", "Victoria (abbreviated as Vic) is a state in the south-east of Australia.")
    assert not defines("Rollo", "Before Rollo's arrival, its populations did not differ from Picardy.")
    assert not defines("Victoria", "Victoria is currently governed by the Labor Party.")
    assert not Q("Who was the leader of the Normans who swore fealty to King Charles III?").explanatory
    assert refers_back("When did he die?") and refers_back("And in 1900?") and refers_back("What about there?")
    assert not refers_back("What is the boiling point of mercury?") and not refers_back("Who discovered penicillin?")
    assert not refers_back("How many continents are there?") and refers_back("Why?")
    assert not refers_back("Who won the 2018 FIFA World Cup?")
    # "that" standing for what was said before, not a relative or a conjunction (dev set follow-ups, squad2-dev)
    assert refers_back("What does that do to the history?") and refers_back("Which lock does that one take?")
    assert refers_back("How do I get rid of the control characters in that recording?")
    assert not refers_back("Which file is the one that sets the hostname?")
    assert not refers_back("How is one way that one should not view non-determinism?")


def test_squad_scoring():
    assert token_f1("the Battle of Hastings", ["Battle of Hastings"]) == 1.0
    assert 0 < token_f1("at Hastings in 1066", ["Battle of Hastings"]) < 1
    assert exact_match("The USGS", ["USGS"]) and not exact_match("USGS said", ["USGS"])
    assert len(off_topic_questions()) >= 50


# --------------------------------------------------------------------------- the answer flow
@pytest.mark.parametrize("question", [
    "Who was the leader of the Normans who swore fealty to King Charles III?",
    # (not "In what country is Normandy located?": its best sentence, "…Normandy, a region in France", shares too
    # little with it and it is among the answerable questions the answerability threshold refuses, ~8% on squad2-dev)
    "What is the capital of Victoria?", "How many Catholic schools were in Victoria?",
    "When did the Normans conquer England?",
])
def test_answer_first_then_verified_evidence(service: AnswerService, question: str):
    result = service.ask(AnswerRequest(question=question, options=options(max_tokens=25)))
    assert_trustworthy(result)
    assert len(result.answer.split()) <= 16
    assert result.answer in result.evidence[0].quote  # the answer is copied from its quote, as spelled there
    assert result.answer.count("(") == result.answer.count(")")
    assert not re.search(r"\b(?:the|of|and|to|a|in)$", result.answer), f"a cut phrase: {result.answer!r}"


def test_rollo_answer_and_its_quote(service: AnswerService):
    result = service.ask(AnswerRequest(question="Who was the leader of the Normans who swore fealty to King "
                                                "Charles III?", options=options(max_tokens=25)))
    assert_trustworthy(result)
    assert any("Rollo" in q.quote for q in result.evidence)


def test_stream_carries_exactly_the_answer(service: AnswerService):
    import asyncio

    async def collect():
        return [item async for item in service.stream(AnswerRequest(
            question="What is the capital of Victoria?", options=options(max_tokens=25)))]

    items = asyncio.run(collect())
    result = items[-1]
    assert isinstance(result, AnswerResult) and "".join(items[:-1]) == result.answer


def test_degenerate_reply_falls_back_to_the_best_quote(service: AnswerService):
    prepared = service.prepare(AnswerRequest(question="What is the capital of Victoria?", options=options()))
    for reply in ("[1]\n\n[2]\n\n[3]\n\n[1]", "", "Totally invented words nowhere"):
        result = service.finish(prepared, reply, None)
        assert_trustworthy(result)
        assert result.answer == prepared.ranked[0][1] == result.evidence[0].quote


def test_explanatory_question_gets_cited_sentences(service: AnswerService):
    result = service.ask(AnswerRequest(question="Describe the climate of Victoria.", options=options()))
    assert_trustworthy(result)
    labelled = re.findall(r"(.+?) \[(\d+)\]", result.answer)
    assert labelled and all(sentence.strip() in {q.quote for q in result.evidence} for sentence, _ in labelled)


def test_off_topic_refused_alone_and_as_a_later_turn(service: AnswerService):
    opts = options(max_tokens=25)
    messages = []
    for question in ("Who was the leader of the Normans who swore fealty to King Charles III?",
                     "What is the capital of Victoria?"):
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": service.ask(AnswerRequest.conversation(
            messages, options=opts)).answer})
    for off_topic in ("What is the boiling point of mercury?", "Who won the 2018 FIFA World Cup?",
                      "How long does it take light from the Sun to reach Earth?",  # "it": checked on the evidence
                      "What is the freezing point of water in Fahrenheit?"):  # no word of it in any passage
        alone = service.ask(AnswerRequest(question=off_topic, options=opts))
        later = service.ask(AnswerRequest.conversation([*messages, {"role": "user", "content": off_topic}],
                                                       options=opts))
        assert alone.abstained and later.abstained and later.answer == ABSTENTION_MESSAGE


def test_followup_that_refers_back_still_uses_the_conversation(service: AnswerService):
    messages = [{"role": "user", "content": "Who was Rollo?"},
                {"role": "assistant", "content": "a Viking leader"},
                {"role": "user", "content": "Which king did he swear fealty to?"}]
    result = service.ask(AnswerRequest.conversation(messages, options=options(max_tokens=25)))
    assert_trustworthy(result)
    assert "normans" in result.sources[result.citations[0] - 1].path.lower()


def test_followup_with_a_pronoun_is_answered_from_the_conversation(service: AnswerService):
    # The the Asking page's own example (docs/asking.md): the evidence says "settlement", the question "settled".
    messages = [{"role": "user", "content": "Where is Victoria?"}]
    messages.append({"role": "assistant", "content": service.ask(AnswerRequest.conversation(
        messages, options=options(max_tokens=25))).answer})
    messages.append({"role": "user", "content": "When was it first settled?"})
    result = service.ask(AnswerRequest.conversation(messages, options=options(max_tokens=25)))
    assert_trustworthy(result)
    assert result.answer == "1803" and "settlement" in result.evidence[0].quote


def test_a_number_asked_for_and_none_in_the_evidence_is_refused(service: AnswerService):
    result = service.ask(AnswerRequest(question="How many people live in Melbourne?", options=options(max_tokens=25)))
    assert result.abstained and result.abstain_reason == "weak_evidence" and not result.evidence
    answered = service.ask(AnswerRequest(question="How many Catholic schools were in Victoria?",
                                         options=options(max_tokens=25)))
    assert not answered.abstained and answered.answer[0].isdigit()  # a figure (the 135M model often picks 1,548)


def test_definition_question_quotes_what_defines_its_subject(service: AnswerService):
    result = service.ask(AnswerRequest(question="Who was Rollo?", options=options()))
    assert_trustworthy(result)
    assert re.search(r"(?:ruler|leader) Rollo", result.evidence[0].quote), result.evidence[0].quote
    where = service.ask(AnswerRequest(question="Where is Victoria?", options=options(max_tokens=25)))
    assert_trustworthy(where)
    assert where.answer == "Australia" and "is a state in the south-east of Australia" in where.evidence[0].quote


def test_plain_chat_cut_by_the_limit_says_so(service: AnswerService):
    result = service.ask(AnswerRequest(question="Write a long story about a dragon and a knight.",
                                       use_context=False, options=options(max_tokens=12)))
    assert result.finish_reason == "length" and result.answer.endswith("…")
    assert not re.search(r"\w…$", result.answer)  # never cut mid-word


# --------------------------------------------------------------------------- eval: what a reader sees
def test_eval_reports_reader_metrics_and_dumps(settings: Settings, tmp_path: Path):
    from conftest import SQUAD_DOCS

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "normans.md").write_text((SQUAD_DOCS / "normans.md").read_text(encoding="utf-8"), encoding="utf-8")
    rows = [r for r in squad_rows() if r["document"] == "normans.md"][:40]
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    distractors = Path(__file__).resolve().parent.parent / "examples" / "docs"
    dump = tmp_path / "dump.jsonl"
    report = evaluate(settings, questions, docs, None, 5, 3, 0, log=lambda *a, **k: None,
                      distractors=[distractors], dump=dump)
    for key in ("answer_f1", "answer_em", "gold_in_answer", "gold_in_first_sentence", "gold_in_evidence",
                "answer_words_median", "cut_by_token_limit", "citation_precision", "mislabelled_answers",
                "off_topic_refused_alone", "off_topic_refused_third_turn", "total_ms_p50"):
        assert key in report, key
    assert report["citation_precision"] == 1.0 and report["mislabelled_answers"] == 0
    assert report["cut_by_token_limit"] == 0.0
    assert report["off_topic_questions"] >= 50
    assert "answer_f1" in report["with_distractors"]
    records = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    runs = {r["run"] for r in records}
    assert {"main", "distractors", "off_topic_alone", "off_topic_third_turn"} <= runs
    answered = [r for r in records if r["run"] == "main" and not r["abstained"]]
    assert answered and all(r["evidence"] and "f1" in r["verdict"] or r["unanswerable"] for r in answered)


def test_sentences_break_at_blank_lines_and_not_after_titles():
    """A new user's note: "Dr. Mira Quell" was cut into the answer "Dr", and the title line was read as the
    head of the first sentence ("Zorblax Widget Notes  The Zorblax")."""
    from rag.core.text import split_sentences

    text = "Zorblax Widget Notes\n\nThe widget was invented by Dr. Mira Quell in 1998. It weighs 340 grams."
    assert split_sentences(text) == ["Zorblax Widget Notes", "The widget was invented by Dr. Mira Quell in 1998.",
                                     "It weighs 340 grams."]
    assert sentence_quote(1, text, "The widget was invented by Dr. Mira Quell in 1998.").start == 22
    # The Python manual's "-E: Ignore all PYTHON* environment variables, e.g. PYTHONPATH and PYTHONHOME, that might
    # be set." was cut after "e.g." and answered "e.g".
    assert split_sentences("Ignore all PYTHON* variables, e.g. PYTHONPATH and PYTHONHOME. Then, i.e. Later, go.") == [
        "Ignore all PYTHON* variables, e.g. PYTHONPATH and PYTHONHOME.", "Then, i.e. Later, go."]


# --------------------------------------------------------------------------- technical tokens, question kinds
def span_ends(generator, sentence: str, question: str) -> set[str]:
    return {generator.decode(span.tokens[:k]) for span in candidate_spans(sentence, Q(question), generator.encode)
            for k in span.ends}


def test_answers_never_end_inside_a_technical_token_or_a_clause(generator):
    ends = span_ends(generator, 'The rules are read from "/etc/rsyslog.conf" at start.', "Which file holds the rules?")
    assert '"/etc/rsyslog.conf' in ends or "/etc/rsyslog.conf" in {e.strip('"') for e in ends}
    assert not {e.strip('"') for e in ends} & {"/etc/rsyslog", "/etc", "/etc/rsyslog.conf\" at"}
    ends = span_ends(generator, "Boot with net.ifnames=0 on the kernel command line.", "Which parameter to boot with?")
    assert "net.ifnames=0" in ends and "net" not in ends and "net.ifnames" not in ends
    ends = span_ends(generator, "Access is controlled by /etc/cron.allow and /etc/cron.deny files.",
                     "What controls access?")
    assert not any(e.endswith(("/etc/cron", "cron.allow and /etc/cron")) for e in ends)
    ends = span_ends(generator, "If the Web can not be reached you can set a proxy for each file that a user opens.",
                     "What can be set?")
    assert not any(e.split()[-1] in {"can", "that", "a", "each", "you", "If"} for e in ends), ends
    # a token's closing "/" or "*" is part of it (not "http" of the URL); a path is new though it begins like the
    # question's own
    ends = span_ends(generator, 'Point your web browser to "http://localhost:631/" .', "Which URL opens CUPS?")
    assert "http://localhost:631/" in ends and not {"http", "http://localhost:631"} & ends, ends
    ends = span_ends(generator, 'Look for "/var/lib/dpkg/status-old" or "/var/backups/dpkg.status.*".',
                     "Where is a backup copy of /var/lib/dpkg/status?")
    assert {"/var/lib/dpkg/status-old", "/var/backups/dpkg.status.*"} <= ends, ends
    assert "/var/backups/dpkg.status" not in ends
    # "IT" of "the IT Security team" is an acronym, not the pronoun: the answer may start there
    ends = span_ends(generator, "Contractors need the approval of the IT Security team before they get access.",
                     "Who approves access for contractors?")
    assert "IT Security team" in ends


def test_fragment_checker_of_eval():
    def result(answer: str, quote: str, kind: str = "phrase") -> AnswerResult:
        return AnswerResult(question="q", answer=answer, abstained=False, abstain_reason=None, citations=[1],
                            evidence=[{"source": 1, "quote": quote, "start": 0, "end": len(quote)}], sources=[],
                            context=[], model="m", finish_reason="stop", metrics={}, answer_kind=kind)
    from app.bench.evaluate import is_fragment
    import msgspec
    convert = lambda r: msgspec.convert(msgspec.to_builtins(r), AnswerResult)
    assert is_fragment("/etc/rsyslog", convert(result("/etc/rsyslog", "Edit /etc/rsyslog.conf now.")))
    assert is_fragment("net", convert(result("net", "Set net.ifnames=0 there.")))
    assert is_fragment("http", convert(result("http", "Open http://localhost:631/ now.")))
    assert is_fragment("each file that a user", convert(result("each file that a user", "each file that a user opens")))
    # a setting's value is no dangling word (tests/data/unseen-docs-5: "smtpd_helo_required = no" was counted one)
    helo = 'For this reason, the requirement is disabled by default ("smtpd_helo_required = no").'
    assert not is_fragment("smtpd_helo_required = no", convert(result("smtpd_helo_required = no", helo)))
    assert is_fragment("there is no", convert(result("there is no", "there is no default")))
    assert not is_fragment("/etc/rsyslog.conf", convert(result("/etc/rsyslog.conf", "Edit /etc/rsyslog.conf.")))
    assert not is_fragment("No", convert(result("No", "Alcohol is never reimbursed.", "yes_no")))
    assert not is_fragment("Nein", convert(result("Nein", "Alkohol wird nie erstattet.", "yes_no")))
    # a list's items, each (tests/data/unseen-docs-2: "$LC_" of '"$LC_*"')
    overridden = 'Each feature of "$LANG" may be overridden by setting "$LC_*" variables.'
    assert is_fragment("$LANG; $LC_", convert(result("$LANG; $LC_", overridden, "list")))
    assert not is_fragment("$LANG; $LC_*", convert(result("$LANG; $LC_*", overridden, "list")))
    from rag.answering.evidence import variables_in
    assert variables_in(overridden) == ["$LANG", "$LC_*"]  # a family of variables is one name


def test_a_leading_clause_may_be_joined_to_the_question_by_a_conjunction():
    """"A random read … costs far more than four sequential ones, so why is random_page_cost only 4.0 …?" was read as
    no question at all (answered "higher"), as "And how do I restore such an archive?" was; and "Which file decides
    whether …?", "Which timeit option sets how many times …?" as lists (of "decides", "sets")."""
    assert Q("A random read costs far more than four sequential ones, so why is random_page_cost only 4.0?").explains
    assert Q("reindexdb already prompts for a password, so why would I bother passing -W?").explains
    assert Q("And how do I restore such an archive?").procedure
    assert Q("I have two dumps, but which option makes pg_restore list them?").option
    for question in ("Which file decides whether hostnames are looked up in /etc/hosts first?",
                     "Which timeit option sets how many times to repeat the timer?",
                     "Which psql meta-command shows how long each statement takes?",
                     "FreeType draws the glyphs, but which library decides which font gets chosen?"):
        assert not Q(question).listing, question
    assert Q("Which directories get cleaned out at every boot?").listing
    assert Q("Which data formats can COPY read and write?").listing
    # a plural before the verb of another subject asks for several (tests/data/unseen-docs: "Which environment
    # variables does vacuumdb read …?" was answered "PGDATABASE"); a singular noun in -us or -is does not
    for question in ("Which environment variables does vacuumdb read for its connection settings?",
                     "Out of the box, which privileges does PUBLIC get on a new database?",
                     "On which operating systems is peer authentication available?"):
        assert Q(question).listing, question
    for question in ("What status does pg_isready return?", "What thesis specifies that a relationship exists?",
                     "What census showed the population?"):
        assert not Q(question).listing, question


def test_question_kinds_and_commands():
    from rag.answering.evidence import commands_in
    assert Q("Is alcohol reimbursed?").yes_no and Q("Can I write Pin: release a=sid?").yes_no
    assert not Q("Is it stable or testing?").yes_no and not Q("What is reimbursed?").yes_no
    assert Q("How do I purge removed packages?").howto and Q("Which option makes pg_dump compress?").howto
    assert not Q("How does the vacuum daemon work?").howto
    assert Q("What is the basic command to dump a database into a file?").howto
    assert not Q("What is the 127.0.1.1 line in /etc/hosts for?").howto
    # the remedy for a problem is a how-to question; the steps towards a goal are a list
    assert Q("APT keeps giving GPG error BADSIG; what should I do?").howto
    assert not Q("What should I do to stop people from getting root?").howto
    # what something is good for, the point of it: an explanation, not a name
    assert Q("What is DKMS good for?").explains and Q("What is the point of the initramfs stage of booting?").explains
    assert not Q("What is DKMS?").explains and not Q("Which port is good for IMAP?").explains
    # after what the asker says first: a leading clause, a statement
    assert Q("If I track sid, do I still need the security line?").yes_no and Q("By default, does rsync …?").yes_no
    assert Q("pg_hba.conf says md5 but the password is SCRAM. Will the login still work?").yes_no
    # a long one (101 characters before its comma; a cap of 80 read the question as asking for a path)
    assert Q("If the same option appears in my ~/.aptitude/config and also in the system-wide /etc/apt/apt.conf, "
             "does my own file's value win?").yes_no
    assert Q("From a rescue CD, how do I install an old package?").howto
    assert Q("Now about USB sticks: where does GNOME mount them?").place
    assert Q("A dpkg -i failed half-way; how do I configure the partially installed packages?").howto
    assert Q("Con libpam-ldap en Debian, ¿en qué archivo se guarda la contraseña?").place
    # ... but not a question word's own clause
    assert not Q("How many problems, formerly believed hard, did Karp's paper address?").yes_no
    assert not Q("Wie ändere ich, wie lange sudo sich mein Passwort merkt?").numeric
    # not the one the sentence says to run no more
    assert commands_in('Use "sudo -H aptitude …" instead of "sudo aptitude …".') == ["sudo -H aptitude"]
    assert commands_in("# dpkg --configure -a") == ["dpkg --configure -a"]
    assert commands_in("$ sudo systemctl stop exim4 $ sudo dpkg-reconfigure exim4-config") == [
        "sudo systemctl stop exim4", "sudo dpkg-reconfigure exim4-config"]
    assert commands_in('Uncomment "start_smartd=yes" in the "/etc/default/smartmontools" file.') == [
        "start_smartd=yes", "/etc/default/smartmontools"]
    assert commands_in('Melbourne is described as the "sporting capital of Australia".') == []


def test_a_program_or_a_variable_asked_for_is_named_not_a_path_an_option_or_a_url():
    from rag.answering.compress import Sentence, candidate_sentences
    from rag.answering.service import commands_for
    asked = Q("Which command shows the UUID of a block device?")
    assert asked.command and Q("Which package provides the lpr command?").command
    assert not Q("Which file do I list the APT lines in?").command and not Q("How do I mount an ISO image?").command
    sentences = [Sentence('mount(8) with "-U" option can mount a block device using UUID, instead of using its file '
                          'name such as "/dev/sda3".', 0, 0),
                 Sentence("You can probe UUID of a block special device with blkid(8).", 0, 1)]
    assert [command for command, _, _ in commands_for(sentences, [0, 1], asked)] == ["mount(8)", "blkid(8)"]
    # any other how-to question keeps the option and the path the sentence quotes, and names no manual page
    assert [command for command, _, _ in commands_for(sentences, [0, 1], Q("How do I mount by UUID?"))] == [
        "-U", "/dev/sda3"]
    see = 'See documentations at http://www.netfilter.org/documentation/ (or in "/usr/share/doc/iptables/html/").'
    starts = [see[i:].split()[0] for i in answer_starts(see, Q("Which commands save the netfilter rules?"))]
    assert starts and not any(word.startswith(("http", "/", '"/')) for word in starts)
    # a variable asked for: the variables the sentences name, not the shell line nor the question's own
    pgdata = [Sentence("Without -D, the server will try to use the data directory named by the environment variable "
                       "PGDATA.", 0, 0), Sentence("$ postgres -D /usr/local/pgsql/data", 0, 1)]
    variable = Q("Which environment variable does postgres use for the data directory when -D is not given?")
    assert variable.variable and not asked.variable
    assert [command for command, _, _ in commands_for(pgdata, [0, 1], variable)] == ["PGDATA"]
    lang = [Sentence('The "$LANG" variable is referred first and it can be overridden by the "$LC_TIME" or "$LC_ALL" '
                     'exported environment variables.', 0, 0)]
    assert [command for command, _, _ in commands_for(lang, [0], Q("Which environment variables override $LANG?"))] \
        == ["$LC_TIME", "$LC_ALL"]
    # the question may name a variable without its "$" (tests/data/unseen-docs-2: "$LC_*; $LANG" was the answer to
    # "Which variable takes precedence over both LANG and the individual LC_* category settings?")
    overridden = [Sentence('Each detail feature of "$LANG" environment variable may be overridden by setting "$LC_*" '
                           'variables.', 0, 0),
                  Sentence('These environment variables can be overridden again by setting "$LC_ALL" variable.', 0, 1)]
    assert [command for command, _, _ in commands_for(overridden, [0, 1], Q(
        "Which variable takes precedence over both LANG and the individual LC_* category settings?"))] == ["$LC_ALL"]
    # what the question itself names is what it asks about, not its answer (tests/data/unseen-docs: "How do I change
    # which program /usr/bin/editor launches system-wide?" was answered "/usr/bin/editor")
    editor = candidate_sentences(['Debian provides unified access to the system default editor via command '
                                  '"/usr/bin/editor".\n\nYou can change it as the following.\n\n'
                                  '$ sudo update-alternatives --config editor'])
    assert [command for command, _, _ in commands_for(editor, [0, 1, 2], Q(
        "How do I change which program /usr/bin/editor launches system-wide?"))] == [
        "sudo update-alternatives --config editor"]
    assert [command for command, _, _ in commands_for(editor, [0, 1, 2], Q("How do I change the default editor?"))] \
        == ["/usr/bin/editor", "sudo update-alternatives --config editor"]
    reportbug = "When you file a bug report, please use reportbug(1) command."
    priors = start_priors(reportbug, Q("Which command should I use to file a Debian bug report?"))
    assert max(priors, key=priors.get) == reportbug.index("reportbug")
    # A where question over technical documentation asks for a path: "under modern desktop environment" was the
    # answer to "Where does a modern desktop mount a USB stick?".
    mount = 'Mount point under modern desktop environment is chosen as "/media/username/disk_label" by default.'
    usb = Q("Where does a modern desktop mount a USB stick?")
    by_word = start_priors(mount, usb)
    priors = {mount[s:].split()[0]: next(p for at, p in by_word.items() if at >= s) for s in answer_starts(mount, usb)}
    assert max(priors, key=priors.get) == '/media/username/disk_label"', priors


def test_an_explanation_takes_the_sentence_its_best_one_leans_on_or_that_leans_on_it():
    from rag.answering.compress import in_context
    chunk = ("Archive commands should refuse to overwrite any pre-existing archive file. This is an important safety "
             "feature to preserve the integrity of your archive. It is advisable to test your archive command.")
    first = "Archive commands should refuse to overwrite any pre-existing archive file."
    assert in_context(2, first, chunk) == [(2, first), (2, "This is an important safety feature to preserve the "
                                                            "integrity of your archive.")]
    ciphers = ("A man-in-the-middle could read and pass communications. For these reasons NULL ciphers are not "
               "recommended. Authentication without encryption is possible.")
    reasons = "For these reasons NULL ciphers are not recommended."
    assert [text for _, text in in_context(1, reasons, ciphers)] == [
        "A man-in-the-middle could read and pass communications.", reasons]
    assert in_context(1, "Authentication without encryption is possible.", ciphers) == [
        (1, "Authentication without encryption is possible.")]  # the last sentence, leaning on nothing
    chain = ("However, a man-in-the-middle could read and pass communications. Also, encryption overhead is minimal. "
             "For these reasons NULL ciphers are not recommended.")
    assert [text for _, text in in_context(1, reasons, chain, reasons=True)] == [
        "However, a man-in-the-middle could read and pass communications.", "Also, encryption overhead is minimal.",
        reasons]  # each leaning on the one before, up to two back
    sigkill = ("It is best not to use SIGKILL to shut down the server. Doing so will prevent the server from releasing "
               "shared memory and semaphores. Furthermore, SIGKILL kills the postgres process without letting it "
               "relay the signal.")
    furthermore = "Furthermore, SIGKILL kills the postgres process without letting it relay the signal."
    assert len(in_context(1, furthermore, sigkill, reasons=True)) == 3
    assert in_context(1, furthermore, sigkill) == [(1, furthermore)]  # a point added: a reason only where asked why


def test_followups_resolve_against_the_most_recent_subject():
    from rag.answering.prompt import resolve_elliptical, subject_questions
    rate = "What is the maximum hotel rate per night in London?"
    assert resolve_elliptical("And in Berlin?", [rate]) == "What is the maximum hotel rate per night in Berlin?"
    assert resolve_elliptical("What about Berlin?", [rate]) == "What is the maximum hotel rate per night in Berlin?"
    assert resolve_elliptical("And in Paris?", [rate, "And in Berlin?"]) == rate.replace("London", "Paris")
    assert resolve_elliptical("And when did it end?", [rate]) == "And when did it end?"  # asks its own question
    assert subject_questions(["Who led the Normans?", "Where is Victoria?", "When was it first settled?"]) == (
        "Where is Victoria?", "When was it first settled?")
    ten = [f"Question {i} about topic {i}?" for i in range(9)] + ["Who approves VPN access for contractors?"]
    assert subject_questions(ten) == ("Who approves VPN access for contractors?",)


def test_an_explanation_says_a_sentence_two_passages_hold_once():
    from rag.answering.compress import distinct_sentences
    said = 'Set "SMTP relay host (blank for none):" to "[smtp.hostname.dom]:587".'
    ranked = ((2, said), (1, said), (4, "Set the smarthost to smtp.hostname.dom:587."), (1, "Restart postfix."))
    assert distinct_sentences(ranked, 2) == [(2, said), (4, "Set the smarthost to smtp.hostname.dom:587.")]
    assert distinct_sentences(ranked, 5) == [ranked[0], ranked[2], ranked[3]]


def test_a_follow_ups_answer_names_nothing_its_earlier_questions_named():
    sentence = "A lock that conflicts with the SHARE UPDATE EXCLUSIVE lock held by autovacuum interrupts it."
    follow_up = QuestionShape.of("Which lock does that one take on the table?")
    starting = {sentence[i:].split()[0] for i in answer_starts(sentence, follow_up)}
    assert "autovacuum" in starting and "SHARE" in starting
    earlier = ("What does VACUUM do in PostgreSQL?", "Does autovacuum ever run VACUUM FULL?")
    starting = {sentence[i:].split()[0] for i in answer_starts(sentence, follow_up.with_earlier(earlier))}
    assert "autovacuum" not in starting and "SHARE" in starting
    assert follow_up.with_earlier(()) is follow_up


def test_a_technical_token_ending_in_a_short_word_is_whole(generator):
    ends = span_ends(generator, 'One can restrict su by enabling the line with "pam_wheel.so" in "/etc/pam.d/su".',
                     "Which module restricts su?")
    assert "pam_wheel.so" in {e.strip('"') for e in ends}
    assert "pam_wheel" not in {e.strip('"') for e in ends}


def test_list_questions_name_every_item():
    from rag.answering.compress import candidate_sentences
    from rag.answering.evidence import enumeration
    from rag.answering.service import items_for
    assert Q("Which directories get cleaned out at every boot?").listing and Q("What should I do to stop it?").listing
    assert not Q("What does LVM need?").listing and not Q("Which file lists the sources?").listing
    assert enumeration('Temporary files in "/tmp", "/var/lock", and "/var/run" are cleaned.') == \
        '"/tmp", "/var/lock", and "/var/run"'
    # unquoted: two or more paths in a row (not names); after a preposition, the question still asks for several
    assert enumeration("Skip the contents of /proc, /sys, /tmp, and /run (see below).") == "/proc, /sys, /tmp, and /run"
    assert enumeration("For example, /lib/systemd/system/apt-daily.timer and /lib/systemd/system/apt-daily.service "
                       "set up daily apt download activities.") == \
        "/lib/systemd/system/apt-daily.timer and /lib/systemd/system/apt-daily.service"
    assert enumeration("Bacula, Amanda, and BackupPC are backup suites.") is None
    assert enumeration("Copy /etc/fstab and restart.") is None
    # numbered in the sentence ("1) …; 2) …; and 3) …", BIND's ACLs); not a reference to a step or a call
    assert enumeration("ACLs match clients on the basis of up to three characteristics: 1) The client's IP address; "
                       "2) the TSIG key that was used to sign the request, if any; and 3) an address prefix.") == \
        "1) The client's IP address; 2) the TSIG key that was used to sign the request, if any; and 3) an address prefix"
    assert enumeration("Step 1) is done. See figure 2) below.") is None
    assert enumeration("The function f(1) returns 2, and g(2) returns 3.") is None
    # identifiers with dots or underscores (git's "stash.showStat, and stash.showPatch"); not "e.g." nor versions
    assert enumeration("If no <diff-option> is provided, the default behavior will be given by the stash.showStat, "
                       "and stash.showPatch config variables.") == "stash.showStat, and stash.showPatch"
    assert enumeration("Raise max_wal_size and min_wal_size together.") == "max_wal_size and min_wal_size"
    assert enumeration("Inspect it with the exim_dumpdb or exim_fixdb utility programs.", identifiers=False) is None
    assert enumeration("Use a tool, e.g. cron and at.") is None
    assert enumeration("Python 3.11 and 3.12 both work.") is None
    assert Q("In which directories can root drop maintenance scripts?").listing
    # after a clause that says what is wrong, as a how-to question may be asked
    assert Q("A package's maintainer script is broken; which scripts should I look at?").listing
    assert not Q("I forgot the root password. Which kernel parameter gets me a root shell?").listing
    chunk = ("To keep people out, you need to make following actions.\n\nPrevent physical access to the disk\n\n"
             "Lock the boot loader\n\nSet a password for GRUB\n\nWith physical access, resetting it is easy.")
    sentences = candidate_sentences([chunk])
    items = items_for(sentences, list(range(len(sentences))), Q("What should I do to keep people out?"))
    assert [phrase for _, _, phrase in items] == ["Prevent physical access to the disk", "Lock the boot loader",
                                                  "Set a password for GRUB"]


def test_the_lines_a_sentence_announces_are_the_items_long_ones_too():
    from rag.answering.compress import candidate_sentences
    from rag.answering.service import items_for, list_answer
    # "…, the following should be the safe considerations." announces the lines under it; an item may run to 30
    # words (the Debian Reference's were cut off at 16: "lack of support from Debian on such software packages …")
    chunk = ("When using the FAT filesystem for sharing data, the following should be the safe considerations.\n\n"
             "Archiving files into an archive file first using tar(1), or cpio(1) to retain the long filename, the "
             "symbolic link, the original Unix file permission and the owner information.\n\n"
             "Splitting the archive file into less than 2 GiB chunks with the split(1) command.\n\n"
             "Encrypting the archive file to secure its contents from the unauthorized access.")
    sentences = candidate_sentences([chunk])
    items = items_for(sentences, list(range(len(sentences))), Q("What should I do with my files before sharing?"))
    assert [phrase.split()[0] for _, _, phrase in items] == ["Archiving", "Splitting", "Encrypting"]
    # the answer line joins them by "; ", each item's full stop left out
    assert list_answer([phrase for _, _, phrase in items]).endswith(
        "owner information; Splitting the archive file into less than 2 GiB chunks with the split(1) command; "
        "Encrypting the archive file to secure its contents from the unauthorized access")
    # a question that asks for no list is answered by the lines too where its best sentence announces them in words
    chunk = ("LVM requires the following.\n\ndevice-mapper support in the Linux kernel\n\nthe userspace "
             "device-mapper support library (libdevmapper* package)\n\nthe userspace LVM2 tools (lvm2 package)")
    sentences = candidate_sentences([chunk])
    order = list(range(len(sentences)))
    assert [phrase for _, _, phrase in items_for(sentences, order, Q("What does LVM need on a Debian system?"))] == \
        ["device-mapper support in the Linux kernel", "the userspace device-mapper support library (libdevmapper* "
         "package)", "the userspace LVM2 tools (lvm2 package)"]
    assert items_for(sentences, order, Q("Does LVM need device-mapper support?")) == ()  # yes/no: its own answer
    # the sentences after one inside a paragraph are prose, not its items (squad2-dev's "An example of a decision
    # problem is the following. The input is an arbitrary graph. …" was answered with two of them)
    chunk = ("An example of a decision problem is the following. The input is an arbitrary graph. The problem "
             "consists in deciding whether the given graph is connected, or not.")
    sentences = candidate_sentences([chunk])
    assert not any(s.line for s in sentences)
    assert items_for(sentences, list(range(len(sentences))), Q("Which problems are decision problems?")) == ()
    # a value before a colon announces no list for it: the value is the answer ("438", not the bits listed under it)
    chunk = ("The current Debian amd64 Linux kernel has /proc/sys/kernel/sysrq=438=0b110110110:\n\n"
             "2 = 0x2 - enable control of console logging level (ON)\n\n4 = 0x4 - enable control of keyboard (ON)")
    sentences = candidate_sentences([chunk])
    assert items_for(sentences, list(range(len(sentences))), Q("What is the value of /proc/sys/kernel/sysrq?")) == ()


def test_a_quoted_name_is_answered_inside_its_quotes(generator):
    ends = span_ends(generator, 'You must create the "/etc/apt/preferences" file and list the packages.',
                     "Which file do I create?")
    assert "/etc/apt/preferences" in ends
    assert not any(end.count('"') % 2 for end in ends), ends  # never a quote left open


def test_a_quoted_command_is_answered_whole_from_its_opening_quote():
    sentence = 'apt-file(1) provided by the apt-file package must run "apt-file update" in advance.'
    starts = [sentence[i:] for i in answer_starts(sentence, Q("What do I have to run before apt-file can search?"))]
    assert 'apt-file update" in advance.' in starts  # though the question names apt-file
    assert not any(start.startswith("update") for start in starts)  # never inside it


def test_a_question_for_a_default_value_is_no_definition():
    assert Q("What is the default wal_level?").subject is None
    assert Q("What is the maximum size?").subject is None
    assert Q("What is photosynthesis?").subject == "photosynthesis"


def test_code_lines_under_an_announcing_sentence_carry_it_and_count_as_commands():
    from rag.answering.compress import candidate_sentences, commands_of
    from rag.answering.evidence import bare_command
    from rag.answering.service import commands_for
    sentences = candidate_sentences([
        "The basic usage of this command is:\n\npg_dump dbname > dumpfile\n\nAs you see, pg_dump writes its result "
        "to the standard output.\n\nThe following reconfigure the timezone used by the Debian system.\n\n"
        "# dpkg-reconfigure tzdata\n\nUsers should be aware of the risks:\n\nlack of freedom\n\nlack of support\n\n"
        "Then the list ends."])
    lead = {s.text: s.lead for s in sentences}
    assert lead["pg_dump dbname > dumpfile"] == "The basic usage of this command is:"
    assert lead["As you see, pg_dump writes its result to the standard output."] == ""  # prose ends the code
    assert lead["# dpkg-reconfigure tzdata"] == "The following reconfigure the timezone used by the Debian system."
    assert lead["lack of support"] == "Users should be aware of the risks:"  # the list's second item too
    assert lead["Then the list ends."] == "" and lead["The basic usage of this command is:"] == ""
    assert commands_of(sentences[1]) == ["pg_dump dbname > dumpfile"]
    assert bare_command("pg_dumpall -p 5432 | psql -d postgres -p 5433") and bare_command("psql -X -f dumpfile postgres")
    assert not bare_command("pg_dump writes its result to the standard output.")  # prose
    assert not bare_command("lack of freedom for such software packages")  # no option, no redirection
    # a program run with a variable set for it (tests/data/unseen-docs-2: "/usr/share/man/it/" was the answer to
    # "… how do I view a command's manual page in Italian?"); a variable set alone is no command
    assert bare_command("LANG=it_IT.UTF-8 man programname") and bare_command("LC_ALL=C sort file")
    assert not bare_command("XKBLAYOUT=us") and not bare_command("FOO=1 BAR=2")
    howto = Q("How do I dump a database into a file?")
    assert howto.procedure and not Q("Which createuser option prompts for the new user's password?").procedure
    assert [command for command, _, _ in commands_for(sentences, [0], howto)] == ["pg_dump dbname > dumpfile"]
    alone = candidate_sentences(["pg_dump dbname > dumpfile"])  # no sentence announces it: read as prose
    assert commands_of(alone[0]) == []
    # "Which commands …?" asks for several: every program the best sentence names
    from rag.answering.service import programs_listed
    netfilter = candidate_sentences(["You can save its state with iptables-save(8), and restore it with "
                                     "iptables-restore(8) upon system reboot."])
    plural = Q("Which commands save the netfilter rules and restore them at boot?")
    assert plural.listing and plural.command
    assert [item for _, _, item in programs_listed(commands_for(netfilter, [0], plural))] == [
        "iptables-save(8)", "iptables-restore(8)"]
    assert not Q("Which command saves the netfilter rules?").listing  # one asked for: the model picks one
    # A procedure is the command line, not an argument the sentence announcing it names
    iso = candidate_sentences(['If "cd.iso" contains an ISO9660 image, then the following manually mounts it to '
                               '"/cdrom".\n\n# mount -t iso9660 -o ro,loop cd.iso /cdrom'])
    assert [command for command, _, _ in commands_for(iso, [0, 1], Q("How do I mount an ISO image file on /cdrom?"))] \
        == ["mount -t iso9660 -o ro,loop cd.iso /cdrom"]
    assert "/cdrom" in [c for c, _, _ in commands_for(iso, [0, 1], Q("Which lines name the mount point?"))]
    # The whole line, not its quoted argument
    quoted = candidate_sentences(['Use the following command:\n\nopenssl req -new -x509 -out server.crt -subj '
                                  '"/CN=db.example.com"'])
    assert commands_of(quoted[1]) == ['openssl req -new -x509 -out server.crt -subj "/CN=db.example.com"']


def favoured_yes_no(generator, sentence: str, question: str) -> str:
    """The answer ``yes_no_spans`` favours for ``question`` over ``sentence``: "Yes" or "No"."""
    from rag.answering.evidence import yes_no_spans

    spans = yes_no_spans(sentence, Q(question), generator.encode)
    return generator.decode(list(max(spans, key=lambda span: span.prior).tokens)).strip()


def test_a_yes_no_answer_turns_where_the_sentence_says_the_opposite_of_the_question(generator):
    from rag.answering.evidence import opposes

    def favoured(sentence: str, question: str) -> str:
        return favoured_yes_no(generator, sentence, question)

    same = 'Emulated runlevel 2 to 4 are all symlinked to the same "multi-user.target".'
    assert favoured(same, "Under systemd, are runlevels 2, 3 and 4 different targets?") == "No"
    assert favoured(same, "Under systemd, are runlevels 2, 3 and 4 the same target?") == "Yes"
    riskier = "Running stable mixed with some packages from testing is riskier than running pure unstable."
    assert favoured(riskier, "Is running stable with a few packages from testing safer than pure unstable?") == "No"
    assert favoured("The tar format does not support compression.", "Does the tar format support compression?") == "No"
    assert not opposes("Is it safe?", "It is safe, not risky.")  # the word asked is said too
    # A negated harm is no "No" unless the harm is what is asked about.
    dump = "pg_dump does not block other operations on the database while it is working."
    assert favoured(dump, "Can other sessions keep reading and writing while pg_dump is running?") == "Yes"
    assert favoured(dump, "Does pg_dump block other operations while it runs?") == "No"
    twice = "Duplicate connection messages do not necessarily indicate a problem."
    assert favoured(twice, "Is it normal to see two connection lines for one login?") == "Yes"
    # A negation that says "by default" negates nothing asked, in the question or in the sentence.
    collapse = ("When several clients are requesting the same page Varnish will send one request to the backend and "
                "place the others on hold while fetching one copy from the backend.")
    assert favoured(collapse, "Does Varnish collapse them into one backend fetch without me configuring anything?") \
        == "Yes"
    dnssec = 'DNSSEC validation works "out of the box" and does not require additional configuration.'
    assert favoured(dnssec, "Does DNSSEC validation work without me adding any extra configuration?") == "Yes"
    assert favoured("If acl_smtp_auth is not set, AUTH is accepted from any client host.",
                    "If I never define acl_smtp_auth, will Exim accept AUTH from any host?") == "Yes"
    assert favoured("Only the short host name belongs there, not the domain.",
                    "Should /etc/hostname hold only the short host name, without the domain?") == "Yes"


def test_a_default_stated_leads_and_a_lone_adverb_is_no_answer():
    sentence = "The default value is replica, which writes enough data to support WAL archiving."
    priors = start_priors(sentence, Q("What is the default wal_level?"))
    at = sentence.index("replica")
    assert priors[at] > max(p for offset, p in priors.items() if offset != at)
    timesync = "Under systemd, use systemd-timesyncd for the network time synchronization instead."
    starts = [timesync[i:].split()[0] for i in answer_starts(timesync, Q("What should I use for time sync?"))]
    assert "systemd-timesyncd" in starts and "instead." not in starts


def test_a_number_keeps_the_bound_the_sentence_puts_before_it():
    """The dev set's "How many non-free and contrib packages are there compared to main?" was answered "2%" of
    "…is less than 2% of that of main packages": the bound is part of what the documents say."""
    from rag.answering.evidence import with_bound

    sentence = "Please note that the number of non-free and contrib packages is less than 2% of that of main packages."
    assert with_bound("2%", sentence) == "less than 2%"
    assert with_bound("8 characters", "Passwords need at least 8 characters.") == "at least 8 characters"
    assert with_bound("61.1%", "About 61.1% voted.") == "About 61.1%"
    # No bound before it, or no number: the answer as it is.
    assert with_bound("1998", "It was invented in 1998.") == "1998"
    assert with_bound("Paris", "It is about Paris.") == "Paris"


def test_a_token_given_as_an_example_or_starting_a_longer_identifier_is_not_unknown():
    """tests/data/unseen-docs-4: "My laptop has a made-up hostname like box.localdomain. Why can't I …?", "With
    mpm_event, …" (the page writes the module identifier "mpm_event_module") and "… its -data package …" (the page:
    "`foo-data'") were refused as naming a token no retrieved passage held."""
    from rag.answering.answerability import asked_tokens, holds_token, tokens_not_retrieved
    assert asked_tokens("My laptop has a made-up hostname like box.localdomain. Why can't I use it?") == []
    assert asked_tokens("Which files, e.g. pg_hba.conf, does initdb write?") == []
    assert asked_tokens("Which setting in login.defs selects the hashing method?") == ["login.defs"]
    assert holds_token("Module Identifier:mpm_event_module", "mpm_event")
    assert holds_token("In these cases, `foo-data' doesn't depend on `foo'", "-data")
    assert not holds_token("wal_keep_size (integer)", "wal_keep_segments")
    assert not holds_token("pg_dump --data-only", "-data")  # an option is no suffix
    assert tokens_not_retrieved("What is the default of wal_keep_segments?", "wal_keep_size (integer)") == 1
    assert tokens_not_retrieved("Will every bundled module work under mpm_event?",
                                "Module Identifier:mpm_event_module") == 0


def test_an_environment_variable_named_before_the_word_variable_is_one():
    """"Which environment variable lets an individual user override the machine-wide paper size?" was answered
    "setting" of "… using the PAPERSIZE environment variable." (tests/data/unseen-docs-4)."""
    from rag.answering.evidence import variables_in
    assert variables_in("Users can override the paper size setting using the PAPERSIZE environment variable.") == [
        "PAPERSIZE"]
    assert variables_in("The Debian package takes no variable at all.") == []


def test_items_quoted_the_way_old_manuals_quote_are_an_enumeration():
    """The Debian FAQ quotes `like this': "What arguments will the scripts under /etc/init.d accept?" was answered
    "all" of "… an argument which can be either `start', `stop', `reload', `restart' or `force-reload' …"."""
    from rag.answering.evidence import enumeration
    sentence = ("This approach works because the scripts in /etc/init.d/ all take an argument which can be either "
                "`start', `stop', `reload', `restart' or `force-reload' and will then do the task indicated.")
    assert enumeration(sentence) == "`start', `stop', `reload', `restart' or `force-reload'"
    assert enumeration('Set it to “on” or “off”.') == "“on” or “off”"
    assert enumeration("Don't use it; it's `deprecated' now.") is None


def test_is_there_a_tool_asks_for_the_tool():
    """"Is there a tool that refreshes my package lists … via cron?" was answered "Yes" (tests/data/unseen-docs-4;
    the page: "You can use cron-apt; …"): it asks which tool, as "Which tool …?" does. Other "Is there …?" questions
    stay yes/no questions."""
    shape = Q("Is there a tool that refreshes my package lists and pre-fetches new packages on a schedule?")
    assert shape.command and not shape.yes_no
    assert shape.text.startswith("Is there a tool")
    assert Q("I run a dozen boxes; is there a dpkg flag that dumps a .deb file's control information?").option
    assert Q("Is there a limit on the number of uploads?").yes_no


def test_a_word_after_a_modal_verb_is_no_answer():
    """"If one of my name-based virtual hosts has no ServerName line, what name does Apache fall back to?" was answered
    "default" of "… the server will default to a fully qualified domain name (FQDN) …" (tests/data/unseen-docs-4)."""
    sentence = ("If you omit the ServerName directive from any name-based virtual host, the server will default to a "
                "fully qualified domain name (FQDN) derived from the system hostname.")
    starts = {sentence[s:].split()[0] for s in answer_starts(sentence, Q("What name does Apache fall back to?"))}
    assert "default" not in starts and "a" in starts


def test_the_line_under_a_sentence_announcing_a_command_is_one_without_an_option():
    """The Debian FAQ: "If you specifically wish not to start a service during boot-up, … you can run the command"
    above "systemctl disable service.service" (tests/data/unseen-docs-4: answered "boot-up"); a bare command needs
    an option or a redirection to be read as one under any other announcing sentence."""
    from rag.answering.evidence import announced_command, introduces_code
    lead = ("If you specifically wish not to start a service during boot-up, instead of removing the corresponding "
            "package, you can run the command")
    assert introduces_code(lead)
    assert announced_command("systemctl disable service.service", lead)
    assert announced_command("update-alternatives --config x-window-manager", "If you want to change it, run:")
    assert not announced_command("systemctl disable service.service", "The tools are as follows:")
    assert not announced_command("using the name of the service file installed in /lib/systemd/system.", lead)
    assert not introduces_code("I like to run")


def test_a_sentence_about_the_code_line_above_it_offers_that_line():
    """rsyslog's filters page shows ':msg, contains, "ID-4711"' and then says "This filter will match when the
    message contains the string “ID-4711”."; Apache's stopping page shows "apache2ctl -k graceful-stop" above "The
    WINCH or graceful-stop signal causes …" (tests/data/unseen-docs-4: both how-to questions were answered with the
    sentences, not the line)."""
    from rag.answering.evidence import about_the_code_above
    assert about_the_code_above("This filter will match when the message contains the string “ID-4711”.",
                                ':msg, contains, "ID-4711"')
    assert about_the_code_above("The WINCH or graceful-stop signal causes the parent process to advise the children "
                                "to exit after their current request.", "apache2ctl -k graceful-stop")
    assert not about_the_code_above("The parent will continue to run.", "apache2ctl -k graceful-stop")
    assert not about_the_code_above("This filter will match.", "Filters are evaluated in order.")


def test_a_follow_up_is_not_answered_with_the_previous_answer_again():
    """"And how do I switch it over to a different one?" after "How do I see which programs currently provide
    x-window-manager?" (answered "update-alternatives --display x-window-manager") got that command again
    (tests/data/unseen-docs-4); the page's next command line is "update-alternatives --config …"."""
    sentence = 'For local X programs the "$XAUTHORITY" variable names the authority file, e.g. "/run/user/1000/x".'
    shape = Q("What does it usually hold?")
    encode = lambda text: np.array([ord(c) for c in text])
    heads = lambda spans: {"".join(map(chr, span.tokens))[:12] for span in spans}
    assert any(h.startswith("$XAUTHORITY") for h in heads(candidate_spans(sentence, shape, encode)))
    again = heads(candidate_spans(sentence, shape, encode, repeated="$XAUTHORITY"))
    assert again and not any(h.startswith("$XAUTHORITY") for h in again)
    request = AnswerRequest.conversation([{"role": "user", "content": "Which variable?"},
                                          {"role": "assistant", "content": "$XAUTHORITY [1]"},
                                          {"role": "user", "content": "What does it hold?"}])
    assert request.last_answer == "$XAUTHORITY"
    assert AnswerRequest(question="What does it hold?").last_answer == ""


def test_the_code_line_above_a_sentence_about_it_answers_a_procedure_not_a_setting():
    """"How do I shut Apache down but let the children finish …?" is answered by the line above "The WINCH or
    graceful-stop signal causes …"; "During a graceful stop, what setting caps how long the parent waits …?" is not
    (it was answered "apache2ctl -k graceful-stop", tests/data/unseen-docs-4)."""
    from rag.answering.compress import candidate_sentences
    from rag.answering.service import commands_for
    chunk = ("Signal: WINCH\n\napache2ctl -k graceful-stop\n\nThe WINCH or graceful-stop signal causes the parent "
             "process to advise the children to exit after their current request.")
    sentences = candidate_sentences([chunk])
    order = [i for i, s in enumerate(sentences) if s.text.startswith("The WINCH")]
    procedure = commands_for(sentences, order, Q("How do I shut Apache down but let the children finish first?"))
    assert [command for command, _, _ in procedure] == ["apache2ctl -k graceful-stop"]
    assert not commands_for(sentences, order, Q("During a graceful stop, what setting caps how long it waits?"))


def test_a_setting_asked_for_starts_at_the_word_named_as_one_not_at_a_path():
    """"Which main.cf parameter sets the relay host?" over "The relay host is set in /etc/postfix/main.cf with the
    relayhost parameter.": SmolLM2 with AVX2 kernels (tools/avx2_view) answered "/etc/postfix/main.cf", then "set".
    A path is no setting, and the word the sentence names as a parameter is where the answer starts most likely."""
    from rag.answering.evidence import of_the_asked_kind, start_priors
    question = QuestionShape.of("Which main.cf parameter sets the relay host?")
    sentence = "The relay host is set in /etc/postfix/main.cf with the relayhost parameter."
    starts = answer_starts(sentence, question)
    assert not any(sentence[at:].startswith("/etc/") for at in starts)
    assert not of_the_asked_kind("/etc/postfix/main.cf", question)
    priors = start_priors(sentence, question)
    named, other = sentence.index("the relayhost"), sentence.index("set in")
    assert named in starts and priors[named] > priors[other]
    # A file asked for still gets its path, and an option question its option.
    assert of_the_asked_kind("/etc/postfix/main.cf", QuestionShape.of("Which file holds the relayhost parameter?"))
    assert of_the_asked_kind("--compress", QuestionShape.of("Which zipapp option compresses the files?"))


def test_a_signal_asked_for_is_a_name_written_as_code():
    """"Which signal do I send it so it re-executes itself …?" over the virtlogd page was answered "QEMU", "Which
    signal is it that apache2ctl -k restart delivers …?" "TERM" from a sentence on another signal (seventh and
    fourth unseen sets): a signal is asked as an option is, and its name ("SIGUSR1", "HUP") is code."""
    question = Q("virtlogd must not be stopped while guests run. Which signal do I send it so it re-executes itself "
                 "after a package upgrade?")
    assert question.signal and not Q("What does named do when I send it SIGUSR1?").signal
    sentence = "Upon receipt of SIGUSR1, virtlogd will re-exec() its binary, while maintaining all current logs."
    assert answer_starts(sentence, question) == [sentence.index("SIGUSR1")]
    assert names_an_asked_token(sentence, question) and holds_the_asked_type(sentence, question)
    qemu = "The QEMU process is given one or more pipes, the other end of which are owned by the virtlogd daemon."
    assert not names_an_asked_token(qemu, question) and not holds_the_asked_type(qemu, question)
    hup = "Sending the HUP or restart signal to the parent causes it to kill off its children like in TERM."
    restart = Q("Which signal is it that apache2ctl -k restart delivers to the parent?")
    assert [hup[i:i + 4] for i in answer_starts(hup, restart)] == ["HUP ", "TERM"]
    assert holds_code_words(hup, "Which signal?")  # a signal's name is code, where an option is asked for too


def test_an_or_joining_examples_or_subjects_leaves_a_yes_no_question():
    """"Can I switch flags such as monitor or stats on and off remotely from ntpq …?" was answered with a phrase, as
    a choice ("Is it A or B?") would be (seventh unseen set); SQuAD's choices stay choices."""
    assert Q("Can I switch flags such as monitor or stats on and off remotely from ntpq instead of editing the "
             "config?").yes_no
    assert Q("Does the logging collector, rotatelogs or syslog-based rotation delete old PostgreSQL log files?").yes_no
    assert Q("Do my guests stop working properly if I never define any libvirt storage pools or volumes?").yes_no
    assert not Q("Is a problem instance typically characterized as abstract or concrete?").yes_no
    assert not Q("Is the output of a functional problem typically characterized by a simple or complex answer?").yes_no
    assert not Q("Should I use tabs or spaces?").yes_no


def test_a_reason_before_the_statement_negates_nothing_and_a_threshold_asked_for_is_a_number(generator):
    """"Can I keep Maildir folders in step across two machines with an ordinary file sync tool?" was answered "No"
    from "Since no additional files are used …, it's easy to sync …": the negation is in the reason given, not in
    what the sentence states (eighth unseen set). "Above which Pin-Priority …?" asks for a number (dev set)."""
    from rag.answering.english import negates

    maildir = ("Since no additional files are used for metadata (which is embedded in the message filenames) and "
               "Maildir is locking-free, it's easy to sync across different machines using file-level "
               "synchronization tools.")
    assert favoured_yes_no(generator, maildir, "Can I keep Maildir folders in step across two machines with an "
                                               "ordinary file sync tool?") == "Yes"
    assert negates("Because the key is not signed, the package is not installed.")  # the statement negates too
    assert negates("Since 9.0 it does not work.") and not negates("Since I have no root, can I install it?")
    assert Q("Above which Pin-Priority will APT downgrade a package?").numeric
    assert Q("Below what amplification factor is resolver traffic not counted as a security bug?").numeric
    assert not Q("Under which section of the manual is it?").numeric


def test_a_setting_in_capitals_is_as_technical_as_one_with_an_underscore():
    """"Which upsd.conf directive tells upsd where the combined certificate-and-key PEM file is?" was answered
    "-DWITH_CLIENT_CERTIFICATE_VALIDATION" of a make command line, not "CERTFILE" (seventh unseen set)."""
    question = Q("With the OpenSSL backend, which upsd.conf directive tells upsd where the combined "
                 "certificate-and-key PEM file is?")
    assert phrase_features("CERTFILE", question).technical == 1.0
    assert phrase_features("CERTFILE", Q("What does the certificate file hold?")).technical == 0.0
