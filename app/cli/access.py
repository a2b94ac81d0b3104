"""``rag keys`` (API keys: create, list, revoke) and ``rag audit`` (verify, show)."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import Iterator

import click
from rich.table import Table

from app.cli.common import console, fail, handle_errors, json_option, literal, out, print_json
from rag.core.access import RequestContext, describe_groups
from rag.store.audit_files import KEYS_CHAIN, timestamp
from rag.core.durations import parse_duration
from rag.core.keys import new_key, parse_grants, parse_groups
from rag.core.settings import Settings
from app.runtime import open_audit, open_audit_trail, open_keys
from app.services import Auditor, Keys


def _when(seconds: float | None) -> str:
    return timestamp(seconds)[:19].replace("T", " ") if seconds else "never"


CLI = "cli"  # the audit records' route of what a command did


@contextmanager
def _keys(settings: Settings) -> Iterator[Keys]:
    """The keys service, its changes recorded in the trail's long-lived ``keys`` chain (files), or the store's
    one chain (PostgreSQL). The trail is opened first: a command whose change could not be audited (its key
    missing, its heads damaged) changes nothing."""
    audit = Auditor(open_audit(settings, chain=KEYS_CHAIN))
    try:
        keys = Keys(open_keys(settings), audit)
        try:
            yield keys
        finally:
            keys.close()
    finally:
        audit.close()


@click.group("keys")
def keys() -> None:
    """API keys: a name, a role per index, optional expiry and document groups (stored only as a hash)."""


@keys.command("create")
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(["reader", "editor", "admin"]),
              help="reader: ask, retrieve, list; editor: + upload, delete; admin: + keys, audit.")
@click.option("--index", "indexes", multiple=True, help="Index the role applies to (repeatable; default * = all).")
@click.option("--expires", help="Lifetime, e.g. 90d, 12h, 2w (default: never expires).")
@click.option("--groups", help="Document groups the key sees besides public documents, comma-separated; '*': "
                              "every document (default: public documents only).")
@json_option()
@click.pass_obj
@handle_errors
def keys_create(settings: Settings, name: str, role: str, indexes: tuple[str, ...], expires: str | None,
                groups: str | None, as_json: bool) -> None:
    """Create key NAME and print it (shown once: only its hash is kept)."""
    expiry = time.time() + parse_duration(expires) if expires else None
    record, token = new_key(name, parse_grants(role, indexes), parse_groups(groups), expiry)
    with _keys(settings) as service:
        service.create(RequestContext.local(), record, CLI)
    if as_json:
        print_json({"name": name, "key": token, "roles": [list(g) for g in record.roles],
                    "groups": sorted(record.groups), "sees": describe_groups(record.groups), "expires": expiry})
        return
    console.print(literal(f"key {name!r} created (documents: {describe_groups(record.groups)}); it is shown only "
                          "now, keep it somewhere safe:"))
    click.echo(token)


@keys.command("list")
@json_option()
@click.pass_obj
@handle_errors
def keys_list(settings: Settings, as_json: bool) -> None:
    """Keys by name, with roles, groups, expiry and state (never the key)."""
    keys = Keys(open_keys(settings), Auditor(None))  # reading: nothing to audit
    try:
        records = keys.visible(RequestContext.local())
    finally:
        keys.close()
    rows = [{"name": r.name, "roles": [f"{i}={role}" for i, role in r.roles], "groups": sorted(r.groups),
             "sees": describe_groups(r.groups), "created": _when(r.created), "expires": _when(r.expires),
             "state": r.state()} for r in records]
    if as_json:
        print_json(rows)
        return
    table = Table("name", "roles", "documents", "created", "expires", "state", title="API keys")
    for row in rows:
        table.add_row(*(literal(v) for v in (row["name"], ", ".join(row["roles"]), row["sees"],
                                              row["created"], row["expires"], row["state"])))
    out.print(table)


@keys.command("revoke")
@click.argument("name")
@click.pass_obj
@handle_errors
def keys_revoke(settings: Settings, name: str) -> None:
    """Revoke key NAME: refused from the next request on, on every server sharing the store."""
    with _keys(settings) as service:
        service.revoke(RequestContext.local(), name, CLI)
    console.print(literal(f"key {name!r} revoked"))


@click.group("audit")
def audit() -> None:
    """The audit trail (HMAC-chained JSON Lines under the audit_dir setting, or a table of the store_url one)."""


@audit.command("verify")
@click.pass_obj
@handle_errors
def audit_verify(settings: Settings) -> None:
    """Check every record's MAC (with the audit_key_file key), the chains and their heads: exit 1 naming each
    edited, deleted or moved record, chain gone or cut, and heads changed."""
    trail = open_audit_trail(settings)
    try:
        verified = trail.verify()
    finally:
        trail.close()
    checked, problems = verified
    for problem in problems:
        console.print(literal(str(problem)), soft_wrap=True)
    for note in getattr(verified, "notes", []):
        console.print(literal(f"note: {note}"), soft_wrap=True)
    if problems:
        fail(f"the audit trail was changed ({len(problems)} chain(s) broken); {checked} records check out", 1)
    console.print(literal(f"audit trail intact: {checked} records in {trail.location}"))


@audit.command("show")
@click.option("--since", help="Only records this recent, e.g. 1d, 12h.")
@click.option("--principal", help="Only this key or user.")
@click.option("--index", help="Only this index.")
@json_option("One JSON record per line.")
@click.pass_obj
@handle_errors
def audit_show(settings: Settings, since: str | None, principal: str | None, index: str | None,
               as_json: bool) -> None:
    """Records, oldest first."""
    since_ts = timestamp(time.time() - parse_duration(since)) if since else None
    trail = open_audit_trail(settings)
    try:
        records = trail.records(since_ts, principal, index)
    finally:
        trail.close()
    if as_json:
        for record in records:
            click.echo(json.dumps(record, ensure_ascii=False))
        return
    table = Table("time", "principal", "event", "route", "index", "outcome", title="audit trail")
    for r in records:
        table.add_row(*(literal(r.get(k, "")) for k in ("ts", "principal", "event", "route", "index", "outcome")))
    out.print(table)
