"""Local vs remote generator on the same answer sample: ``app.bench.evaluate.answer_report`` (what ``rag eval
--answers N`` runs) over one scratch index, first through the remote generator, then the local one.

    python tools/scaleout/compare_generators.py N http://127.0.0.1:8011/v1 [--remote-only]   # e.g. a second `rag serve`

Not part of the product.
"""
import sys, tempfile, time, warnings
from pathlib import Path
warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedStore
from rag.core.settings import load_settings
from app.bench.evaluate import answer_report, load_questions
from app.runtime import Models, answer_service, load_answer_generator, load_embedder, load_generator
n = int(sys.argv[1])
D = Path(__file__).resolve().parents[3] / "shared" / "data" / "squad2-dev"
s = load_settings(environ={})
emb = load_embedder(s)
questions = load_questions(D / "questions.jsonl")
with tempfile.TemporaryDirectory() as tmp:
    store = EmbeddedStore(Path(tmp))
    ingest_paths([D / "docs"], store.index(s.index), IngestParameters.from_settings(s, emb))
    out = {}
    rs = s.replace(generator_url=sys.argv[2], generator_tokenizer=s.generator_path / "tokenizer.json")
    runs = [("remote", rs, load_answer_generator(rs, emb))]
    if "--remote-only" not in sys.argv:
        runs.append(("local", s, load_generator(s)))
    for label, settings, gen in runs:
        svc = answer_service(settings, Models(emb, gen), store=store)
        t = time.time()
        out[label] = answer_report(svc, questions, 5, n, 0, lambda *a: None)
        out[label]["wall_s"] = round(time.time() - t, 1)
        print(label, {k: v for k, v in out[label].items() if k != "sample_failures"}, flush=True)
    if "local" in out:
        print("same failures:", out["local"]["sample_failures"] == out["remote"]["sample_failures"])
