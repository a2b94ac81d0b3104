"""Installing and running the service as an admin does: what serving from a clone leaves in it, the systemd
unit `rag service` prints, the manual's TLS proxy config (docs/install.md), and what `make serve` installs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from helpers import cli_env, server_process
from rag.core.settings import PROJECT_ROOT, Settings


def rag_cli(settings: Settings, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
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
    assert {"access.sqlite", "indexes", "uploads", "audit", "audit.key"} <= written, written  # what the server wrote
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


def readme_block(heading: str, language: str) -> str:
    """The first ```language block under ``heading`` of the manual's install page (the README's until it
    became the front door)."""
    text = (PROJECT_ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    section = text[text.index(heading):]
    start = section.index(f"```{language}\n") + len(language) + 4
    return section[start:section.index("```", start)]


def self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "fullchain.pem", folder / "privkey.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_the_readmes_nginx_tls_config_serves_the_app_over_https(settings: Settings, tmp_path: Path):
    """The manual's nginx block (docs/install.md), as written (its certificate paths and ports swapped for a
    throwaway certificate and free ports), in front of a real `rag serve` with allowed_hosts: the page and a streamed
    answer come over HTTPS, an upload goes through, plain HTTP is redirected to HTTPS."""
    import os
    import time

    import pytest

    from helpers import free_port

    nginx = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).is_file()), None)
    if nginx is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nginx is not installed (.ci/run installs nginx-light)")
        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    block = readme_block("## TLS (a reverse proxy)", "nginx")
    cert, key = self_signed(tmp_path, "rag.example.com")
    plain, tls = free_port(), free_port()
    with server_process(settings, tmp_path / "home", tmp_path / "serve.log", RAG_MAX_TOKENS="16",
                        RAG_ALLOWED_HOSTS="rag.example.com") as base:
        port = base.rsplit(":", 1)[1]
        replaced = {"listen 80;": f"listen 127.0.0.1:{plain};", "listen 443 ssl;": f"listen 127.0.0.1:{tls} ssl;",
                    "/etc/ssl/rag/fullchain.pem": str(cert), "/etc/ssl/rag/privkey.pem": str(key),
                    "http://127.0.0.1:8000": f"http://127.0.0.1:{port}"}
        for old, new in replaced.items():
            assert old in block, f"the manual's nginx block no longer has {old!r}"
            block = block.replace(old, new)
        for temp in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (tmp_path / temp).mkdir()
        conf = tmp_path / "nginx.conf"
        conf.write_text(
            ("user root;\n" if os.geteuid() == 0 else "") +
            f"worker_processes 1;\ndaemon off;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
            "events {}\nhttp {\n    access_log off;\n" +
            "".join(f"    {t}_temp_path {tmp_path / t};\n" for t in ("fastcgi", "uwsgi", "scgi")) +
            f"    client_body_temp_path {tmp_path / 'body'};\n    proxy_temp_path {tmp_path / 'proxy'};\n"
            + block + "}\n")
        checked = subprocess.run([nginx, "-t", "-c", str(conf), "-p", str(tmp_path)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
        proxy = subprocess.Popen([nginx, "-c", str(conf), "-p", str(tmp_path)], stderr=subprocess.PIPE)
        try:
            public = f"https://127.0.0.1:{tls}"
            headers = {"Host": "rag.example.com"}
            with httpx.Client(verify=False, headers=headers, timeout=60) as client:
                deadline = time.monotonic() + 20
                while True:
                    try:
                        page = client.get(public + "/")
                        break
                    except httpx.TransportError:
                        assert time.monotonic() < deadline, (tmp_path / "error.log").read_text()
                        time.sleep(0.2)
                assert page.status_code == 200 and "Offline RAG" in page.text
                assert page.headers["strict-transport-security"] == "max-age=31536000"
                uploaded = client.post(public + "/v1/documents", files={"data": (
                    "mill.md", b"# The mill\n\nThe Kestrel Club meets in the old mill on Tuesdays.\n")},
                    headers={"Origin": "https://rag.example.com"})
                assert uploaded.status_code == 200, uploaded.text
                events = []
                with client.stream("POST", public + "/v1/ask", json={"question": "Where does the Kestrel Club meet?",
                                                                     "stream": True}) as streamed:
                    assert streamed.status_code == 200
                    assert streamed.headers["content-type"].startswith("text/event-stream")
                    events = [line for line in streamed.iter_lines() if line.startswith("data:")]
                assert events and '"done"' in events[-1], events
            redirect = httpx.get(f"http://127.0.0.1:{plain}/documents", headers=headers)
            assert redirect.status_code == 301 and redirect.headers["location"] == "https://rag.example.com/documents"
        finally:
            proxy.terminate()
            proxy.wait(timeout=10)
