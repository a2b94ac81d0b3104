"""The ``rag`` command line. Thin: parse options, call a service, render the result."""

from app.cli.main import main

__all__ = ["main"]
