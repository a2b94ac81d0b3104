"""Installing and running the service as an admin does: what serving from a clone leaves in it, the systemd
unit `rag service` prints, the README's TLS proxy config, and what `make serve` installs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from helpers import cli_env, server_process
from rag.core.settings import PROJECT_ROOT, Settings


def rag_cli(settings: Settings, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rag.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
                          env=cli_env(settings, **env), capture_output=True, text=True, timeout=180)


def test_what_serving_from_a_clone_writes_is_git_ignored(settings: Settings, tmp_path: Path):
    """Issue 37 item 8: `access.sqlite` (the key hashes) was written to the clone's root and not ignored, so a
    `git add -A` committed it. A clone (its .gitignore) that serves with keys, an upload, an answer and a saved
    conversation has nothing new for git to add."""
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(PROJECT_ROOT / ".gitignore", clone / ".gitignore")
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    created = rag_cli(settings, clone, "keys", "create", "admin-one", "--role", "admin", "--json")
    assert created.returncode == 0, created.stderr
    import json

    key = json.loads(created.stdout)["key"]
    headers = {"Authorization": f"Bearer {key}"}
    with server_process(settings, clone, tmp_path / "serve.log", RAG_MAX_TOKENS="16") as base:
        uploaded = httpx.post(f"{base}/v1/documents", headers=headers, timeout=60,
                              files={"data": ("mill.md", b"# The mill\n\nThe Kestrel Club meets in the old mill.\n")})
        assert uploaded.status_code == 200, uploaded.text
        answered = httpx.post(f"{base}/v1/ask", headers=headers, json={"question": "Where does the Kestrel Club meet?"},
                              timeout=60)
        assert answered.status_code == 200, answered.text
        saved = httpx.post(f"{base}/v1/conversations", headers=headers, timeout=30,
                           json={"title": "Kestrel", "turns": [{"question": "Where?", "answer": "the old mill"}]})
        assert saved.status_code == 201, saved.text
    written = {p.name for p in clone.iterdir()} - {".git", ".gitignore"}
    assert {"access.sqlite", "indexes", "uploads", "audit"} <= written, written  # what the server wrote
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, check=True,
                            capture_output=True, text=True).stdout.splitlines()
    assert status == ["?? .gitignore"], status


def unit_settings(text: str) -> dict[str, list[str]]:
    """``Key=value`` lines of a unit file, by key (keys may repeat)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_rag_service_prints_a_sandboxed_unit_that_systemd_accepts(settings: Settings, tmp_path: Path):
    """`rag service` prints a systemd unit: its own user, state in /var/lib/rag (StateDirectory), the system
    read-only, no new privileges; `systemd-analyze verify` (where systemd is installed) finds nothing to say;
    `--install` writes the same unit."""
    printed = rag_cli(settings, tmp_path, "service", "--port", "8123")
    assert printed.returncode == 0, printed.stderr
    unit = unit_settings(printed.stdout)
    for key, value in (("User", "rag"), ("Group", "rag"), ("StateDirectory", "rag"), ("WorkingDirectory", "/var/lib/rag"),
                       ("ProtectSystem", "strict"), ("ProtectHome", "read-only"), ("NoNewPrivileges", "yes"),
                       ("PrivateTmp", "yes"), ("CapabilityBoundingSet", ""), ("Restart", "on-failure"),
                       ("WantedBy", "multi-user.target")):
        assert unit.get(key) == [value], (key, unit.get(key))
    environment = dict(v.split("=", 1) for v in unit["Environment"])
    assert environment["RAG_HOME"] == "/var/lib/rag"
    assert environment["RAG_GENERATOR_DIR"] == str(settings.generator_path)
    start = unit["ExecStart"][0].split()
    assert Path(start[0]).is_file() and start[-4:] == ["--host", "127.0.0.1", "--port", "8123"], start
    assert start[-5] == "serve"

    installed = rag_cli(settings, tmp_path, "service", "--port", "8123", "--install", "--unit-dir", str(tmp_path / "units"))
    assert installed.returncode == 0, installed.stderr
    written = tmp_path / "units" / "rag.service"
    assert written.read_text() == printed.stdout
    assert "systemctl enable --now rag" in installed.stderr

    analyze = shutil.which("systemd-analyze")
    if analyze:  # Debian's systemd package; the CI machine has it (the checks above run without it too)
        verified = subprocess.run([analyze, "verify", str(written)], capture_output=True, text=True, timeout=60)
        assert verified.returncode == 0 and "rag.service" not in verified.stdout + verified.stderr, verified.stderr
