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
    console.print(literal(f"serving on http://{settings.host}:{settings.port}  (OpenAPI: /schema)"))
    if workers > 1:
        # Worker processes rebuild the app from the environment, so pass the effective settings there.
        os.environ.update({"RAG_HOME": str(settings.home), "RAG_INDEX": settings.index})
        uvicorn.run("api.app:create_app", factory=True, host=settings.host, port=settings.port, workers=workers,
                    log_level="warning", log_config=None)
    else:
        from api.app import create_app

        # log_config=None: uvicorn's own messages go through the app's JSON logging (api/observability.py).
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning",
                    log_config=None)


