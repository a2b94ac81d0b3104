from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rag.core.errors import ConfigError
from rag.core.ladder import choose_generator, this_machine
from rag.core.settings import DEFAULT_EMBEDDER, PROJECT_ROOT, load_settings

# A home without models: generator_dir shows the generator this machine gets (rag/core/ladder.py).
DEFAULT_GENERATOR = choose_generator(this_machine()).model


def test_defaults_live_under_home(tmp_path: Path) -> None:
    s = load_settings(environ={"RAG_HOME": str(tmp_path)})
    assert s.home == tmp_path
    assert s.embedder_path == tmp_path / "models" / DEFAULT_EMBEDDER
    assert s.index_path() == tmp_path / "indexes" / "default"


def test_precedence_toml_then_env_then_overrides(tmp_path: Path) -> None:
    (tmp_path / "rag.toml").write_text('top_k = 7\nthreads = 3\ndevice = "cuda"\n', encoding="utf-8")
    s = load_settings(environ={"RAG_HOME": str(tmp_path), "RAG_THREADS": "1"}, overrides={"device": "cpu"})
    assert (s.top_k, s.threads, s.device) == (7, 1, "cpu")


@pytest.mark.parametrize("env, message", [
    ({"RAG_DEVICE": "tpu"}, "device must be one of"),
    ({"RAG_TOP_K": "many"}, "cannot read 'many'"),
    ({"RAG_CHUNK_OVERLAP": "500"}, "chunk_overlap"),
    ({"RAG_TOPK": "3"}, r"unknown setting 'topk' \(env RAG_TOPK\); did you mean 'top_k'\?"),
    ({"RAG_INDEX": "../etc"}, "invalid index name"),
])
def test_bad_settings_are_clear_errors(tmp_path: Path, env: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(environ={"RAG_HOME": str(tmp_path), **env})


def test_broken_toml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "rag.toml").write_text("top_k = = 3", encoding="utf-8")
    with pytest.raises(ConfigError, match="rag.toml"):
        load_settings(environ={"RAG_HOME": str(tmp_path)})


def test_api_key_is_masked() -> None:
    assert load_settings(environ={"RAG_API_KEY": "secret"}).as_dict()["api_key"] == "***"


@pytest.mark.parametrize("kind", ["missing", "folder", "broken"])
def test_rag_config_that_cannot_be_read_is_an_error(tmp_path: Path, kind: str) -> None:
    named = {"missing": tmp_path / "nonexistent.toml", "folder": tmp_path, "broken": tmp_path / "broken.toml"}[kind]
    (tmp_path / "broken.toml").write_text("top_k = = 3", encoding="utf-8")
    expected = {"missing": "does not exist", "folder": "is not a file", "broken": "broken.toml"}[kind]
    with pytest.raises(ConfigError, match=expected) as info:
        load_settings(environ={"RAG_HOME": str(tmp_path), "RAG_CONFIG": str(named)})
    assert str(named) in info.value.message


def test_unknown_key_in_rag_toml_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "rag.toml").write_text("top-k = 3\n", encoding="utf-8")  # a typo of top_k
    with pytest.raises(ConfigError, match="unknown setting 'top-k'") as info:
        load_settings(environ={"RAG_HOME": str(tmp_path)})
    assert str(tmp_path / "rag.toml") in info.value.message


def test_sources_name_each_layer_and_replace_keeps_them(tmp_path: Path) -> None:
    config = tmp_path / "custom.toml"
    config.write_text("top_k = 7\nthreads = 3\n", encoding="utf-8")
    s = load_settings(environ={"RAG_HOME": str(tmp_path / "env-home"), "RAG_CONFIG": str(config),
                               "RAG_THREADS": "1"}, overrides={"home": tmp_path, "device": "cpu"})
    assert (s.home, s.top_k, s.threads) == (tmp_path, 7, 1)
    assert {k: s.source(k) for k in ("home", "top_k", "threads", "device", "index")} == {
        "home": "command line", "top_k": str(config), "threads": "env RAG_THREADS", "device": "command line",
        "index": "default"}
    # A later override (a command's flag) neither re-reads RAG_HOME over --home nor loses the sources.
    changed = s.replace(index="books")
    assert changed.home == tmp_path and changed.index == "books"
    assert (changed.source("index"), changed.source("threads")) == ("command line", "env RAG_THREADS")
    # The effective model dirs are shown, not None.
    data = s.as_dict()
    assert data["generator_dir"] == str(tmp_path / "models" / DEFAULT_GENERATOR)
    assert data["embedder_dir"] == str(tmp_path / "models" / DEFAULT_EMBEDDER)
    assert "sources" not in data


def test_home_override_reads_that_homes_rag_toml(tmp_path: Path) -> None:
    (tmp_path / "rag.toml").write_text("top_k = 9\n", encoding="utf-8")
    s = load_settings(environ={}, overrides={"home": tmp_path})
    assert s.top_k == 9 and s.source("top_k") == str(tmp_path / "rag.toml")


@pytest.mark.parametrize("overrides, message", [
    ({"chunk_tokens": 0}, "chunk_tokens must be positive"),
    ({"chunk_tokens": -5, "chunk_overlap": -10}, "chunk_tokens must be positive"),
    ({"chunk_overlap": -1}, "chunk_overlap must not be negative"),
    ({"chunk_tokens": 20}, r"chunk_overlap \(30\) must be smaller than chunk_tokens \(20\)"),
])
def test_chunk_sizes_are_validated_with_the_right_reason(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(environ={}, overrides=overrides)


def _rag_config(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), "config", *args],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60,
                          env={**clean, "COLUMNS": "200", "PYTHONIOENCODING": "utf-8", **env})


def test_cli_config_shows_values_and_sources(tmp_path: Path) -> None:
    config = tmp_path / "custom.toml"
    config.write_text("top_k = 7\n", encoding="utf-8")
    proc = _rag_config(tmp_path, "--json", RAG_CONFIG=str(config), RAG_THREADS="2")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["top_k"], data["threads"], data["home"]) == (7, 2, str(tmp_path))
    assert data["generator_dir"] == str(tmp_path / "models" / DEFAULT_GENERATOR)
    assert data["sources"]["top_k"] == str(config)
    assert data["sources"]["threads"] == "env RAG_THREADS"
    assert data["sources"]["home"] == "command line"
    assert data["sources"]["generator_dir"] == data["sources"]["max_tokens"] == "default"

    proc = _rag_config(tmp_path, RAG_CONFIG=str(config), RAG_THREADS="2")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:4]]
            for line in proc.stdout.splitlines() if line.count("│") == 4}
    assert rows["top_k"] == ["7", str(config)]
    assert rows["threads"] == ["2", "env RAG_THREADS"]
    assert rows["generator_dir"] == [str(tmp_path / "models" / DEFAULT_GENERATOR), "default"]
    assert rows["api_key"] == ["unset", "default"]


def test_cli_missing_rag_config_is_one_clear_line(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.toml"
    proc = _rag_config(tmp_path, RAG_CONFIG=str(missing), COLUMNS="40")
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == [f"error: RAG_CONFIG names {missing}, which does not exist"]
    assert proc.stdout == ""


def test_unknown_environment_variable_fails_the_cli(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "app.cli", "--home", str(tmp_path), "config"], capture_output=True,
                          text=True, env={**os.environ, "RAG_MAX_TOKEN": "8"}, cwd=PROJECT_ROOT)
    assert proc.returncode == 3, proc.stdout
    assert proc.stderr.strip() == ("error: unknown setting 'max_token' (env RAG_MAX_TOKEN); "
                                   "did you mean 'max_tokens'?")
