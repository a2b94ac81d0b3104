"""``rag serve --host 0.0.0.0 --workers 2`` (issue #36, item 6): every worker process serves with the settings of
the command that started it, flags, ``--home`` and that home's rag.toml included, so a client on the network
is served by each worker: not refused by a Host allow-list that thinks the server listens on 127.0.0.1, its
key found in the home's key table, the default index the one ``--index`` named. A real server, asked through
this machine's own non-loopback address; which worker answered is read from the operating system's
connection table."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from helpers import cli_env, free_port, stop_process
from rag.core.errors import ConfigError
from rag.core.settings import COMMAND_LINE_ENV, PROJECT_ROOT, Settings, load_settings

WORKERS = 2
TOML_KEY = "workers-test-toml-key-7c41"  # rag.toml's api_key: an admin's key, read from the home's config file
INDEX = "lan"
READY_S = 240  # each worker loads its own models; two at once on a loaded machine


def lan_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (nor link-local): the one its host name resolves to,
    else the one the routing table would send from (a UDP "connect" sends nothing)."""
    candidates: list[str] = []
    try:
        candidates += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    except OSError:
        pass
    for target in ("10.255.255.255", "192.0.2.1", "198.51.100.1"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect((target, 9))
                candidates.append(probe.getsockname()[0])
            except OSError:
                continue
    for candidate in candidates:
        address = ipaddress.ip_address(candidate)
        if not (address.is_loopback or address.is_link_local or address.is_unspecified):
            return candidate
    return None


def answering_worker(server: psutil.Process, response: httpx.Response) -> int | None:
    """The process among the server's children that holds the other end of ``response``'s connection (still
    open: the client keeps it alive)."""
    client_port = response.extensions["network_stream"].get_extra_info("client_addr")[1]
    for child in server.children(recursive=True):
        try:
            connections = child.net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.raddr and c.raddr.port == client_port and c.status == psutil.CONN_ESTABLISHED for c in connections):
            return child.pid
    return None


def test_two_workers_serve_a_lan_client_with_the_whole_command_line(settings: Settings, tmp_path: Path) -> None:
    address = lan_address()
    if address is None:
        message = ("this machine has no IPv4 address but loopback (nor a route out): the test asks the server "
                   "through a non-loopback address, as a client on the network would")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)

    home = tmp_path / "home"
    home.mkdir()
    (home / "rag.toml").write_text(f'api_key = "{TOML_KEY}"\n', encoding="utf-8")
    rag = [sys.executable, "-m", "app.cli", "--home", str(home)]
    created = subprocess.run([*rag, "keys", "create", "lan-admin", "--role", "admin"], cwd=PROJECT_ROOT,
                             env=cli_env(settings), capture_output=True, text=True, timeout=120)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("rag_"), created.stdout

    port = free_port()
    base = f"http://{address}:{port}"
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*rag, "serve", "--host", "0.0.0.0", "--port", str(port), "--workers", str(WORKERS),
                                 "--index", INDEX], cwd=PROJECT_ROOT, env=cli_env(settings), stdout=log,
                                stderr=subprocess.STDOUT)
    server = psutil.Process(proc.pid)

    def log_text() -> str:
        return log_path.read_text(encoding="utf-8", errors="replace")[-6000:]

    try:
        ready: set[int] = set()  # workers whose models are loaded (/healthz 200)
        served: dict[int, list[str]] = {}  # worker -> what it answered, for the failure message
        deadline = time.monotonic() + READY_S
        while len(served) < WORKERS or any(len(checks) < 3 for checks in served.values()):
            if proc.poll() is not None:
                pytest.fail(f"rag serve exited with {proc.returncode}:\n{log_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"not every worker served the LAN client within {READY_S} s (ready: {sorted(ready)}, "
                            f"served: {served}):\n{log_text()}")
            # A new connection each time: the workers share the listening socket, each accepts some.
            with httpx.Client(base_url=base, timeout=10) as client:
                try:
                    health = client.get("/healthz")
                except httpx.TransportError:
                    time.sleep(0.5)
                    continue
                assert health.status_code != 403, f"a LAN client was refused: {health.text}"
                worker = answering_worker(server, health)
                assert worker is not None, "no child of rag serve holds the connection"
                if health.status_code != 200:  # 503 while this worker's models load
                    time.sleep(0.5)
                    continue
                ready.add(worker)
                checks = served.setdefault(worker, [])
                mine = client.get("/healthz", headers={"Authorization": f"Bearer {key}"})
                assert mine.status_code == 200, mine.text
                assert mine.json()["index"]["name"] == INDEX, mine.json()  # the --index flag
                me = client.get("/v1/me", headers={"Authorization": f"Bearer {key}"})
                assert me.status_code == 200 and me.json()["name"] == "lan-admin", me.text  # the --home key table
                configured = client.get("/v1/me", headers={"Authorization": f"Bearer {TOML_KEY}"})
                assert configured.status_code == 200, configured.text  # the api_key of --home's rag.toml
                assert answering_worker(server, configured) == worker  # one connection, one worker
                checks[:] = ["flags", "keys", "rag.toml"]
        assert len(served) == WORKERS, served
    finally:
        children = server.children(recursive=True)
        stop_process(proc, timeout_s=30)
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass


def test_a_worker_reads_the_rag_toml_of_the_home_its_command_line_names(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "rag.toml").write_text("top_k = 7\n", encoding="utf-8")
    (tmp_path / "rag.toml").write_text("top_k = 3\n", encoding="utf-8")
    passed = json.dumps({"home": str(home), "host": "0.0.0.0"})
    worker = load_settings(environ={"RAG_HOME": str(tmp_path), COMMAND_LINE_ENV: passed})
    assert (worker.home, worker.host, worker.top_k) == (home, "0.0.0.0", 7)
    assert worker.source("host") == "command line" and worker.source("top_k") == str(home / "rag.toml")
    # An override of the worker's own goes on top of the passed flags.
    assert load_settings({"host": "127.0.0.1"}, environ={COMMAND_LINE_ENV: passed}).host == "127.0.0.1"


@pytest.mark.parametrize("passed", ["{not json", "[1, 2]"])
def test_a_broken_command_line_is_a_config_error(passed: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=COMMAND_LINE_ENV):
        load_settings(environ={"RAG_HOME": str(tmp_path), COMMAND_LINE_ENV: passed})
