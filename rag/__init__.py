"""Answer questions over local documents: retrieval, prompting and streaming generation."""

__version__ = "0.1.0"
