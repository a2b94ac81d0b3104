"""Who is asking: a request's bearer token (``RAG_API_KEY``, a key from ``rag keys create``, or a signed JWT)
becomes a ``Principal``; the services check its role on the index a route touches
(``app.services.documents.Documents.authorized``). The middleware in
``api.app`` builds the one ``RequestContext`` per request; routes receive it as the dependency ``context``.

Refusals say as little as possible: a token that is unknown, expired, revoked or badly signed is the same 401;
a role missing on an index is the same 403 whether or not the index exists.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from threading import Lock

from litestar import Request
from litestar.di import NamedDependency

from api.tokens import TokenVerifier
from rag.store.keys import KeyStore
from rag.core.access import ALL_INDEXES, EVERY_DOCUMENT, LOCAL_ADMIN, PUBLIC_ONLY, Principal, RequestContext
from rag.core.errors import RagError
from rag.core.keys import ApiKey, secret_matches, split_token
from rag.core.settings import Settings

log = logging.getLogger("rag.access")
CONTEXT_SCOPE_KEY = "rag.context"
ENV_KEY_PRINCIPAL = "api-key"  # the name RAG_API_KEY's principal is recorded under
ANONYMOUS = Principal("anonymous", roles=(), groups=PUBLIC_ONLY, kind="anonymous")  # open pages: public documents
ENV_KEY = Principal(ENV_KEY_PRINCIPAL, ((ALL_INDEXES, "admin"),), EVERY_DOCUMENT, kind="env")  # the operator's key
VERIFIED_CACHE_SIZE = 1024
Context = NamedDependency[RequestContext]  # a route's parameter ``context: Context``: the request's one context


@dataclass
class Authenticator:
    """Turns a bearer token into a principal. Keys are looked up on every request (a revocation applies at
    once, on every replica); only the scrypt check of a secret already verified is cached, by the token's
    sha256 and the stored hash it matched."""

    keys: KeyStore
    api_key: str | None = None
    tokens: TokenVerifier | None = None
    _verified: OrderedDict[bytes, bytes] = field(default_factory=OrderedDict)
    _lock: Lock = field(default_factory=Lock)
    _required: bool = False  # latched: once authentication was required, this process never serves without

    @classmethod
    def from_settings(cls, settings: Settings, keys: KeyStore) -> "Authenticator":
        auth = cls(keys=keys, api_key=settings.api_key or None, tokens=TokenVerifier.from_settings(settings))
        try:
            auth.required()  # latched at start when keys exist
        except RagError as exc:  # the key store cannot be read now: every request is a 503 until it can
            log.warning("the key store cannot be read at start: %s", exc.message)
        return auth

    def required(self) -> bool:
        """Whether requests need a token: a key is configured, a key was ever created, or tokens are on — and,
        once that was so, for the rest of the process (a key store restored, reset or gone missing never
        opens the server). A key store that cannot be read raises StoreUnavailableError: a 503, never open."""
        if not self._required:
            self._required = bool(self.api_key) or self.tokens is not None or self.keys.any()
        return self._required

    def principal(self, token: str) -> Principal | None:
        """The principal of ``token`` (None: unknown, expired, revoked or invalid — the caller says 401);
        LOCAL_ADMIN when no authentication is configured at all."""
        if not self.required():
            return LOCAL_ADMIN
        if not token:
            return None
        if self.api_key and hmac.compare_digest(token.encode(), self.api_key.encode()):
            return ENV_KEY
        parts = split_token(token)
        if parts is not None:
            record = self.keys.by_id(parts[0])
            if record is None or not record.active() or not self._secret_ok(record, token, parts[1]):
                return None
            return record.principal()
        if self.tokens is not None:
            return self.tokens.principal(token)
        return None

    def _secret_ok(self, record: ApiKey, token: str, secret: str) -> bool:
        token_hash = hashlib.sha256(token.encode()).digest()
        with self._lock:
            cached = self._verified.get(token_hash)
        if cached is not None and hmac.compare_digest(cached, record.digest):
            return True
        if not secret_matches(record, secret):
            return False
        with self._lock:
            self._verified[token_hash] = record.digest
            while len(self._verified) > VERIFIED_CACHE_SIZE:
                self._verified.popitem(last=False)
        return True


def request_context(request: Request) -> RequestContext:
    """The Litestar dependency ``context``: the request's one context, made by the middleware."""
    return request.scope.get(CONTEXT_SCOPE_KEY) or RequestContext(ANONYMOUS)  # type: ignore[return-value]
