#!/usr/bin/env bash
# Sync timings for 1,000 small files (docs/sources.md, "Sources and sync"): the first sync, then three with nothing
# changed. Run from the project root after `make models`; uses a scratch home under ${TMPDIR:-/tmp}.
set -euo pipefail
export RAG_TELEMETRY=off
work="${TMPDIR:-/tmp}/rag-sync1000"
rm -rf "$work" && mkdir -p "$work/home" "$work/docs"
ln -s "$PWD/models" "$work/home/models"
.venv/bin/python - "$work/docs" <<'PY'
import sys
from pathlib import Path
root = Path(sys.argv[1])
for i in range(1000):
    folder = root / f"d{i // 100:02d}"
    folder.mkdir(exist_ok=True)
    (folder / f"note{i:04d}.md").write_text(f"# Note {i}\n\nThis is note number {i} about topic {i % 37} "
                                            f"and place {i % 11}.\n", encoding="utf-8")
PY
rag=(.venv/bin/rag --home "$work/home")
"${rag[@]}" sources add "$work/docs" > /dev/null
/usr/bin/time -f "first sync (1000 new files): %e s" "${rag[@]}" sync --json > "$work/first.json"
for _ in 1 2 3; do
    /usr/bin/time -f "rag sync, nothing changed: %e s" "${rag[@]}" sync --json > "$work/again.json"
    .venv/bin/python -c "import json,sys; d = json.load(open(sys.argv[1]))['synced'][0]; print('  the sync itself:', d['seconds'], 's;', d['unchanged'], 'unchanged,', d['chunks_embedded'], 'chunks embedded')" "$work/again.json"
done
