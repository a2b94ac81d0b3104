"""Issue 38: documents and questions in the site's own languages.

The multilingual embedder (EmbeddingGemma-300m, built by `rag models prepare --embedder embeddinggemma-300m-int8`
once per run and cached under models/) finds the passage whatever the language of the question and of the
page; the refusal is written in the question's language; the multilingual dev set (tests/data/multilingual)
is checked against its pages and its cross-language recall is held to the issue's bar. Real models, real
pages, a real index.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.bench.evaluate import evaluate, off_topic_questions, questions_language
from app.runtime import Models, answer_service
from ingest.parameters import IngestParameters
from ingest.pipeline import ingest_paths
from rag.answering.answerability import names
from rag.answering.language import REPLIES, LanguageDetector, nouns_capitalised, refusal_message
from rag.answering.prompt import ABSTENTION_MESSAGE
from rag.answering.question import QuestionShape
from rag.core.text import STOPWORDS
from rag.answering.service import AnswerRequest, options_from
from rag.core.errors import BadRequestError
from rag.core.settings import Settings
from rag.embedder import Embedder
from rag.store.embedded import EmbeddedIndex

DATA = Path(__file__).resolve().parent / "data"
MULTILINGUAL = DATA / "multilingual"
GEMMA = "embeddinggemma-300m-int8"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "languages"))
from eval_languages import flat_questions  # noqa: E402


@pytest.fixture(scope="session")
def gemma_dir(models_dir: Path) -> Path:
    """EmbeddingGemma-300m as `rag models prepare --embedder` builds it (25 wheels joined and checked by sha256,
    exported to ONNX, int8): built once, then up to date."""
    from rag.modelstore.prepare import prepare_embedder

    return prepare_embedder(models_dir, GEMMA, report=lambda message: None).path


@pytest.fixture(scope="session")
def gemma(gemma_dir: Path) -> Embedder:
    return Embedder(gemma_dir)


def records() -> list[dict]:
    return [json.loads(line) for file in sorted(MULTILINGUAL.glob("parallel-*.jsonl"))
            for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_multilingual_dev_set_is_verified_against_the_pages():
    """75 questions, each in English, German, French and Spanish, over three Debian Reference chapters in the
    four languages: every answer in its evidence, every evidence verbatim in its page, every absent term absent."""
    proc = subprocess.run([sys.executable, str(MULTILINGUAL / "verify.py")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "75 records" in proc.stdout and "0 failures" in proc.stdout, proc.stdout
    kinds = [r["type"] for r in records()]
    assert kinds.count("unanswerable") >= 20 and kinds.count("howto") >= 20 and kinds.count("factoid") >= 30


def test_the_question_language_is_named_and_the_refusal_speaks_it():
    detector = LanguageDetector()
    wrong = [(language, question) for r in records() for language, question in r["question"].items()
             if detector.detect(question) != language]
    assert wrong == []
    assert detector.detect("Wie lange muss ein Passwort sein?") == "de"
    assert detector.detect("Quanto dura il periodo di prova?") == "it"
    assert detector.detect("pg_dump -Fc?") == "en"  # too little to tell: the default
    assert set(REPLIES) == {"en", "de", "fr", "es", "it", "pt", "nl"}
    assert refusal_message("en") == ABSTENTION_MESSAGE
    assert refusal_message("de") == "Die Dokumente enthalten keine Antwort auf diese Frage."
    assert refusal_message("ja") == ABSTENTION_MESSAGE  # no reply table: English


def test_each_languages_rules_read_its_questions_and_leave_english_ones_alone():
    """rag/core/languages.toml: function words, question openers and capitalised nouns per language. On the
    1,854 English questions of the dev sets, squad2-dev and the off-topic list the question shapes did not change
    (checked when the table was written, and again when the yes/no rules of fr, es, it, pt and nl were: none of
    the 1,799 dev and squad2-dev questions matches another language's opener); here a sample of each side."""
    assert not STOPWORDS & {"die", "man", "hat", "den", "son", "sin", "con", "come", "dove", "per", "pour", "plus",
                            "van", "door", "mit", "com", "von", "non", "un", "ai", "los", "os", "vi", "comment"}
    assert {"welche", "meinem", "quelle", "cómo", "dónde", "welke"} <= STOPWORDS
    shapes = {q: QuestionShape.of(q) for q in (
        "Wie kann ich die Routing-Tabelle anzeigen?", "¿Cómo cambio el juego de caracteres de Samba?",
        "Comment changer le jeu de caractères de Samba ?", "Wie viele Tage Urlaub erhalten Mitarbeiter?",
        "Wo liegt die Konfigurationsdatei?", "Warum ist /etc/shadow nicht lesbar?", "Welche Datei regelt das?",
        "How do I list the routing table?", "Where is the file?", "Who was Rollo?", "Was Rollo a Viking?")}
    assert [q for q, shape in shapes.items() if shape.howto] == [
        "Wie kann ich die Routing-Tabelle anzeigen?", "¿Cómo cambio el juego de caracteres de Samba?",
        "Comment changer le jeu de caractères de Samba ?", "How do I list the routing table?"]
    assert shapes["Wie viele Tage Urlaub erhalten Mitarbeiter?"].counting
    assert shapes["Wo liegt die Konfigurationsdatei?"].place and shapes["Warum ist /etc/shadow nicht lesbar?"].explains
    assert shapes["Welche Datei regelt das?"].technical and shapes["Was Rollo a Viking?"].yes_no
    assert not shapes["Who was Rollo?"].howto and shapes["Who was Rollo?"].person
    # Yes/no questions of each language, the inverted French verb and the Italian modal after the subject too; a
    # question word before them asks for something else (each language's words, as all rules are read together).
    yes_no = {q: QuestionShape.of(q).yes_no for q in (
        "Müssen Passwörter mindestens 14 Zeichen lang sein?", "Les mots de passe doivent-ils être longs ?",
        "¿Se pueden compartir las cuentas?", "Le password devono essere lunghe?", "As senhas devem ser longas?",
        "Moeten wachtwoorden lang zijn?", "Dans quel fichier le mot de passe est-il stocké ?",
        "Quale file deve essere modificato?", "Qual arquivo deve ser alterado?", "Combien de jours met-il ?")}
    assert [q for q, asked in yes_no.items() if asked] == list(yes_no)[:6], yes_no
    # German writes every noun with a capital: the nouns of a German question name nothing it must find.
    assert nouns_capitalised("de") and not nouns_capitalised("en")
    question = "Welches Paket muss ich auf meinem Rechner für NetBIOS und /etc/samba installieren?"
    assert names(question) == ["paket", "rechner", "netbios", "/etc/samba"]
    assert names(question, capitals=False) == ["/etc/samba"]
    assert names("¿Qué indica el prefijo en /etc/shadow?") == ["/etc/shadow"]  # "¿Qué" opens the question


def test_the_multilingual_embedder_matches_a_question_to_its_translation(gemma: Embedder, embedder: Embedder):
    """A German question is closest to the English sentence that answers it and an English question to the
    German one; the English-only default embedder ranks them no better than an unrelated sentence."""
    assert gemma.config.languages == "multilingual" and gemma.config.query_prefix.startswith("task: search result")
    passages = ["Passwords must be at least 12 characters long and are changed every 90 days.",
                "Alle Mitarbeiter erhalten 30 Tage Urlaub pro Kalenderjahr.",
                "The weather in Paris is mild in spring."]
    questions = ["Wie lange muss ein Passwort sein?", "How many vacation days do employees get per year?"]
    for model, margin in ((gemma, 0.2), (embedder, None)):
        similarity = model.embed_queries(questions) @ model.embed(passages).T
        if margin is None:  # MiniLM: the German question is nearer the weather than the password rule
            assert similarity[0, 0] < similarity[0, 2] + 0.1, similarity
            continue
        assert similarity[0, 0] > similarity[0, 2] + margin and similarity[0, 0] > similarity[0, 1] + margin
        assert similarity[1, 1] > similarity[1, 2] + margin and similarity[1, 1] > similarity[1, 0] + margin
    # Batched with a much longer text and alone, nearly the same vector: padding is masked in every layer (the
    # fp32 export matched the PyTorch model at cos 1.0000 on a padded batch); what is left is int8's activation
    # scale, dynamic over the whole batch (0.982 here; the embedder batches texts of similar length).
    alone = gemma.embed([passages[2]])[0]
    batched = gemma.embed(passages + ["a much longer text " * 30])[2]
    assert float(np.dot(alone, batched)) > 0.97


def test_cross_language_recall_meets_the_bar(settings: Settings, gemma_dir: Path, tmp_path: Path):
    """The issue's bar: recall@5 >= 0.85 for a German question over the English pages only and an English one
    over the German pages only (measured: 0.941 and 0.882 with EmbeddingGemma; 0.882 / 0.882 with MiniLM, whose
    dense side alone reaches 0.745 for German over English, vs 0.961)."""
    local = settings.replace(home=tmp_path, embedder_dir=gemma_dir)
    for question_language, page_language in (("de", "en"), ("en", "de")):
        questions = tmp_path / f"{question_language}-{page_language}.jsonl"
        questions.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n"
                                     for q in flat_questions(question_language, page_language)), encoding="utf-8")
        report = evaluate(local, questions, MULTILINGUAL / "docs" / page_language, None, 5, 0, 0,
                          log=lambda *_: None, off_topic=False)
        assert report["answerable"] == 51
        assert report["recall@5"] >= 0.85, (question_language, page_language, report)
        assert report["recall@5_dense"] >= 0.85, (question_language, page_language, report)


def test_a_german_question_over_english_pages_is_answered_and_a_german_refusal_is_german(
        settings: Settings, gemma: Embedder, generator, tmp_path: Path):
    """With the multilingual embedder, a German question over English policies gets the English sentence that
    answers it, verbatim, as its quote ("Ja" or "Oui" to a yes/no question); a German question the pages do not
    answer is refused in German."""
    local = settings.replace(home=tmp_path, embedder_dir=gemma.path)
    summary = ingest_paths([DATA / "policies" / "docs"], EmbeddedIndex(local.index_path()),
                           IngestParameters.from_settings(local, gemma))
    assert summary.ok, summary.as_dict()
    service = answer_service(local, Models(gemma, generator))
    try:
        options = options_from(local)
        answered = service.ask(AnswerRequest(question="Wie viele Zeichen muss ein Passwort mindestens haben?",
                                             options=options))
        assert not answered.abstained and answered.language == "de", answered
        quote = answered.evidence[0]
        source = next(s for s in answered.sources if s.number == quote.source)
        assert source.text[quote.start:quote.end] == quote.quote and "password" in quote.quote.lower(), answered
        # A yes/no question is answered in its own language, the quote staying the document's words.
        for question, yes in (("Müssen Passwörter mindestens 14 Zeichen lang sein?", "Ja"),
                              ("Les mots de passe doivent-ils comporter au moins 14 caractères ?", "Oui")):
            confirmed = service.ask(AnswerRequest(question=question, options=options))
            assert confirmed.answer == yes and confirmed.answer_kind == "yes_no", confirmed
            assert "14 characters" in confirmed.evidence[0].quote, confirmed
        refused = service.ask(AnswerRequest(question="Wie viele Urlaubstage bekommen Praktikanten auf dem Mond?",
                                            options=options))
        assert refused.abstained and refused.language == "de", refused
        assert refused.answer == "Die Dokumente enthalten keine Antwort auf diese Frage."
    finally:
        service.close()


def test_models_use_makes_the_multilingual_embedder_the_one_and_info_says_so(gemma_dir: Path, tmp_path: Path):
    """`rag models use embeddinggemma-300m-int8` writes embedder_dir (not generator_dir) into rag.toml; `rag info`
    then names the embedder and says it is multilingual."""
    from click.testing import CliRunner

    from app.cli.main import main as cli
    from rag.core.settings import load_settings

    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / GEMMA).symlink_to(gemma_dir, target_is_directory=True)
    (home / "rag.toml").write_text("top_k = 7\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["--home", str(home), "models", "use", GEMMA], catch_exceptions=False)
    assert result.exit_code == 0 and "embedder_dir = " in result.output, result.output
    assert "ingested again" in result.output
    loaded = load_settings(environ={"RAG_HOME": str(home)})
    assert loaded.embedder_path == (home / "models" / GEMMA).resolve() and loaded.top_k == 7
    assert "generator_dir" not in (home / "rag.toml").read_text(encoding="utf-8")
    info = CliRunner().invoke(cli, ["--home", str(home), "info", "--no-probe", "--json"], catch_exceptions=False)
    embedder = json.loads(info.output)["embedder"]
    assert embedder["languages"] == "multilingual" and "Gemma Terms of Use" in embedder["why"], embedder


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX; Windows runs the rest of this file")
def test_a_detector_that_cannot_load_takes_every_question_as_english():
    """py3langid unpacks its model through a temporary file; where the disk refuses it (a file-size limit stands in
    for a full disk) detection is off, said once in the log, and questions are still answered, as English."""
    code = (
        "import logging, resource\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))\n"
        "from rag.answering.language import LanguageDetector\n"
        "d = LanguageDetector()\n"
        "print(d.detect('Wie lange muss ein Passwort sein?'), d.detect('Où est le fichier ?'))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["en", "en"], proc.stdout
    assert proc.stderr.count("language detection is off") == 1, proc.stderr


def test_the_off_topic_questions_are_asked_in_the_sets_language():
    """`rag eval` checks off-topic refusal with the general-knowledge list in the questions' language: the same 55
    questions, translated, each read as that language by the detector (two short French ones aside, "Combien de
    cordes a un violon ?"); a language without a list is a clear error, not English questions in disguise."""
    detector = LanguageDetector()
    english = off_topic_questions()
    for language in ("de", "fr", "es"):
        translated = off_topic_questions(language)
        assert len(translated) == len(english) == 55
        assert sum(detector.detect(q) == language for q in translated) >= 53, language
    assert questions_language([{"language": "de"}, {"language": "de"}]) == "de"
    assert questions_language([{"language": "de"}, {}]) == questions_language([{}]) == "en"
    with pytest.raises(BadRequestError, match="offtopic_questions.ja.txt"):
        off_topic_questions("ja")
