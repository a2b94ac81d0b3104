"""E-mail (.eml, stdlib ``email``): headers, the plain (else HTML) body, and the attachments.

The mail is one document: a first section with From / To / Cc / Date / Subject, then the body. Each
attachment comes back in ``LoadedDocument.attachments`` (name + bytes); the ingest pipeline stores it
as a document of its own, read by the loader for its type, at ``<mail path>#<name>`` and titled
"attachment NAME of SUBJECT". Inline images (parts with a Content-ID, e.g. logos) are not attachments.
"""

from __future__ import annotations

import email
import email.policy
import mimetypes
import re
from dataclasses import replace
from email.message import EmailMessage
from pathlib import Path

from ingest.formats.base import Attachment, HtmlText, LoadedDocument, clean_plain, finish
from ingest.formats.options import LoadContext, TooLarge

MAX_ATTACHMENTS = 100
_UNSAFE_NAME_RE = re.compile(r"[\\/\x00-\x1f#]+")


def load_eml(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    message = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    subject = _header(message, "Subject")
    headers = [f"{name}: {value}" for name in ("From", "To", "Cc", "Date", "Subject")
               if (value := _header(message, name))]
    parts: list[tuple[int | None, str | None, str]] = [(None, None, "\n".join(headers))]
    body = message.get_body(preferencelist=("plain", "html"))
    if body is not None:
        parts.append((None, None, _body_text(body)))
    attachments = _attachments(message, ctx)
    doc = finish(path, "eml", parts, pages=None, title=subject or None)
    if attachments:
        doc = replace(doc, attachments=tuple(attachments))
    return doc


def attachment_title(name: str, mail_title: str) -> str:
    return f"attachment {name} of {mail_title}"


def _header(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name)
    except Exception:  # a header the policy cannot parse: left out rather than failing the mail
        return ""
    return " ".join(str(value).split()) if value is not None else ""


def _body_text(part: EmailMessage) -> str:
    try:
        content = part.get_content()
    except (LookupError, ValueError):  # unknown charset: decode leniently
        payload = part.get_payload(decode=True) or b""
        content = payload.decode("utf-8", errors="replace")
    if not isinstance(content, str):
        return ""
    if part.get_content_subtype() == "html":
        parser = HtmlText()
        parser.feed(content)
        parser.close()
        return "\n\n".join(p for _, paragraphs in parser.sections for p in paragraphs)
    return clean_plain(content)


def _attachments(message: EmailMessage, ctx: LoadContext) -> list[Attachment]:
    found: list[Attachment] = []
    used: set[str] = set()
    for index, part in enumerate(message.iter_attachments(), 1):
        ctx.check_time()
        disposition = part.get_content_disposition()
        if disposition != "attachment" and part.get("Content-ID") and part.get_content_maintype() == "image":
            continue  # an inline picture of the HTML body
        if part.get_content_type() == "message/rfc822":
            inner = part.get_payload()
            inner = inner[0] if isinstance(inner, list) and inner else inner
            data = inner.as_bytes() if hasattr(inner, "as_bytes") else b""
            default_ext = ".eml"
        else:
            data = part.get_payload(decode=True) or b""
            default_ext = mimetypes.guess_extension(part.get_content_type()) or ".bin"
        name = _safe_name(part.get_filename() or "", f"attachment-{index}{default_ext}")
        stem, dot, ext = name.rpartition(".")
        candidate, n = name, 2
        while candidate in used:
            candidate = f"{stem}-{n}{dot}{ext}" if dot else f"{name}-{n}"
            n += 1
        used.add(candidate)
        found.append(Attachment(candidate, data))
        if len(found) > MAX_ATTACHMENTS:
            raise TooLarge(f"too large: more than {MAX_ATTACHMENTS} attachments")
    return found


def _safe_name(name: str, fallback: str) -> str:
    cleaned = _UNSAFE_NAME_RE.sub("_", " ".join(name.split())).strip(" ._")[:120]
    return cleaned or fallback
