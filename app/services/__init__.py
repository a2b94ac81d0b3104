"""The application layer: what the server and the CLI do with the components, once, for both front ends —
answers (observed and audited), documents and indexes as a caller may see them, upload and sync jobs, the
folders an index follows and their schedule, API keys, the audit trail. ``app.runtime`` opens the components
and builds ``Services`` whole; the HTTP routes and the ``rag`` commands call it."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from app.services.answers import Answers
from app.services.audit import Auditor
from app.services.documents import Documents
from app.services.jobs import Jobs
from app.services.keys import Keys
from app.services.schedule import SourceScheduler
from app.services.sources import Sources
from rag.core.names import IndexName, index_name
from rag.core.settings import Settings
from rag.store.conversations import ConversationStore

__all__ = ["Answers", "Auditor", "Documents", "Jobs", "Keys", "Services", "SourceScheduler", "Sources"]


@dataclass
class Services:
    """Everything a server does, built whole by ``app.runtime.open_services``; the answer service's models
    load afterwards (``answers.ready()`` says whether they have)."""

    settings: Settings
    audit: Auditor
    documents: Documents
    sources: Sources
    jobs: Jobs
    keys: Keys
    answers: Answers
    conversations: ConversationStore
    schedule: SourceScheduler

    def index_name(self, requested: str | None) -> IndexName:
        """The index a request names, or the server's default (validated, not yet authorized)."""
        return index_name(requested, self.settings.index)

    def start_schedule(self) -> None:
        threading.Thread(target=self.schedule.run, name="source-sync", daemon=True).start()

    def close(self) -> None:
        self.schedule.stop()
        self.jobs.close()
        self.answers.close()
        self.documents.close()
        self.keys.close()
        self.conversations.close()
        self.audit.close()
