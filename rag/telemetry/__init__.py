"""The OpenTelemetry SDK for this process, chosen by settings (``telemetry = off | file | otlp``), and reading
the files back (``rag trace show``). The stages record through ``rag.core.observe`` (the API only)."""

from rag.telemetry.setup import Telemetry, start_telemetry

__all__ = ["Telemetry", "start_telemetry"]
