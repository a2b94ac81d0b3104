"""The work of upload and sync jobs (ingest.jobs runs it): the same operations as ``rag ingest`` and
``rag sync``, reporting progress to the job and stopping when it is cancelled."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from ingest.jobs import JobStore, Outcome, Running, Tracker, Work
from ingest.parameters import IngestParameters
from ingest.sources import find_source, index_sources, sync_source
from rag.store import StoredIndex
from ingest.uploads import TOO_LARGE, IncomingFile, Uploads


def upload_work(jobs: JobStore, uploads: Uploads, index: StoredIndex, parameters: IngestParameters,
                groups: Sequence[str] | None, scope: frozenset[str] | None) -> Work:
    """Store and ingest the job's uploaded files (read from the job's folder when it starts) as an uploader who
    sees the documents of ``scope`` (None: every document)."""

    def work(tracker: Tracker, running: Running) -> Outcome:
        files = [IncomingFile(name, content) for name, content in jobs.inputs(running.job)]
        report = uploads.add(index, files, parameters, groups, progress=tracker, scope=scope)
        running.result = report
        counts = Counter(o.status for o in report.outcomes)
        summary = {**{s: counts[s] for s in ("added", "updated", "unchanged", "failed")},
                   "chunks": sum(o.chunks for o in report.accepted)}
        results = list(report.outcomes)
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
        summary = sync_source(index, source, parameters, progress=tracker)
        running.result = summary
        counts = {"added": summary.ingest.count("added"), "updated": summary.ingest.count("updated"),
                  "unchanged": summary.unchanged, "renamed": len(summary.renamed), "removed": len(summary.removed),
                  "failed": summary.ingest.count("failed"), "chunks_embedded": summary.ingest.chunks_written}
        changed = [o for o in summary.ingest.outcomes if o.status != "unchanged"]  # 1,000 unchanged files: no list
        return Outcome(changed, counts)

    return work
