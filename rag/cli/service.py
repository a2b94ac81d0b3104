"""``rag service``: run `rag serve` as a systemd service — print the unit (or write it with ``--install``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from rag.cli.common import console, handle_errors, literal
from rag.core.settings import Settings

UNIT_NAME = "rag.service"
STATE_DIR = "/var/lib/rag"


def rag_command() -> list[str]:
    """How to start this installation's ``rag``: the venv's script, else this Python with ``-m rag.cli``."""
    script = Path(sys.executable).parent / "rag"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "rag.cli"]


def systemd_quote(value: str) -> str:
    """A value for a unit file's command line or Environment= (quoted when it has spaces)."""
    return shlex.quote(value).replace("'", '"') if any(c.isspace() for c in value) else value


def unit_text(settings: Settings, user: str, host: str, port: int) -> str:
    """A sandboxed unit: its own user, state in /var/lib/rag (StateDirectory), the rest of the system read-only,
    no new privileges, no capabilities, only IP and Unix sockets."""
    start = " ".join(systemd_quote(part) for part in [*rag_command(), "serve", "--host", host, "--port", str(port)])
    env = {"RAG_HOME": STATE_DIR, "RAG_GENERATOR_DIR": str(settings.generator_path),
           "RAG_EMBEDDER_DIR": str(settings.embedder_path), "PYTHONUNBUFFERED": "1"}
    environment = "\n".join(f"Environment={systemd_quote(f'{k}={v}')}" for k, v in env.items())
    return f"""\
# {UNIT_NAME}: `rag serve` as a service, made by `rag service`. Install it with `rag service --install` (or copy
# it to /etc/systemd/system/{UNIT_NAME}), then: systemctl daemon-reload && systemctl enable --now rag
# Its user must exist (useradd --system --home-dir {STATE_DIR} --shell /usr/sbin/nologin {user}) and be able to
# read the models and the program ({Path(rag_command()[0]).parent}). State (indexes, keys, conversations, audit,
# uploads, jobs, telemetry) is kept in {STATE_DIR}; settings in {STATE_DIR}/rag.toml.
[Unit]
Description=Offline RAG question answering (rag serve)
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
User={user}
Group={user}
ExecStart={start}
{environment}
WorkingDirectory={STATE_DIR}
StateDirectory=rag
StateDirectoryMode=0750
UMask=0027
Restart=on-failure
RestartSec=5
TimeoutStopSec=30

# Sandbox: the whole file system read-only except its state directory; no way to gain privileges.
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
CapabilityBoundingSet=
AmbientCapabilities=

[Install]
WantedBy=multi-user.target
"""


@click.command("service")
@click.option("--user", default="rag", show_default=True, help="The system user the service runs as.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Bind address (keep loopback behind a reverse proxy with TLS; README \"TLS\").")
@click.option("--port", type=int, default=8000, show_default=True, help="Port.")
@click.option("--install", is_flag=True, help=f"Write the unit to /etc/systemd/system/{UNIT_NAME} (or --unit-dir).")
@click.option("--unit-dir", type=click.Path(path_type=Path, file_okay=False), default=Path("/etc/systemd/system"),
              show_default=True, help="Where --install writes the unit.")
@click.pass_obj
@handle_errors
def service_cmd(settings: Settings, user: str, host: str, port: int, install: bool, unit_dir: Path) -> None:
    """Print a systemd unit that runs `rag serve` sandboxed, as its own user (--install writes it)."""
    text = unit_text(settings, user, host, port)
    if not install:
        click.echo(text, nl=False)
        return
    unit_dir.mkdir(parents=True, exist_ok=True)
    path = unit_dir / UNIT_NAME
    path.write_text(text)
    console.print(literal(f"wrote {path}. Next, as root:\n"
                          f"  id {user} || useradd --system --home-dir {STATE_DIR} --shell /usr/sbin/nologin {user}\n"
                          f"  systemctl daemon-reload && systemctl enable --now rag\n"
                          f"  journalctl -u rag -f    # its log; `systemctl status rag` for its state"))
