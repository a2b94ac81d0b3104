"""``rag serve``: the HTTP API and web app."""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket

import click

from app.cli.common import console, handle_errors, index_option, literal, settings_from
from app.runtime import open_keys
from rag.core.errors import BadRequestError
from rag.core.settings import COMMAND_LINE_ENV, Settings


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def port_problem(host: str, port: int, windows: bool | None = None) -> str | None:
    """Why ``host:port`` cannot be listened on, checked before any model loads; None when it can."""
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
    import uvicorn  # lazy: keeps rag --help fast

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
    # By import string, in every process alike: the CLI does not import the HTTP front end, and each worker
    # builds its settings as this process did, the flags passed whole through the environment.
    os.environ[COMMAND_LINE_ENV] = json.dumps(settings.command_line(), default=sorted)
    # log_config=None: uvicorn's own messages go through the app's JSON logging (api/telemetry.py).
    uvicorn.run("api.app:serving_app", factory=True, host=settings.host, port=settings.port, workers=workers,
                log_level="warning", log_config=None)




# --------------------------------------------------------------------------- running as a Windows service
