"""``rag serve``: the HTTP API and web app."""

from __future__ import annotations

import click

from rag.cli.common import console, handle_errors, index_option, literal, settings_from
from rag.core.errors import BadRequestError
from rag.core.settings import Settings
from rag.runtime import open_keys


def is_loopback(host: str) -> bool:
    import ipaddress

    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def port_problem(host: str, port: int, windows: bool | None = None) -> str | None:
    """Why ``host:port`` cannot be listened on, checked before any model loads; None when it can."""
    import errno
    import os
    import socket

    windows = os.name == "nt" if windows is None else windows

    address = host.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            if not windows:  # as uvicorn binds: a closed connection in TIME_WAIT does not hold the port
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((address, port))
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, 10048):  # 10048: WSAEADDRINUSE
            return f"port {port} is in use (another rag serve?); stop it or pass --port"
        if exc.errno in (errno.EACCES, 10013) and windows:  # 10013: WSAEACCES
            return (f"Windows does not let rag listen on port {port}: Hyper-V, WSL or Docker often reserve ranges "
                    "of ports (see `netsh interface ipv4 show excludedportrange protocol=tcp`), or another program "
                    "holds it exclusively; pass another --port, e.g. one outside those ranges")
        if exc.errno == errno.EACCES:
            if port < 1024:
                return f"not allowed to listen on port {port} (ports below 1024 need privileges; try --port 8000)"
            return f"not allowed to listen on port {port} ({exc.strerror or exc}); pass another --port"
        if exc.errno in (errno.EADDRNOTAVAIL, 10049):
            return f"{host} is not an address of this machine (use 127.0.0.1, 0.0.0.0 or one of its own)"
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    except (socket.gaierror, UnicodeError) as exc:
        return f"cannot listen on {host}:{port}: unknown host ({exc})"
    return None


def auth_configured(settings: Settings) -> bool:
    if settings.api_key or settings.jwt_jwks:
        return True
    store = open_keys(settings)
    try:
        return store.any()
    finally:
        store.close()


@click.command("serve")
@click.option("--host", help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, help="Port (default 8000).")
@index_option("Default index for requests that name none.")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Server processes; each loads its own models (1 is best on small machines).")
@click.option("--insecure-no-auth", is_flag=True,
              help="Serve on an address other than loopback without any key (anyone who reaches it may do all).")
@click.pass_context
@handle_errors
def serve_cmd(ctx: click.Context, host: str | None, port: int | None, index: str | None, workers: int,
              insecure_no_auth: bool) -> None:
    """Serve the REST API (Litestar on uvicorn)."""
    import os

    import uvicorn

    settings = settings_from(ctx, host=host, port=port, index=index)
    if not insecure_no_auth and not is_loopback(settings.host) and not auth_configured(settings):
        raise BadRequestError(
            f"refusing to serve on {settings.host} without authentication: anyone who can reach it could read "
            "every document and change the index. Create a key (rag keys create NAME --role admin), set "
            "RAG_API_KEY or jwt_jwks, or pass --insecure-no-auth if that is really what you want")
    problem = port_problem(settings.host, settings.port)
    if problem:
        raise BadRequestError(problem)
    console.print(literal(f"serving on http://{settings.host}:{settings.port}  (OpenAPI: /schema)"))
    if workers > 1:
        # Worker processes rebuild the app from the environment, so pass the effective settings there.
        os.environ.update({"RAG_HOME": str(settings.home), "RAG_INDEX": settings.index})
        uvicorn.run("api.app:serving_app", factory=True, host=settings.host, port=settings.port, workers=workers,
                    log_level="warning", log_config=None)
    else:
        from api.app import create_app

        # log_config=None: uvicorn's own messages go through the app's JSON logging (api/observability.py).
        uvicorn.run(create_app(settings, telemetry=True), host=settings.host, port=settings.port, log_level="warning",
                    log_config=None)




# --------------------------------------------------------------------------- running as a Windows service
SERVICE_NAME = "rag"


def windows_service_commands(python: str, home: str, host: str, port: int,
                             account: str = f"NT SERVICE\\{SERVICE_NAME}") -> list[tuple[str, list[str]]]:
    """The cmd.exe commands (an elevated prompt) that run ``rag serve`` as a Windows service under NSSM, as
    ``account`` (a virtual account by default; a domain account to read file shares), its home readable and
    writable by that account and administrators only; and, for sites without NSSM, a scheduled task. Each is
    (what it does, argv): print them with ``subprocess.list2cmdline`` (Windows' quoting)."""
    import subprocess

    serve = ["-m", "rag.cli", "--home", home, "serve", "--host", host, "--port", str(port)]
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


@click.group("service")
def service_group() -> None:
    """Run `rag serve` as a Windows service."""


@service_group.command("commands")
@click.option("--python", "python", help="The python.exe of rag's environment (default: this one).")
@click.option("--account", default=f"NT SERVICE\\{SERVICE_NAME}", show_default=True,
              help="The account the service runs as (e.g. DOMAIN\\svc-rag to read file shares).")
@click.pass_context
@handle_errors
def service_commands(ctx: click.Context, python: str | None, account: str) -> None:
    """Print the cmd.exe commands (run them in an elevated prompt) that install `rag serve` as a service with
    this home, host and port (README, "Running as a Windows service")."""
    import subprocess
    import sys

    settings = settings_from(ctx)
    for comment, argv in windows_service_commands(python or sys.executable, str(settings.home), settings.host,
                                                  settings.port, account):
        if comment:
            console.print(literal(f"rem {comment}"), soft_wrap=True)
        console.print(literal(subprocess.list2cmdline(argv)), soft_wrap=True)
