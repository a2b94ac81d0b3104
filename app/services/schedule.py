"""The server's own syncs: each followed folder with an interval (`rag sources add --every`) synced when it is
due, one at a time, as a job; a source another replica is syncing, or one that failed, is looked at again
after a while. The same loop prunes old jobs and sweeps the store now and then."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from app.services.answers import Answers
from app.services.documents import Documents
from app.services.jobs import Jobs
from ingest.sources import Source, due_sources, index_sources
from rag.core.access import ALL_INDEXES, EVERY_DOCUMENT, Principal, RequestContext
from rag.core.errors import SourceBusyError, SourceUnavailableError
from rag.core.names import IndexName
from rag.store import StoredIndex

log = logging.getLogger("rag.api")
BUSY_BACKOFF_S = 30.0  # a source another replica is syncing is looked at again after this
# A scheduled sync that failed without being recorded on its source (an index built with another embedder, an
# index locked by a CLI ingest) is tried again after its interval, at least this long: not every 2 s.
FAILED_BACKOFF_S = 60.0
PRUNE_EVERY_S = 3600.0  # finished jobs older than a week are removed at start and then hourly
# The server's own scheduled syncs: they run what an operator set up (`rag sources add --every`).
SCHEDULE = Principal("schedule", ((ALL_INDEXES, "editor"),), EVERY_DOCUMENT, kind="system")
SOURCE_POLL_S = 2.0  # how often the server looks for a source whose scheduled sync is due (a few SQLite reads)


@dataclass
class SourceScheduler:
    jobs: Jobs
    documents: Documents
    answers: Answers
    stopping: threading.Event = field(default_factory=threading.Event)
    busy_until: dict[str, float] = field(default_factory=dict)  # source id -> when to try a busy source again

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        """Sync each source with an interval when it is due, one at a time, until ``stop()``. A sync another
        process is running holds the index's writer: this one waits for the next round."""
        pruned_at = time.monotonic()
        while not self.stopping.wait(SOURCE_POLL_S):
            try:
                self.answers.forget(None)  # an index another process deleted: let go of its files
                if time.monotonic() - pruned_at > PRUNE_EVERY_S:
                    pruned_at = time.monotonic()
                    self.jobs.store.prune()
                    self.documents.sweep()
                names = self.documents.names()
            except Exception:  # noqa: BLE001 - a background loop: log, and try again next round
                log.exception("looking after jobs and indexes failed")
                continue
            for name in names:  # one index that cannot be read stops no other's syncs
                try:
                    target = self.documents.index(IndexName(name))  # a name the store lists
                    for source in due_sources(index_sources(target), time.time()):
                        if self.stopping.is_set():
                            return
                        if self.busy_until.get(source.id, 0.0) <= time.time():
                            self.sync(target, source)
                except Exception:  # noqa: BLE001 - a background loop: log, and try again next round
                    log.exception("scheduled source sync of index %s failed", name)

    def sync(self, target: StoredIndex, source: Source) -> None:
        """One scheduled sync, waited for; a sync that changed nothing leaves no job behind."""
        running = self.jobs.start_sync(target, source.id, RequestContext(SCHEDULE), principal="schedule")
        while not running.done.wait(1.0):
            if self.stopping.is_set():
                return
        summary, exc = running.result, running.error
        if isinstance(exc, SourceBusyError):  # another replica syncs it: no job to show, look again later
            self.jobs.store.discard(running.job)
            self.busy_until[source.id] = time.time() + BUSY_BACKOFF_S
            log.debug("scheduled sync of %s: %s", source.display_path, exc.message)
            return
        if exc is not None or summary is None:
            if not isinstance(exc, SourceUnavailableError):  # that one is recorded on the source (not due again)
                self.busy_until[source.id] = time.time() + max(FAILED_BACKOFF_S, source.every_s or 0)
            message, error = (exc.message, exc.error_type) if exc else (running.job.error, running.job.error_type)
            log.warning("scheduled sync of %s: %s", source.display_path, message,
                        extra={"fields": {"source": source.id, "index": target.name, "error": error,
                                          "job": running.job.id}})
            return
        last = summary.source.last
        if last is not None and last.status == "ok" and not (last.added or last.updated or last.renamed
                                                               or last.removed):
            self.jobs.store.discard(running.job)  # nothing happened: the source's record says so, no job to keep
        log.info("scheduled sync of %s", source.display_path, extra={"fields": {
            "source": source.id, "index": target.name, "status": last.status if last else "ok",
            "added": summary.ingest.count("added"), "updated": summary.ingest.count("updated"),
            "renamed": len(summary.renamed), "removed": len(summary.removed), "seconds": round(summary.seconds, 3)}})
