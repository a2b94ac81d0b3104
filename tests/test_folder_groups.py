"""Per-folder access groups (the ``[folder_groups]`` table of ``rag.toml``) applied by real ``rag ingest`` and
``rag sync`` processes: the deepest mapped folder wins, an explicit ``--groups`` wins over the mapping, and a
reader key in one group sees only that group's and public documents through a real server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from helpers import cli_env, server_process
from rag.store.embedded import EmbeddedIndex
from rag.core.settings import PROJECT_ROOT, Settings

FILES = {
    "finance/budget.md": "# Budget\n\nThe Larkspur budget for next year sets aside 40,000 crowns for the new kilns.",
    "finance/board.md": "# Board minutes\n\nThe Larkspur board voted to close the eastern depot in October.",
    "hr/salaries.md": "# Salaries\n\nLarkspur kiln operators earn 3,100 crowns a month before overtime.",
    "hr/public/holidays.md": "# Holidays\n\nLarkspur staff get twenty-six days of paid holiday a year.",
    "hr-archive/old.md": "# Old rota\n\nThe 1998 Larkspur rota put two kiln operators on every night shift.",
    "misc/cafeteria.md": "# Cafeteria\n\nThe Larkspur cafeteria serves barley soup on Fridays.",
}


def rag(settings: Settings, home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
                          env=cli_env(settings, RAG_TELEMETRY="off"), capture_output=True, text=True, timeout=300)


def groups_by_file(home: Path, share: Path, index: str) -> dict[str, str]:
    """File (relative to ``share``) -> its document's stored groups, read through the store."""
    reader = EmbeddedIndex(home / "indexes" / index).reader()
    try:
        return {Path(d.path).relative_to(share.resolve()).as_posix(): d.access_groups for d in reader.documents()}
    finally:
        reader.close()


def write_config(home: Path, mapping: dict[str, str]) -> None:
    lines = ["[folder_groups]"] + [f"{json.dumps(folder)} = {json.dumps(groups)}" for folder, groups in mapping.items()]
    (home / "rag.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def share(tmp_path: Path) -> Path:
    share = tmp_path / "share"
    for name, text in FILES.items():
        (share / name).parent.mkdir(parents=True, exist_ok=True)
        (share / name).write_text(text, encoding="utf-8")
    (tmp_path / "share-link").symlink_to(share, target_is_directory=True)
    return share


def mapping(share: Path) -> dict[str, str]:
    # finance is named through a symlink and hr with a trailing "/..": both compare as the resolved folder.
    return {str(share.parent / "share-link" / "finance"): "finance",
            str(share / "hr" / "public" / ".."): "hr,managers",
            str(share / "hr" / "public"): ""}


def test_ingest_applies_the_deepest_mapped_folder_and_an_explicit_groups_wins(settings: Settings, share: Path,
                                                                             tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    write_config(home, mapping(share))
    ingested = rag(settings, home, "ingest", str(share), "--json")
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout)["added"] == len(FILES)
    explicit = rag(settings, home, "ingest", str(share / "finance" / "board.md"), "--groups", "board", "--json")
    assert explicit.returncode == 0 and json.loads(explicit.stdout)["updated"] == 1, explicit.stdout
    assert groups_by_file(home, share, "default") == {
        "finance/budget.md": "finance", "finance/board.md": "board", "hr/salaries.md": "hr,managers",
        "hr/public/holidays.md": "", "hr-archive/old.md": "", "misc/cafeteria.md": ""}
    # Ingested again without --groups, the mapping applies again; --groups '' makes a mapped file public.
    again = rag(settings, home, "ingest", str(share / "finance"), "--json")
    public = rag(settings, home, "ingest", str(share / "hr" / "salaries.md"), "--groups", "", "--json")
    assert again.returncode == 0 and public.returncode == 0, again.stderr + public.stderr
    groups = groups_by_file(home, share, "default")
    assert (groups["finance/board.md"], groups["hr/salaries.md"]) == ("finance", "")
    rag(settings, home, "ingest", str(share / "hr" / "salaries.md"))
    assert groups_by_file(home, share, "default")["hr/salaries.md"] == "hr,managers"

    created = rag(settings, home, "keys", "create", "hr-reader", "--role", "reader", "--groups", "hr", "--json")
    assert created.returncode == 0, created.stderr
    auth = {"Authorization": f"Bearer {json.loads(created.stdout)['key']}"}
    ids = {Path(d.path).name: d.id for d in EmbeddedIndex(home / "indexes" / "default").reader().documents()}
    with server_process(settings, home, tmp_path / "serve.log", RAG_MAX_TOKENS="8") as base:
        listed = httpx.get(f"{base}/v1/documents", headers=auth, timeout=30)
        assert listed.status_code == 200, listed.text
        assert sorted(Path(d["path"]).name for d in listed.json()["documents"]) == \
            ["cafeteria.md", "holidays.md", "old.md", "salaries.md"]
        for query in ("How much do Larkspur kiln operators earn?", "What is the Larkspur budget for the kilns?",
                      "What did the Larkspur board vote?"):
            found = httpx.post(f"{base}/v1/retrieve", json={"query": query, "top_k": 10}, headers=auth, timeout=60)
            assert found.status_code == 200, found.text
            seen = {c["document_id"] for c in found.json()["chunks"]}
            assert seen and seen <= {ids[n] for n in ("cafeteria.md", "holidays.md", "old.md", "salaries.md")}
        salaries = httpx.post(f"{base}/v1/retrieve", headers=auth, timeout=60,
                              json={"query": "How much do Larkspur kiln operators earn?"}).json()["chunks"]
        assert salaries[0]["document_id"] == ids["salaries.md"]


def test_sync_applies_the_mapping_follows_its_changes_and_a_sources_groups_win(settings: Settings, share: Path,
                                                                               tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    write_config(home, mapping(share))
    added = rag(settings, home, "sources", "add", str(share))
    synced = rag(settings, home, "sync", "--json")
    assert added.returncode == 0 and synced.returncode == 0, added.stderr + synced.stderr
    expected = {"finance/budget.md": "finance", "finance/board.md": "finance", "hr/salaries.md": "hr,managers",
                "hr/public/holidays.md": "", "hr-archive/old.md": "", "misc/cafeteria.md": ""}
    assert groups_by_file(home, share, "default") == expected

    # A new folder in the mapping: the next sync gives its files the groups (the others stay unchanged).
    write_config(home, {**mapping(share), str(share / "misc"): "staff"})
    resynced = rag(settings, home, "sync", "--json")
    assert resynced.returncode == 0, resynced.stderr
    counts = json.loads(resynced.stdout)["synced"][0]
    assert (counts["updated"], counts["unchanged"]) == (1, len(FILES) - 1), counts
    assert groups_by_file(home, share, "default") == {**expected, "misc/cafeteria.md": "staff"}

    # The source's own --groups win over the mapping.
    readded = rag(settings, home, "sources", "add", str(share), "--groups", "everyone")
    last = rag(settings, home, "sync", "--json")
    assert readded.returncode == 0 and last.returncode == 0, readded.stderr + last.stderr
    assert set(groups_by_file(home, share, "default").values()) == {"everyone"}


def test_a_bad_mapping_is_a_configuration_error(settings: Settings, tmp_path: Path):
    for table, message in (({"relative/folder": "hr"}, "is not an absolute path"),
                           ({str(tmp_path): "has space"}, "invalid document group 'has space'")):
        write_config(tmp_path, table)
        result = rag(settings, tmp_path, "ingest", str(tmp_path))
        assert result.returncode == 3 and "folder_groups" in result.stderr and message in result.stderr, \
            result.stderr
    (tmp_path / "rag.toml").write_text(f'[folder_groups]\n"{tmp_path}" = 7\n', encoding="utf-8")
    result = rag(settings, tmp_path, "ingest", str(tmp_path))
    assert result.returncode == 3 and "must be a string such as" in result.stderr, result.stderr


def test_a_sync_run_by_the_server_applies_the_mapping(settings: Settings, share: Path, tmp_path: Path):
    """"Sync now" (and the schedule) go through the server's jobs: the same mapping as `rag sync`."""
    home = tmp_path / "home"
    home.mkdir()
    write_config(home, mapping(share))
    added = rag(settings, home, "sources", "add", str(share), "--json")
    assert added.returncode == 0, added.stderr
    source_id = json.loads(added.stdout)["id"]
    with server_process(settings, home, tmp_path / "serve.log", RAG_MAX_TOKENS="8") as base:
        synced = httpx.post(f"{base}/v1/sources/{source_id}/sync", timeout=120)
        assert synced.status_code == 200, synced.text
        assert synced.json()["last"]["added"] == len(FILES)
    assert groups_by_file(home, share, "default") == {
        "finance/budget.md": "finance", "finance/board.md": "finance", "hr/salaries.md": "hr,managers",
        "hr/public/holidays.md": "", "hr-archive/old.md": "", "misc/cafeteria.md": ""}
