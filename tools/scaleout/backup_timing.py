"""Backup / restore / verify timings of a 10,000-chunk embedded index (synthetic chunks, random unit vectors):
    python tools/scaleout/backup_timing.py   (docs/sources.md; a scratch folder under the temp dir)"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rag.core.records import Chunk, DocumentRecord  # noqa: E402
from rag.store.backup import backup_index, restore_index, verify_index  # noqa: E402
from rag.store.embedded import EmbeddedStore  # noqa: E402
from rag.core.settings import load_settings  # noqa: E402
from app.runtime import load_embedder  # noqa: E402

settings = load_settings()
emb = load_embedder(settings)
root = Path(tempfile.mkdtemp(prefix="rag-backup-bench-"))
store = EmbeddedStore(root / "indexes")
index = store.index("bench")
rng = np.random.default_rng(0)
words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()
with index.writer(emb.config.identity, emb.dimension) as w:
    for d in range(500):
        chunks = [Chunk(" ".join(rng.choice(words, 150)), None, None, 0, 900, i) for i in range(20)]
        vec = rng.standard_normal((20, emb.dimension)).astype("float32"); vec /= np.linalg.norm(vec, axis=1, keepdims=True)
        rec = DocumentRecord(id=f"{d:016x}", path=f"/bench/doc{d}.txt", title=f"doc {d}", kind="txt", sha256=f"{d:064x}",
                             pages=None, bytes=18000, chunks=20, ingested_at="2026-11-25T00:00:00+00:00")
        w.put_document(rec, chunks, vec)
    w.commit()
size = sum(p.stat().st_size for p in (root / "indexes" / "bench").rglob("*") if p.is_file())
print(f"index: 10000 chunks, {size/1e6:.1f} MB on disk")
for run in range(3):
    target = root / f"bench-{run}.zip"
    t = time.perf_counter(); backup_index(index, target, '0.1.0'); b = time.perf_counter() - t
    t = time.perf_counter(); restore_index(target, store, f"copy{run}", emb.config.identity); r = time.perf_counter() - t
    t = time.perf_counter(); problems = verify_index(store.index(f"copy{run}")); v = time.perf_counter() - t
    print(f"run {run}: backup {b:.2f} s ({target.stat().st_size/1e6:.1f} MB zip), restore {r:.2f} s, verify {v:.2f} s, problems {problems}")
