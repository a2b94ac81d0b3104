"""Single sign-on without a network call: signed JWT bearer tokens (OIDC access tokens) checked with PyJWT
against a JWKS file (or a JWKS URL on the site network), with issuer, audience and expiry checks. The token's
groups claim maps to roles and document groups through the ``jwt_groups`` table in ``rag.toml``::

    jwt_jwks = "/etc/rag/jwks.json"
    jwt_issuer = "https://sso.example.com/realms/acme"
    jwt_audience = "rag"
    [jwt_groups.hr-staff]
    roles = ["hr=reader"]          # index=role; a role alone is that role on every index
    groups = ["hr"]                # document groups the token may see ("*": every document; none: public only)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from rag.core.access import PUBLIC_ONLY, Principal, held_groups
from rag.core.errors import ConfigError, RagError
from rag.core.keys import parse_grant, validate_key_groups
from rag.core.settings import Settings

log = logging.getLogger("rag.access")
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]


@dataclass(frozen=True)
class GroupGrant:
    roles: tuple[tuple[str, str], ...]
    groups: frozenset[str]  # document groups besides public ones; {"*"}: every document


def parse_group_table(table: dict[str, Any] | None) -> dict[str, GroupGrant]:
    grants: dict[str, GroupGrant] = {}
    for name, entry in (table or {}).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("roles", []), list):
            raise ConfigError(f"jwt_groups.{name} must be a table with roles = [\"index=role\", ...] and "
                              "optionally groups = [...]")
        try:
            roles = tuple(parse_grant(str(text)) for text in entry.get("roles", []))
        except RagError as exc:
            raise ConfigError(f"jwt_groups.{name}: {exc.message}") from exc
        groups = entry.get("groups")
        if groups is not None and not isinstance(groups, list):
            raise ConfigError(f"jwt_groups.{name}.groups must be a list of document groups (\"*\": every document)")
        try:
            held = validate_key_groups(map(str, groups or ()))
        except RagError as exc:
            raise ConfigError(f"jwt_groups.{name}: {exc.message}") from exc
        if groups is None and roles:
            log.warning("jwt_groups.%s gives roles but no document groups: its tokens see public documents only "
                        "(groups = [\"*\"] for every document)", name)
        grants[str(name)] = GroupGrant(roles, held)
    return grants


@dataclass
class TokenVerifier:
    keys: Any  # jwt.PyJWKSet (a file) or jwt.PyJWKClient (a URL)
    issuer: str | None
    audience: str | None
    groups_claim: str
    grants: dict[str, GroupGrant]

    @classmethod
    def from_settings(cls, settings: Settings) -> "TokenVerifier | None":
        if not settings.jwt_jwks:
            return None
        source = settings.jwt_jwks
        if not (settings.jwt_issuer and settings.jwt_audience):
            if not settings.jwt_skip_iss_aud:
                raise ConfigError("jwt_jwks needs jwt_issuer and jwt_audience: without them a token the identity "
                                  "provider made for any other application would be accepted here (set "
                                  "jwt_skip_iss_aud = true only if that is really meant)")
            log.warning("SECURITY: jwt_skip_iss_aud is set: tokens are accepted without checking %s — "
                        "a token the identity provider made for any other application gets in",
                        " and ".join(n for n, v in (("the issuer", settings.jwt_issuer),
                                                    ("the audience", settings.jwt_audience)) if not v))
        if source.startswith("http://"):
            raise ConfigError(f"jwt_jwks must be an https:// URL (or a file): the signing keys of {source} could be "
                              "replaced on the way, and any token with them accepted")
        if source.startswith("https://"):
            keys: Any = jwt.PyJWKClient(source, cache_keys=True, lifespan=300, timeout=10)
        else:
            try:
                keys = jwt.PyJWKSet.from_dict(json.loads(Path(source).expanduser().read_text(encoding="utf-8")))
            except (OSError, ValueError, jwt.PyJWTError) as exc:
                raise ConfigError(f"jwt_jwks: cannot read a JWKS from {source}: {exc}") from exc
        return cls(keys, settings.jwt_issuer, settings.jwt_audience, settings.jwt_groups_claim,
                   parse_group_table(settings.jwt_groups))

    def _signing_key(self, token: str) -> Any:
        if isinstance(self.keys, jwt.PyJWKClient):
            return self.keys.get_signing_key_from_jwt(token).key
        kid = jwt.get_unverified_header(token).get("kid")
        candidates = [k for k in self.keys.keys if kid is None or k.key_id == kid]
        if not candidates:
            raise jwt.InvalidKeyError("no key in the JWKS matches the token's kid")
        return candidates[0].key

    def principal(self, token: str) -> Principal | None:
        """The token's principal, or None when it is not valid (signature, issuer, audience, expiry)."""
        try:
            claims = jwt.decode(token, self._signing_key(token), algorithms=ALGORITHMS, issuer=self.issuer,
                                audience=self.audience, options={"require": ["exp", "sub"],
                                                                 "verify_aud": self.audience is not None})
        except (jwt.PyJWTError, ValueError):
            return None
        claimed = claims.get(self.groups_claim) or []
        claimed = [claimed] if isinstance(claimed, str) else [str(g) for g in claimed if isinstance(g, (str, int))]
        roles: list[tuple[str, str]] = []
        groups: set[str] = set(PUBLIC_ONLY)
        for group in claimed:
            grant = self.grants.get(group)
            if grant is None:
                continue
            roles.extend(grant.roles)
            groups |= grant.groups
        name = str(claims.get("preferred_username") or claims["sub"])
        return Principal(name, tuple(roles), held_groups(groups), kind="jwt")
