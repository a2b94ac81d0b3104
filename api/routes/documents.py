"""/v1/documents: upload (multipart), list, delete — through the same ingest pipeline as the CLI."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import anyio.to_thread
from litestar import Controller, Response, delete, get, post
from litestar.datastructures import State
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, FromQuery

from api.protocol import UploadForm
from api.state import AppState
from ingest.formats.options import LoadOptions
from ingest.loaders import load_document
from ingest.pipeline import FileOutcome, delete_document, ingest_paths
from ingest.store import IndexReader, normalise_path
from rag.errors import BadRequestError, UnprocessableDocumentError

SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_filename(name: str | None) -> str:
    """A plain file name from an untrusted one: no directories, no leading dots, no odd characters."""
    base = re.split(r"[\\/]", name or "")[-1]
    cleaned = SAFE_NAME.sub("_", base).lstrip("._")[:120]
    if not cleaned or "." not in cleaned:
        raise BadRequestError(f"unusable file name {name!r}: it needs a name with an extension")
    return cleaned


def uploads_dir(app: AppState, index: str) -> Path:
    return app.settings.home / "uploads" / index


@dataclass(frozen=True)
class StagedUpload:
    staged: Path  # the upload, written beside its final name
    final: Path  # where it is stored (and indexed from) once accepted


def outcome_body(outcome: FileOutcome) -> dict:
    """One file's line in the upload response."""
    return {"file": Path(outcome.path).name, "status": outcome.status, "document_id": outcome.document_id,
            "chunks": outcome.chunks, "reason": outcome.reason, "reason_type": outcome.reason_type,
            "warning": outcome.warning}


def ingest_uploads(uploads: list[StagedUpload], index_root: Path, embedder, chunk_tokens: int,
                   chunk_overlap: int, load_options: LoadOptions | None = None) -> list[FileOutcome]:
    """Move the uploads into place and ingest them. A file that then fails to ingest, or every file when
    the ingest itself fails (e.g. the index is locked), gets its previous stored version back."""
    previous: dict[Path, Path] = {}
    moved: list[Path] = []

    def restore(final: Path) -> None:
        if final in previous:
            previous.pop(final).replace(final)
        else:
            final.unlink(missing_ok=True)

    try:
        for upload in uploads:
            if upload.final.exists():
                kept = upload.final.with_name(f".previous-{uuid.uuid4().hex}-{upload.final.name}")
                upload.final.replace(kept)
                previous[upload.final] = kept
            upload.staged.replace(upload.final)
            moved.append(upload.final)
        summary = ingest_paths(moved, index_root, embedder, chunk_tokens, chunk_overlap, load_options=load_options)
    except BaseException:
        for final in moved + list(previous.keys() - set(moved)):  # the rest: moved aside, upload not in place
            restore(final)
        for upload in uploads:
            upload.staged.unlink(missing_ok=True)
        raise
    stored = {upload.final.name: upload.final for upload in uploads}
    for outcome in summary.outcomes:
        name = Path(outcome.path).name
        if outcome.status == "failed" and name in stored:
            restore(stored[name])
    for kept in previous.values():
        kept.unlink(missing_ok=True)
    return summary.outcomes


class DocumentsController(Controller):
    path = "/v1/documents"
    tags = ["documents"]

    @post("", summary="Upload and ingest one or more files (multipart field `data`)")
    async def upload(self, state: State, data: Annotated[UploadForm, Body(media_type=RequestEncodingType.MULTI_PART)],
                     index: FromQuery[str | None] = None) -> Response:
        app: AppState = state.app
        models = app.require_ready()
        name = app.index_name(index)
        limit = app.settings.max_upload_mb * 1024 * 1024
        if not data.data:
            raise BadRequestError("no files in the upload (send them in the multipart field 'data')")
        filenames = [safe_filename(upload.filename) for upload in data.data]
        repeated = sorted({f for f in filenames if filenames.count(f) > 1})
        if repeated:
            raise BadRequestError(f"one upload holds several files named {', '.join(repeated)}; "
                                  "stored names must differ")
        folder = uploads_dir(app, name)
        folder.mkdir(parents=True, exist_ok=True)
        outcomes: list[FileOutcome] = []
        accepted: list[StagedUpload] = []
        for upload, filename in zip(data.data, filenames):
            content = await upload.read()
            if len(content) > limit:
                outcomes.append(FileOutcome(filename, "failed", reason_type="payload_too_large",
                                            reason=f"file is larger than {app.settings.max_upload_mb} MB"))
                continue
            staged = folder / f".incoming-{uuid.uuid4().hex}-{filename}"
            staged.write_bytes(content)
            try:
                await anyio.to_thread.run_sync(load_document, folder / filename, content,
                                               LoadOptions.from_settings(app.settings))
            except UnprocessableDocumentError as exc:
                staged.unlink(missing_ok=True)
                outcomes.append(FileOutcome(filename, "failed", reason_type=exc.error_type, reason=exc.message))
                continue
            accepted.append(StagedUpload(staged, folder / filename))
        if accepted:
            def ingest() -> list[FileOutcome]:
                # One upload at a time per index: a second one must not move files while the first may restore.
                with app.uploads_lock(name):
                    return ingest_uploads(accepted, app.settings.index_path(name), models.embedder,
                                          app.settings.chunk_tokens, app.settings.chunk_overlap,
                                          LoadOptions.from_settings(app.settings))

            outcomes += await anyio.to_thread.run_sync(ingest)
        ok = [o for o in outcomes if o.status in ("added", "updated", "unchanged")]
        status = 200 if ok else (413 if all(o.reason_type == "payload_too_large" for o in outcomes) else 422)
        body = {"index": name, "files": [outcome_body(o) for o in outcomes]}
        if not ok:
            first = outcomes[0]
            body["error"] = {"type": first.reason_type, "message": f"{Path(first.path).name}: {first.reason}"}
        return Response(body, status_code=status)

    @get("", summary="Documents in an index")
    async def list_documents(self, state: State, index: FromQuery[str | None] = None) -> dict:
        app: AppState = state.app
        root = app.index_root(index)
        reader = IndexReader(root)
        try:
            return {"index": root.name, "documents": [d.__dict__ for d in reader.documents()]}
        finally:
            reader.close()

    @delete("/{document_id:str}", status_code=200, summary="Remove a document and its vectors")
    async def delete_document(self, state: State, document_id: FromPath[str],
                              index: FromQuery[str | None] = None) -> dict:
        app: AppState = state.app
        root = app.index_root(index)
        record = await anyio.to_thread.run_sync(delete_document, root, document_id)
        uploaded = Path(record.path)
        if normalise_path(uploaded.parent) == normalise_path(uploads_dir(app, root.name)):
            uploaded.unlink(missing_ok=True)  # our copy of an uploaded file; user files elsewhere stay
        return {"deleted": record.id, "path": record.path, "chunks": record.chunks}
