"""/v1/documents: upload (multipart), list, delete — the ingest layer's upload operations over HTTP."""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path
from typing import Annotated

import anyio.to_thread
from litestar import Controller, Request, Response, delete, get, post
from litestar.response import File
from litestar.openapi import ResponseSpec
from litestar.params import FromPath, QueryParameter

from api.auth import Context
from api.openapi import UPLOAD_RESPONSES, errors, operation
from api.protocol import (DeleteResponse, DocumentInfo, DocumentList, ErrorBody, FileFormat, FileResult, FormatList,
                          UploadResponse)
from api.requests import uploaded_files
from api.jobs import accepted, finished
from api.state import ServicesDep
from ingest.formats.registry import FORMATS
from ingest.pipeline import ATTACHMENT_SEP
from rag.core.records import DocumentRecord, normalise_path
from ingest.sources import Source
from ingest.uploads import IncomingFile
from rag.core.access import RequestContext
from rag.core.errors import DocumentNotFoundError
from rag.core.names import INDEX_NAME_PATTERN

# The index name's pattern, in the schema and checked by Litestar (the long fuzzing run found that the schema
# allowed names the index lookup refuses).
IndexQuery = Annotated[str | None, QueryParameter(name="index", pattern=INDEX_NAME_PATTERN,
                                                  description="the index (default: the server's RAG_INDEX)")]
AsyncQuery = Annotated[bool, QueryParameter(
    name="async", description="answer 202 with a job at once, however small the work (default: wait up to "
                              "job_wait_s for it to finish)")]
GroupsQuery = Annotated[str | None, QueryParameter(
    name="groups", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}(,[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}){0,31}$",
    description="comma-separated access groups for the uploaded documents: only readers in one of them (or "
                "unrestricted) see them; left out, a new document is public and a replaced one keeps its groups")]


# Opened in the browser's own viewer (a PDF at the cited page); every other type is downloaded, never shown inline
# (an HTML document opened from this origin could run its scripts here).
INLINE_TYPES = {".pdf": "application/pdf"}


def folder_of(record: DocumentRecord, sources: list[Source]) -> Source | None:
    """The followed folder a document comes from (a sync adds it again while its file is there), if any."""
    for source in sources:
        if record.path.startswith(source.path.rstrip(os.sep) + os.sep):
            return source
    return None


def document_info(record: DocumentRecord, sources: list[Source], context: RequestContext, index: str,
                  uploads: Path) -> DocumentInfo:
    info = DocumentInfo.of(record)
    source = folder_of(record, sources)
    info.origin = "folder" if source is not None else (
        "upload" if record.path.startswith(str(uploads).rstrip(os.sep) + os.sep) else "ingest")
    if source is not None:
        # Editors see the folder as it was added; readers (who do not see folders) only its name.
        shown = source.display_path if context.principal.may(index, "editor") else Path(source.display_path).name
        info.folder, info.source_id = shown, source.id
    return info


def original_file(record: DocumentRecord) -> Path:
    """Where the document's original file is now (an upload's kept copy, or the file it was ingested from)."""
    if ATTACHMENT_SEP in Path(record.path).name:
        parent = record.display_path.split(ATTACHMENT_SEP)[0]
        raise DocumentNotFoundError(f"{record.display_path} is an attachment inside {Path(parent).name}: open that "
                                    "document to get it")
    for spelled in (record.display_path, record.path):
        path = Path(spelled)
        if path.is_file():
            return path
    raise DocumentNotFoundError(f"the original file of {Path(record.display_path).name} is no longer where it was "
                                "ingested from (moved or deleted on the server); its passages are still in the index")


class DocumentsController(Controller):
    path = "/v1/documents"
    tags = ["documents"]

    # The body is read by the handler (api.requests.uploaded_files: a part that is no file gets a message
    # of its own) and documented by ``operation``.
    @post("", status_code=200, summary="Upload and ingest one or more files (multipart field `data`): the "
          "results when done within job_wait_s, else 202 and a job to follow", responses=UPLOAD_RESPONSES,
          operation_class=operation(upload=True))
    async def upload(self, services: ServicesDep, request: Request, context: Context, index: IndexQuery = None,
                     groups: GroupsQuery = None, run_async: AsyncQuery = False) -> Response[UploadResponse]:
        target = services.documents.index(services.documents.authorized(context, index, "editor", "/v1/documents"))
        services.answers.ready()  # the embedder: a 503 at once while the models load
        files = [IncomingFile(upload.filename, await upload.read()) for upload in await uploaded_files(request)]
        running = await anyio.to_thread.run_sync(lambda: services.jobs.start_upload(
            target, context, files, groups.split(",") if groups is not None else None))
        if run_async or not await finished(running, services.settings.job_wait_s):
            return accepted(running.job, services.jobs)
        if running.error is not None:
            raise running.error
        report = running.result
        body = UploadResponse(index=report.index, files=[FileResult.of(o) for o in report.outcomes])
        if report.accepted:
            return Response(body, status_code=200)
        first = report.outcomes[0]
        body.error = ErrorBody(type=first.reason_type or "unprocessable_document", message=f"{first.path}: {first.reason}")
        return Response(body, status_code=413 if report.all_too_large else 422)

    @get("/formats", summary="The file formats an upload may have (the web app's upload hint and file picker)",
         responses=errors())
    async def formats(self) -> FormatList:
        return FormatList(formats=[FileFormat(kind=f.kind, label=f.label, suffixes=list(f.suffixes)) for f in FORMATS],
                          accept=",".join(suffix for f in FORMATS for suffix in f.suffixes))

    @get("", summary="Documents in an index", responses=errors(400, 404))
    async def list_documents(self, services: ServicesDep, context: Context, index: IndexQuery = None) -> DocumentList:
        documents = services.documents
        target = documents.index(documents.authorized(context, index, "reader", "/v1/documents"))
        if not target.exists():
            target.reader().close()  # the store's own "no index" error (the API names the indexes the caller holds)
        sources = await anyio.to_thread.run_sync(services.sources.of, target)
        uploads = Path(normalise_path(services.settings.uploads_path))
        return DocumentList(index=target.name, documents=[document_info(d, sources, context, target.name, uploads)
                                                          for d in documents.visible_documents(target, context)])

    @get("/{document_id:str}/original", summary="The document's original file, for readers who may see the "
         "document: a PDF to view (open it at #page=N), any other type as a download", media_type="application/pdf",
         responses={**errors(400, 404), 200: ResponseSpec(bytes, media_type="application/octet-stream",
                                                          description="the file as it was ingested (or as it is "
                                                                      "now in its folder)", generate_examples=False)})
    async def original(self, services: ServicesDep, context: Context, document_id: FromPath[str],
                       index: IndexQuery = None) -> File:
        documents = services.documents
        target = documents.index(documents.authorized(context, index, "reader",
                                                      "/v1/documents/{document_id}/original"))
        record = await anyio.to_thread.run_sync(documents.visible_document, target, context, document_id)
        path = await anyio.to_thread.run_sync(original_file, record)
        services.audit.record(context, "original", route="/v1/documents/{document_id}/original", index=target.name,
                   outcome="sent", document_id=record.id, path=record.display_path)
        media_type = INLINE_TYPES.get(path.suffix.lower())
        return File(path, filename=path.name, media_type=media_type or mimetypes.guess_type(path.name)[0]
                    or "application/octet-stream", content_disposition_type="inline" if media_type else "attachment",
                    headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
                             "Content-Security-Policy": "sandbox; default-src 'none'"} if not media_type else
                    {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})

    @delete("/{document_id:str}", status_code=200, summary="Remove a document and its vectors",
            responses=errors(400, 404, 409))
    async def delete_document(self, services: ServicesDep, context: Context, document_id: FromPath[str],
                              index: IndexQuery = None) -> DeleteResponse:
        documents = services.documents
        target = documents.index(documents.authorized(context, index, "editor", "/v1/documents/{document_id}"))
        record = await anyio.to_thread.run_sync(documents.delete_visible, target, context, document_id,
                                                "/v1/documents/{document_id}")
        return DeleteResponse(deleted=record.id, path=record.display_path, chunks=record.chunks)
