"""API keys: their record, their secret (shown once, kept only as a salted scrypt hash) and the principal they
stand for. Pure functions; the table that holds the records is ``rag.store.keys``.

A key reads ``rag_<id>_<secret>``: the public id finds the record without scanning, the secret is checked
against the record's ``scrypt(secret, salt)`` with a constant-time comparison.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Iterable

from rag.core.access import ALL_GROUPS, ALL_INDEXES, PUBLIC_ONLY, ROLES, Principal, held_groups
from rag.core.errors import BadRequestError
from rag.core.names import access_groups, validate_index_name

KEY_PREFIX = "rag_"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1  # 16 MiB, ~40 ms per check (checked keys are cached per process)
KEY_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


@dataclass(frozen=True)
class ApiKey:
    """One stored key (never its secret)."""

    name: str
    key_id: str
    salt: bytes
    digest: bytes
    roles: tuple[tuple[str, str], ...]
    groups: frozenset[str] = PUBLIC_ONLY  # document groups it sees besides public ones; {"*"}: every document
    created: float = 0.0
    expires: float | None = None
    revoked: float | None = None

    def active(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return self.revoked is None and (self.expires is None or now < self.expires)

    def state(self, now: float | None = None) -> str:
        if self.revoked is not None:
            return "revoked"
        return "active" if self.active(now) else "expired"

    def principal(self) -> Principal:
        return Principal(self.name, self.roles, self.groups, kind="key")


def hash_secret(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)


def new_key(name: str, roles: tuple[tuple[str, str], ...], groups: frozenset[str] = PUBLIC_ONLY,
            expires: float | None = None, now: float | None = None) -> tuple[ApiKey, str]:
    """A new key record and its token (the only time the secret exists in clear). Without ``groups`` it sees
    public documents only; ``{"*"}`` is every document."""
    validate_key_name(name)
    groups = validate_key_groups(groups)
    key_id, secret, salt = secrets.token_hex(6), secrets.token_urlsafe(32), secrets.token_bytes(16)
    record = ApiKey(name=name, key_id=key_id, salt=salt, digest=hash_secret(secret, salt), roles=roles,
                    groups=groups, created=time.time() if now is None else now, expires=expires)
    return record, f"{KEY_PREFIX}{key_id}_{secret}"


def split_token(token: str) -> tuple[str, str] | None:
    """``(key id, secret)`` of a token that looks like one of ours, else None."""
    if not token.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = token[len(KEY_PREFIX):].partition("_")
    return (key_id, secret) if sep and key_id and secret else None


def secret_matches(record: ApiKey, secret: str) -> bool:
    return hmac.compare_digest(hash_secret(secret, record.salt), record.digest)


def validate_key_name(name: str) -> str:
    if not KEY_NAME_PATTERN.match(name):
        raise BadRequestError(f"a key name is 1-64 letters, digits, '.', '_', '@' or '-' (starting with a letter "
                              f"or digit), not {name!r}")
    return name


def parse_grants(role: str, indexes: tuple[str, ...] | list[str]) -> tuple[tuple[str, str], ...]:
    """``role`` on each of ``indexes`` (``*`` = every index)."""
    if role not in ROLES:
        raise BadRequestError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    names = tuple(indexes) or (ALL_INDEXES,)
    return tuple((name if name == ALL_INDEXES else validate_index_name(name), role) for name in names)


def parse_grant(text: str) -> tuple[str, str]:
    """``"hr=reader"`` → ``("hr", "reader")`` (a role alone is a role on every index)."""
    index, sep, role = text.partition("=")
    if not sep:
        index, role = ALL_INDEXES, text
    return parse_grants(role.strip(), [index.strip()])[0]


def parse_groups(text: str | None) -> frozenset[str]:
    """``"a,b"`` → ``{"a", "b"}``; ``"*"`` → every document; None (or empty) → none: public documents only."""
    return validate_key_groups(g.strip() for g in (text or "").split(",") if g.strip())


def validate_key_groups(groups: Iterable[str]) -> frozenset[str]:
    """A key's document groups, checked as document groups are (``*``: every document)."""
    names = held_groups(g.strip() for g in groups if g.strip())
    if ALL_GROUPS not in names:
        access_groups(names)  # raises on a name no document group may have
    return names
