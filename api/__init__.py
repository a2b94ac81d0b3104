"""Litestar service: thin routes over the answer and ingest services."""
