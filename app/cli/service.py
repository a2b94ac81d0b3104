"""``rag service``: run `rag serve` as a systemd service — print the unit (or write it with ``--install``)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import click

from app.cli.common import console, handle_errors, literal, settings_from
from rag.core.settings import Settings

UNIT_NAME = "rag.service"
STATE_DIR = "/var/lib/rag"


def rag_command() -> list[str]:
    """How to start this installation's ``rag``: the venv's script, else this Python with ``-m app.cli``."""
    script = Path(sys.executable).parent / "rag"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "app.cli"]


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


@click.group("service", invoke_without_command=True)
@click.option("--user", default="rag", show_default=True, help="The system user the service runs as.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Bind address (keep loopback behind a reverse proxy with TLS; docs/install.md, \"TLS\").")
@click.option("--port", type=int, default=8000, show_default=True, help="Port.")
@click.option("--install", is_flag=True, help=f"Write the unit to /etc/systemd/system/{UNIT_NAME} (or --unit-dir).")
@click.option("--unit-dir", type=click.Path(path_type=Path, file_okay=False), default=Path("/etc/systemd/system"),
              show_default=True, help="Where --install writes the unit.")
@click.pass_context
@handle_errors
def service_cmd(ctx: click.Context, user: str, host: str, port: int, install: bool, unit_dir: Path) -> None:
    """Run `rag serve` as a service. Alone: print a systemd unit that runs it sandboxed, as its own user
    (--install writes it); `rag service commands`: the Windows commands (NSSM, sc.exe, or a scheduled task)."""
    if ctx.invoked_subcommand is not None:
        return
    text = unit_text(settings_from(ctx), user, host, port)
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


SERVICE_NAME = "rag"


def windows_service_commands(python: str, home: str, host: str, port: int,
                             account: str = f"NT SERVICE\\{SERVICE_NAME}") -> list[tuple[str, list[str]]]:
    """The cmd.exe commands (an elevated prompt) that run ``rag serve`` as a Windows service under NSSM, as
    ``account`` (a virtual account by default; a domain account to read file shares), its home readable and
    writable by that account and administrators only; and, for sites without NSSM, a scheduled task. Each is
    (what it does, argv): print them with ``subprocess.list2cmdline`` (Windows' quoting)."""
    serve = ["-m", "app.cli", "--home", home, "serve", "--host", host, "--port", str(port)]
    virtual = account.upper().startswith("NT SERVICE\\")  # a task cannot run as a virtual account
    task_account = "NT AUTHORITY\\LOCAL SERVICE" if virtual else account
    logs = f"{home}\\logs\\service.log"
    return [
        ("install the service (NSSM, https://nssm.cc: it runs a program as a service)",
         ["nssm", "install", SERVICE_NAME, python]),
        ("its arguments, current folder and log", ["nssm", "set", SERVICE_NAME, "AppParameters",
                                                    subprocess.list2cmdline(serve)]),
        ("", ["nssm", "set", SERVICE_NAME, "AppDirectory", home]),
        ("", ["nssm", "set", SERVICE_NAME, "AppStdout", logs]),
        ("", ["nssm", "set", SERVICE_NAME, "AppStderr", logs]),
        ("stopped with Ctrl+C (a clean shutdown: running jobs read as interrupted), not window messages",
         ["nssm", "set", SERVICE_NAME, "AppStopMethodSkip", "6"]),
        ("the account it runs as (a domain account, with password=, to read file shares)",
         ["sc.exe", "config", SERVICE_NAME, "obj=", account]),
        ("the home: that account and administrators only (not the Authenticated Users that C:\\ gives)",
         ["icacls", home, "/inheritance:r", "/grant:r", "*S-1-5-32-544:(OI)(CI)F", "*S-1-5-18:(OI)(CI)F",
          f"{account}:(OI)(CI)M"]),
        ("start it (and at every boot)", ["nssm", "start", SERVICE_NAME]),
    ] + [("or, without NSSM: a scheduled task at startup, as " + (task_account if virtual else
                                                                    f"{account} (schtasks asks its password)"),
          ["schtasks", "/Create", "/TN", SERVICE_NAME, "/SC", "ONSTART", "/RU", task_account,
           *([] if virtual else ["/RP"]), "/TR", subprocess.list2cmdline([python, *serve])])] + (
        [("and the home for that account", ["icacls", home, "/grant", f"{task_account}:(OI)(CI)M"])]
        if virtual else [])


@service_cmd.command("commands")
@click.option("--python", "python", help="The python.exe of rag's environment (default: this one).")
@click.option("--account", default=f"NT SERVICE\\{SERVICE_NAME}", show_default=True,
              help="The account the service runs as (e.g. DOMAIN\\svc-rag to read file shares).")
@click.pass_context
@handle_errors
def service_commands(ctx: click.Context, python: str | None, account: str) -> None:
    """Print the cmd.exe commands (run them in an elevated prompt) that install `rag serve` as a service with
    this home, host and port (docs/install.md, "Running as a Windows service")."""
    settings = settings_from(ctx)
    for comment, argv in windows_service_commands(python or sys.executable, str(settings.home), settings.host,
                                                  settings.port, account):
        if comment:
            console.print(literal(f"rem {comment}"), soft_wrap=True)
        console.print(literal(subprocess.list2cmdline(argv)), soft_wrap=True)
