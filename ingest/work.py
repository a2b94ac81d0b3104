"""The work of upload and sync jobs (ingest.jobs runs it): the same operations as ``rag ingest`` and
``rag sync``, reporting progress to the job and stopping when it is cancelled."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from ingest.embedder import Embedder
from ingest.formats.options import LoadOptions
from ingest.jobs import JobStore, Outcome, Running, Tracker, Work, file_results
from ingest.records import FolderGroups
from ingest.sources import find_source, index_sources, sync_source
from ingest.store import StoredIndex
from ingest.uploads import TOO_LARGE, IncomingFile, Uploads


@dataclass(frozen=True)
class IngestParameters:
    """How files are read and cut, from the settings (the same for every job of a server)."""

    embedder: Embedder
    chunk_tokens: int
    chunk_overlap: int
    max_file_bytes: int
    load_options: LoadOptions
    folder_groups: FolderGroups = field(default_factory=FolderGroups)  # `[folder_groups]` of rag.toml


def upload_work(jobs: JobStore, uploads: Uploads, index: StoredIndex, parameters: IngestParameters,
                groups: Sequence[str] | None) -> Work:
    """Store and ingest the job's uploaded files (read from the job's folder when it starts)."""

    def work(tracker: Tracker, running: Running) -> Outcome:
        files = [IncomingFile(name, content) for name, content in jobs.inputs(running.job)]
        report = uploads.add(index, files, parameters.embedder, parameters.chunk_tokens, parameters.chunk_overlap,
                             parameters.max_file_bytes, parameters.load_options, groups, progress=tracker)
        running.result = report
        counts = Counter(o.status for o in report.outcomes)
        summary = {**{s: counts[s] for s in ("added", "updated", "unchanged", "failed")},
                   "chunks": sum(o.chunks for o in report.accepted)}
        results = file_results(report.outcomes, report.renamed)
        if report.accepted:
            return Outcome(results, summary)
        first = report.outcomes[0]
        error_type = TOO_LARGE if report.all_too_large else first.reason_type or "unprocessable_document"
        return Outcome(results, summary, error_type, f"{first.path}: {first.reason}")

    return work


def sync_work(index: StoredIndex, source_id: str, parameters: IngestParameters) -> Work:
    """One sync of a source (looked up when the job starts: it may have been removed meanwhile)."""

    def work(tracker: Tracker, running: Running) -> Outcome:
        source = find_source(index_sources(index), source_id)
        summary = sync_source(index, source, parameters.embedder, parameters.chunk_tokens, parameters.chunk_overlap,
                              progress=tracker, load_options=parameters.load_options,
                              folder_groups=parameters.folder_groups)
        running.result = summary
        counts = {"added": summary.ingest.count("added"), "updated": summary.ingest.count("updated"),
                  "unchanged": summary.unchanged, "renamed": len(summary.renamed), "removed": len(summary.removed),
                  "failed": summary.ingest.count("failed"), "chunks_embedded": summary.ingest.chunks_written}
        changed = [o for o in summary.ingest.outcomes if o.status != "unchanged"]  # 1,000 unchanged files: no list
        return Outcome(file_results(changed), counts)

    return work
