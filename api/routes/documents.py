"""/v1/documents: upload (multipart), list, delete — the ingest layer's upload operations over HTTP."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.params import FromPath, QueryParameter

from api.auth import Context
from api.openapi import UPLOAD_RESPONSES, errors, operation
from api.protocol import (DeleteResponse, DocumentInfo, DocumentList, ErrorBody, FileFormat, FileResult, FormatList,
                          UploadResponse)
from api.requests import uploaded_files
from api.jobs import accepted, finished
from api.state import AppState
from ingest.formats.registry import FORMATS
from ingest.uploads import IncomingFile
from rag.core.errors import RagError
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


class DocumentsController(Controller):
    path = "/v1/documents"
    tags = ["documents"]

    # The body is read by the handler (api.requests.uploaded_files: a part that is no file gets a message
    # of its own) and documented by ``operation``.
    @post("", status_code=200, summary="Upload and ingest one or more files (multipart field `data`): the "
          "results when done within job_wait_s, else 202 and a job to follow", responses=UPLOAD_RESPONSES,
          operation_class=operation(upload=True))
    async def upload(self, state: State, request: Request, context: Context, index: IndexQuery = None,
                     groups: GroupsQuery = None, run_async: AsyncQuery = False) -> Response[UploadResponse]:
        app: AppState = state.app
        target = app.index(app.authorize(context, index, "editor", "/v1/documents"))
        app.require_ready()
        files = [IncomingFile(upload.filename, await upload.read()) for upload in await uploaded_files(request)]
        running = await anyio.to_thread.run_sync(
            lambda: app.start_upload(target, context, files, groups.split(",") if groups is not None else None))
        if run_async or not await finished(running, app.settings.job_wait_s):
            return accepted(running.job, app)
        if running.error is not None:
            raise running.error
        report = running.result
        body = UploadResponse(index=report.index, files=[
            FileResult(file=o.path, status=o.status, document_id=o.document_id, chunks=o.chunks, reason=o.reason,
                       reason_type=o.reason_type, renamed_from=report.renamed.get(o.path), warning=o.warning)
            for o in report.outcomes])
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
    async def list_documents(self, state: State, context: Context, index: IndexQuery = None) -> DocumentList:
        app: AppState = state.app
        target = app.index(app.authorize(context, index, "reader", "/v1/documents"))
        if not target.exists():
            target.reader().close()  # the store's own "no index" error, with the names it has
        return DocumentList(index=target.name,
                            documents=[DocumentInfo.of(d) for d in app.visible_documents(target, context)])

    @delete("/{document_id:str}", status_code=200, summary="Remove a document and its vectors",
            responses=errors(400, 404, 409))
    async def delete_document(self, state: State, context: Context, document_id: FromPath[str],
                              index: IndexQuery = None) -> DeleteResponse:
        app: AppState = state.app
        target = app.index(app.authorize(context, index, "editor", "/v1/documents/{document_id}"))
        try:
            visible = await anyio.to_thread.run_sync(app.visible_document, target, context, document_id)
            record = await anyio.to_thread.run_sync(app.uploads.delete, target, visible.id)
        except RagError as exc:
            app.record(context, "delete", route="/v1/documents/{document_id}", index=target.name,
                       outcome="error", error=exc.error_type)
            raise
        app.record(context, "delete", route="/v1/documents/{document_id}", index=target.name, outcome="deleted",
                   document_id=record.id, path=record.display_path, chunks=record.chunks)
        return DeleteResponse(deleted=record.id, path=record.display_path, chunks=record.chunks)
