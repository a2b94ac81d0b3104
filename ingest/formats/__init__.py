"""Format loaders beyond plain text: PDF (with OCR), Office, spreadsheets, e-mail, images.

``registry`` is the one place that maps a file to its loader (suffix, then magic bytes); each
other module reads one family of formats with the well-kept library for it and returns an
``ingest.loaders.LoadedDocument``.
"""
