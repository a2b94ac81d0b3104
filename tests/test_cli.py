"""The CLI's output for a person and for a pipe: real models, real processes, no mocks."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from helpers import cli_env
from rag.core.settings import PROJECT_ROOT, Settings
from rag.modelstore.sources import MINILM, SMOLLM2

CLI_TIMEOUT_S = 240


def run_cli(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = cli_env(settings)
    environ.pop("COLUMNS", None)  # what a pipe gets when nobody set a width
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, env=environ,
                          timeout=CLI_TIMEOUT_S, cwd=PROJECT_ROOT)


def test_models_list_shows_architecture_and_parameters_of_the_default_models(settings: Settings):
    rows = {r["name"]: r for r in json.loads(run_cli(settings, "models", "list", "--json").stdout)}
    generator, embedder = rows[SMOLLM2.name], rows[MINILM.name + "-int8"]
    assert generator["architecture"] == "LlamaForCausalLM" and generator["parameters"] == 134_515_008
    assert embedder["architecture"] == "BertModel" and round(embedder["parameters"] / 1e6, 1) == 22.7
    table = run_cli(settings, "models", "list").stdout
    line = next(line for line in table.splitlines() if SMOLLM2.name in line)
    assert "LlamaForCausalLM" in line and "134.5M" in line


def test_piped_output_is_not_wrapped_at_80_columns(settings: Settings):
    proc = run_cli(settings, "models", "list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) > 80
    # One line per model: names, sources and hashes are whole, not folded onto the next line.
    assert sum(SMOLLM2.name in line.split() for line in lines) == 1  # (not its -full-logits test build)
    assert any(f"{SMOLLM2.package}=={SMOLLM2.version}" in line for line in lines)
    narrow = run_cli(settings, "models", "list", COLUMNS="60").stdout  # a width asked for is still honoured
    assert max(map(len, narrow.splitlines())) <= 60


def test_info_does_not_recommend_the_model_already_in_use(settings: Settings):
    proc = run_cli(settings, "info", "--model", SMOLLM2.name)
    assert proc.returncode == 0, proc.stderr
    use = next(line for line in proc.stdout.splitlines() if line.startswith("Use"))
    assert SMOLLM2.name in use and "already in use" in use and "rag models use" not in use
    info = json.loads(run_cli(settings, "info", "--json", "--model", SMOLLM2.name).stdout)
    assert info["recommendation"]["in_use"] is True and info["recommendation"]["command"] is None


def test_serve_on_a_busy_port_says_so_in_one_line_before_loading_anything(settings: Settings, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_cli(settings, "--home", str(tmp_path / "home"), "serve", "--port", str(port))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip() == f"error: port {port} is in use (another rag serve?); stop it or pass --port"
    assert "serving on" not in proc.stdout and "Traceback" not in proc.stderr


def test_piped_progress_lines_are_not_padded(settings: Settings, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "wombats.md").write_text("# Wombats\n\nWombats dig burrows in south-eastern Australia.\n", encoding="utf-8")
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"id": "1", "question": "Where do wombats dig burrows?", "answers": ["Australia"],
                                     "unanswerable": False, "document": "wombats.md"}) + "\n", encoding="utf-8")
    proc = run_cli(settings, "--home", str(tmp_path / "home"), "eval", "--questions", str(questions),
                   "--docs", str(docs))
    assert proc.returncode == 0, proc.stderr
    assert "ingesting" in proc.stderr
    assert max(map(len, proc.stderr.splitlines())) < 300  # not padded to the unwrapped width
