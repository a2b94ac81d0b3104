"""The audit trail as the application writes it: one record per thing done or refused, the principal that did
it, the questions as the ``audit_questions`` setting says, refusals before authentication rate-limited."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rag.answering.result import AnswerResult
from rag.core.access import RequestContext
from rag.core.errors import RagError
from rag.store.audit_files import AuditLog, RefusalLimiter, question_fields


@dataclass
class Auditor:
    """Writes to ``trail``; without one (``audit = false``) records nothing. ``route`` is a record's field:
    the HTTP route, or ``cli`` for a command."""

    trail: AuditLog | None
    question_mode: str = "sha256"
    refusals: RefusalLimiter = field(default_factory=RefusalLimiter)

    def record(self, context: RequestContext, event: str, **fields: Any) -> None:
        """One audit record (nothing without an audit trail)."""
        if self.trail is not None:
            # The kind keeps names of two kinds apart: the key "dana" is not the signed-in "dana" (jwt).
            self.trail.append(event, principal=context.principal.name, principal_kind=context.principal.kind,
                              request_id=context.request_id, **fields)

    def record_refusal(self, reason: str, status: int, method: str, path: str, client: str,
                       **fields: str | None) -> None:
        """A refusal before authentication (401, ``forbidden_host``, ``cross_origin``): one ``refused`` record,
        rate-limited (``RefusalLimiter``). Never the token presented; header values cut to 200 characters."""
        if self.trail is None:
            return
        admitted, due = self.refusals.admit(reason, client)
        for summary in due:
            self._record_refusal_summary(summary)
        if admitted:
            self.trail.append("refused", principal_kind="none", route=path[:200], method=method, outcome="refused",
                              reason=reason, status=status, client=client,
                              **{k: v[:200] for k, v in fields.items() if v is not None})

    def _record_refusal_summary(self, summary: dict[str, Any]) -> None:
        if self.trail is not None:
            self.trail.append("refused", principal_kind="none", outcome="refused", reason=summary["reason"],
                              client=summary["client"], suppressed=summary["suppressed"],
                              window_s=self.refusals.window_s)

    def question(self, question: str) -> dict[str, str]:
        """A question's fields in a record (its hash, its text, or nothing: the ``audit_questions`` setting)."""
        return question_fields(question, self.question_mode)

    def record_answer(self, context: RequestContext, route: str, index: str, question: str,
                      result: AnswerResult | None, error: RagError | None, started: float) -> None:
        fields: dict[str, Any] = {"route": route, "index": index, **self.question(question),
                                  "latency_ms": round((time.perf_counter() - started) * 1000, 1)}
        if result is not None:
            fields.update(outcome="abstained" if result.abstained else "answered", model=result.model,
                          retrieved=[{"chunk_id": s.chunk_id, "document_id": s.document_id, "score": s.score}
                                     for s in result.sources],
                          cited=[{"number": s.number, "chunk_id": s.chunk_id, "document_id": s.document_id,
                                  "path": s.path} for s in result.sources if s.number in result.citations],
                          prompt_tokens=result.metrics.prompt_tokens, output_tokens=result.metrics.output_tokens,
                          abstain_reason=result.abstain_reason)
        else:
            fields.update(outcome="error", error=error.error_type if error is not None else "client_left")
        self.record(context, "answer", **fields)

    def close(self) -> None:
        if self.trail is not None:
            for summary in self.refusals.flush():
                self._record_refusal_summary(summary)
            self.trail.close()
