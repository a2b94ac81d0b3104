"""One exception hierarchy for the whole product.

Every error a user can cause or meet carries an HTTP status and a stable ``type``
string; the API maps them in one place (``api/errors.py``) and the CLI turns them
into a message and a non-zero exit code.
"""

from __future__ import annotations


class RagError(Exception):
    """Base of every expected failure. Never raised directly."""

    status_code: int = 500
    error_type: str = "internal_error"
    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequestError(RagError):
    status_code = 400
    error_type = "invalid_request"
    exit_code = 2


class ForbiddenError(RagError):
    """A known principal without the role a request needs (never says whether the index exists)."""

    status_code = 403
    error_type = "forbidden"


class NotFoundError(RagError):
    status_code = 404
    error_type = "not_found"
    exit_code = 2


class IndexNotFoundError(NotFoundError):
    """No index of that name. ``index`` and ``existing`` (the indexes there are) let whoever shows it say which of
    them its reader may know of (``rag.core.names.missing_index_message``); its ``message`` names none."""

    error_type = "index_not_found"

    def __init__(self, message: str, index: str | None = None, existing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.index = index
        self.existing = tuple(existing)


class DocumentNotFoundError(NotFoundError):
    error_type = "document_not_found"


class ConflictError(RagError):
    status_code = 409
    error_type = "conflict"


class InvalidBackupError(BadRequestError):
    """An index backup that is damaged, not a backup, or of a format this program does not read."""

    error_type = "invalid_backup"


class SourceNotFoundError(NotFoundError):
    error_type = "source_not_found"


class SourceUnavailableError(BadRequestError):
    """A watched folder that is missing or cannot be listed: a sync removes nothing from the index."""

    error_type = "source_unavailable"


class JobNotFoundError(NotFoundError):
    error_type = "job_not_found"


class JobStateError(ConflictError):
    """A job that cannot do what was asked in the state it is in (re-running one that is still running)."""

    error_type = "job_state"


class JobCancelled(RagError):
    """Raised inside a job's work when someone cancelled it; what it had written is rolled back."""

    status_code = 409
    error_type = "cancelled"


class ConfirmationRequiredError(ConflictError):
    """Something that cannot be undone, asked without its confirmation (deleting an index)."""

    error_type = "confirmation_required"


class SourceBusyError(ConflictError):
    """Another process (a replica on the same PostgreSQL) is syncing this source right now: nothing changed."""

    error_type = "source_busy"


class EmbedderMismatchError(ConflictError):
    error_type = "embedder_mismatch"


class IndexLockedError(ConflictError):
    error_type = "index_locked"


class IndexBusyError(ConflictError):
    """An index another process still has open (Windows will not remove its files until it lets go)."""

    error_type = "index_busy"


class UnprocessableDocumentError(RagError):
    """A file that cannot be ingested: unsupported, encrypted, broken or without text."""

    status_code = 422
    error_type = "unprocessable_document"
    exit_code = 2


class ConfigError(RagError):
    status_code = 500
    error_type = "configuration_error"
    exit_code = 3


class ModelError(RagError):
    """A model is missing, broken or failed to load."""

    status_code = 503
    error_type = "model_unavailable"
    exit_code = 3


class ChecksumError(ModelError):
    error_type = "checksum_mismatch"


class OverloadedError(RagError):
    status_code = 503
    error_type = "overloaded"

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class UpstreamError(RagError):
    """A remote engine (the OpenAI-compatible generator) answered with an error or with something unreadable."""

    status_code = 502
    error_type = "upstream_error"


class UpstreamUnavailable(UpstreamError):
    """The remote engine cannot be reached, or says it is overloaded."""

    status_code = 503
    error_type = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    """The remote engine did not answer (or stopped answering) within the configured timeout."""

    status_code = 504
    error_type = "upstream_timeout"


class StoreUnavailableError(RagError):
    """The database behind the store cannot be reached."""

    status_code = 503
    error_type = "store_unavailable"
