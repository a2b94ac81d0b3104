"""``rag serve``: the HTTP API and web app."""

from __future__ import annotations

import click

from rag.cli.common import console, handle_errors, index_option, literal, settings_from


@click.command("serve")
@click.option("--host", help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, help="Port (default 8000).")
@index_option("Default index for requests that name none.")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Server processes; each loads its own models (1 is best on small machines).")
@click.pass_context
@handle_errors
def serve_cmd(ctx: click.Context, host: str | None, port: int | None, index: str | None, workers: int) -> None:
    """Serve the REST API (Litestar on uvicorn)."""
    import os

    import uvicorn

    settings = settings_from(ctx, host=host, port=port, index=index)
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


