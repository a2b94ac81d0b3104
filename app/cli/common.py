"""What every command shares: consoles, literal printing, error handling, common options."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from functools import wraps
from typing import Any, Callable, Iterator, NoReturn

import click
from rich.console import Console
from rich.text import Text

from rag.core import observe
from rag.core.errors import BadRequestError, ConfigError, IndexNotFoundError, RagError
from rag.core.names import missing_index_message
from rag.core.records import normalise_path
from rag.core.settings import Settings

UNWRAPPED_WIDTH = 1_000_000  # "no wrapping": wider than any line a command prints


def make_console(stderr: bool = False) -> Console:
    """A console for stdout or stderr. Output that is not a terminal (a pipe, a file) is not wrapped at
    80 columns: lines stay whole for grep and scripts (tables take their natural width). COLUMNS, when
    set, still wins."""
    console = Console(stderr=stderr, emoji=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, emoji=False, width=UNWRAPPED_WIDTH)
    return console


# Text from documents, paths or users goes out as rich Text (never parsed as markup); no ":name:" emoji codes.
console = make_console(stderr=True)
out = make_console()


def progress(message: str) -> None:
    """One timestamped progress line on stderr. Not ``console.log``: that pads each line to the console's
    width with the caller's file:line, a million spaces when the output is not wrapped."""
    console.print(Text.assemble((time.strftime("[%H:%M:%S] "), "dim"), literal(message)))


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 chunk``, ``2 chunks``, ``0 documents``."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def any_text_streams() -> None:
    """Let stdout and stderr take any text: output redirected to a file or a pipe is UTF-8 (on Windows it
    would be the ANSI code page, cp1252, in which an answer's "→" or a file named in Greek cannot be written);
    a console keeps its encoding and shows "?" for what it cannot."""
    for stream in (sys.stdout, sys.stderr):
        if not hasattr(stream, "reconfigure"):
            continue
        if stream.isatty():
            stream.reconfigure(errors="replace")
        else:
            stream.reconfigure(encoding="utf-8", errors="backslashreplace")


def literal(value: Any, style: str = "") -> Text:
    """``value`` printed exactly as it is: no markup, no emoji codes, no highlighting."""
    return Text("" if value is None else str(value), style=style)


def fail(message: str, exit_code: int) -> NoReturn:
    """One ``error: ...`` line on stderr (never wrapped by rich), then exit."""
    console.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
    sys.exit(exit_code)


def handle_errors(func: Callable) -> Callable:
    """Expected failures print one clear line and exit non-zero; no tracebacks for users."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except IndexNotFoundError as exc:  # the local user holds every index: name them all
            fail(missing_index_message(exc.index, exc.existing) if exc.index else exc.message, exc.exit_code)
        except RagError as exc:
            fail(exc.message, exc.exit_code)
        except KeyboardInterrupt:
            console.print("interrupted", style="yellow")
            sys.exit(130)

    return wrapper


def settings_from(ctx: click.Context, **overrides: Any) -> Settings:
    base: Settings = ctx.obj
    cleaned = {k: v for k, v in overrides.items() if v is not None}
    try:
        return base.replace(**cleaned) if cleaned else base
    except ConfigError as exc:  # only the command's flags changed: bad input, not a broken configuration
        raise BadRequestError(exc.message) from exc


@contextmanager
def traced(settings: Settings, command: str, root: bool = True) -> Iterator[None]:
    """Run a command as one root span ``rag COMMAND`` (what a request's server span is to the API), its stages'
    spans beneath it, exported as the telemetry settings say and flushed before the command exits.
    ``root=False``: no command span (a benchmark opens one trace per question itself)."""
    from rag.telemetry import start_telemetry  # lazy: keeps rag --help fast (the OpenTelemetry SDK)

    telemetry = start_telemetry(settings, "cli", capture_logs=False)
    try:
        if not root:
            yield
            return
        with observe.start_span(f"rag {command}", {"rag.command": command}):
            yield
    finally:
        if telemetry is not None:
            telemetry.shutdown()


def index_option(help_text: str = "Index name (default: the `index` setting).") -> Callable:
    return click.option("--index", help=help_text)


def json_option(help_text: str = "Print as JSON.") -> Callable:
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))




def on_this_disk(id_or_path: str) -> str:
    """A document or folder the local user names: a path that exists here is resolved on this disk (links,
    mapped drives), so it matches its identity; anything else (an id) as given. The server never does this
    with what a caller sends."""
    try:
        return normalise_path(id_or_path) if os.path.lexists(id_or_path) else id_or_path
    except (OSError, ValueError):
        return id_or_path
