from __future__ import annotations

from pathlib import Path

import pytest

from rag.errors import ConfigError
from rag.settings import DEFAULT_EMBEDDER, load_settings


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
