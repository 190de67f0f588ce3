"""A message given over HTTP (`POST /v1/messages`), made into what the accept takes.

Either raw, with its envelope, as KumoMTA's inject API takes it:
    {"envelope_sender": "app@example.org", "recipients": ["a@example.com"], "content": "From: ...\r\n..."}
or structured, built into MIME by the stdlib email package:
    {"from": "Shop <app@example.org>", "to": ["a@example.com"], "cc": [...], "bcc": [...],
     "subject": "...", "text": "...", "html": "...", "headers": {"X-Campaign": "7"},
     "attachments": [{"filename": "a.pdf", "content_type": "application/pdf", "content": "<base64>"}]}
Both may name a "tenant" (else [submission] default_tenant). The content's line
endings become CRLF; the Idempotency-Key request header becomes the message's
when it has none of its own.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import email.utils
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP, SMTPUTF8
from typing import Any

from mtad.base import envelope, errors, headers
from mtad.base.smtp_data import CRLF, MAX_LINE


class Invalid(ValueError):
    """What is wrong with the request, for its 422 answer."""


@dataclass(frozen=True, slots=True)
class Injected:
    tenant: str | None  # None: the default tenant
    sender: str  # the envelope sender; "": the null sender
    recipients: tuple[str, ...]  # as given: the accept checks each
    content: bytes
    smtputf8: bool


_STRUCTURED_FIELDS = frozenset({"from", "to", "cc", "bcc", "subject", "text", "html", "headers", "attachments",
                                "tenant", "envelope_sender", "reply_to"})  # fmt: skip
_RAW_FIELDS = frozenset({"envelope_sender", "recipients", "content", "tenant"})
# Fields the structured form sets itself; given again in "headers" they would be ambiguous.
_OWN_HEADERS = frozenset({"from", "to", "cc", "bcc", "subject", "reply-to", "content-type", "mime-version",
                          "content-transfer-encoding"})  # fmt: skip


def parse(body: Any, idempotency_key: str | None = None) -> Injected:
    """The request body (decoded JSON) as a message to accept; Invalid says why not."""
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    if "content" in body:
        injected = _raw(body)
    elif "from" in body:
        injected = _structured(body)
    else:
        raise Invalid('give either "content" (with "envelope_sender" and "recipients") or a structured message '
                      '("from", "to", "subject", "text" or "html", ...)')  # fmt: skip
    if idempotency_key is not None:
        key = idempotency_key.strip()
        if not key or len(key) > 200 or not key.isprintable() or not key.isascii():
            raise Invalid("Idempotency-Key: 1-200 printable ASCII characters")
        block = injected.content.split(b"\r\n\r\n", 1)[0] + b"\r\n"
        if not headers.find(block, (b"idempotency-key",)):
            keyed = f"Idempotency-Key: {key}\r\n".encode() + injected.content
            injected = dataclasses.replace(injected, content=keyed)
    return injected


def _raw(body: Mapping[str, Any]) -> Injected:
    _known(body, _RAW_FIELDS)
    sender = _text(body, "envelope_sender", required=True)
    recipients = tuple(_address(given) for given in _addresses(body, "recipients", required=True))
    content = _text(body, "content", required=True)
    raw = content.encode("utf-8")
    if not raw.strip():
        raise Invalid("content: empty")
    lines = raw.splitlines()  # at CRLF, LF or CR: each becomes CRLF
    if max(map(len, lines), default=0) > MAX_LINE - len(CRLF):
        raise Invalid("content: a line longer than 998 octets (RFC 5322 2.1.1); encode the body")
    raw = CRLF.join(lines) + CRLF
    smtputf8 = not (sender.isascii() and all(r.isascii() for r in recipients))
    return Injected(_tenant(body), sender, recipients, raw, smtputf8)


def _structured(body: Mapping[str, Any]) -> Injected:
    _known(body, _STRUCTURED_FIELDS)
    author = _text(body, "from", required=True)
    to, cc, bcc = (_addresses(body, name) for name in ("to", "cc", "bcc"))
    if not (to or cc or bcc):
        raise Invalid('give at least one recipient in "to", "cc" or "bcc"')
    named = email.utils.parseaddr(author)[1]
    if not named or "@" not in named:
        raise Invalid(f"from: {author!r} is not an address")
    sender = _text(body, "envelope_sender") if "envelope_sender" in body else named
    recipients = tuple(_address(given) for given in (*to, *cc, *bcc))
    everyone = (author, sender, *to, *cc)
    smtputf8 = not all(a.isascii() for a in everyone)
    message = EmailMessage(policy=SMTPUTF8 if smtputf8 else SMTP)
    message["From"] = author
    if to:
        message["To"] = ", ".join(to)
    if cc:
        message["Cc"] = ", ".join(cc)
    if "reply_to" in body:
        message["Reply-To"] = _text(body, "reply_to")
    message["Subject"] = _text(body, "subject")
    extra = body.get("headers", {})
    if not isinstance(extra, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in extra.items()):
        raise Invalid('headers: expected an object of names and values, e.g. {"X-Campaign": "7"}')
    for name, value in extra.items():
        if name.lower() in _OWN_HEADERS or not name or not all(33 <= ord(c) <= 126 and c != ":" for c in name):
            raise Invalid(f"headers: {name!r} cannot be given here (a field name of its own, or set by the message)")
        if "\r" in value or "\n" in value:
            raise Invalid(f"headers: the value of {name} holds a line break")
        message[name] = value
    text, html = body.get("text"), body.get("html")
    if text is None and html is None:
        raise Invalid('give "text", "html" or both')
    if text is not None:
        message.set_content(_text(body, "text"))
    if html is not None:
        if text is None:
            message.set_content(_text(body, "html"), subtype="html")
        else:
            message.add_alternative(_text(body, "html"), subtype="html")
    for n, attachment in enumerate(body.get("attachments") or []):
        _attach(message, attachment, n)
    return Injected(_tenant(body), sender, recipients, bytes(message), smtputf8)


def _attach(message: EmailMessage, attachment: Any, n: int) -> None:
    where = f"attachments[{n}]"
    if not isinstance(attachment, dict):
        raise Invalid(f'{where}: expected {{"filename", "content_type", "content" (base64)}}')
    filename = _text(attachment, "filename", required=True, where=where)
    kind = _text(attachment, "content_type", where=where) or "application/octet-stream"
    main, _, sub = kind.partition("/")
    if not main or not sub:
        raise Invalid(f"{where}.content_type: {kind!r} is not a type/subtype")
    try:
        data = base64.b64decode(_text(attachment, "content", required=True, where=where), validate=True)
    except (binascii.Error, ValueError):
        raise Invalid(f"{where}.content: not base64") from None
    message.add_attachment(data, maintype=main, subtype=sub, filename=filename)


def _known(body: Mapping[str, Any], fields: frozenset[str]) -> None:
    unknown = sorted(set(body) - fields)
    if unknown:
        raise Invalid(f"unknown fields: {', '.join(unknown)} (known: {', '.join(sorted(fields))})")


def _tenant(body: Mapping[str, Any]) -> str | None:
    if "tenant" not in body:
        return None
    from mtad.spool import tenants

    try:
        return tenants.check_name(_text(body, "tenant", required=True))
    except errors.MtadError as exc:
        raise Invalid(f"tenant: {exc}") from None


def _text(body: Mapping[str, Any], name: str, *, required: bool = False, where: str = "") -> str:
    value = body.get(name, "")
    label = f"{where}.{name}" if where else name
    if not isinstance(value, str):
        raise Invalid(f"{label}: expected a string")
    if required and name not in body:
        raise Invalid(f"{label}: required")
    return value


def _address(given: str) -> str:
    """The address of "Name <address>", or the address given alone."""
    return email.utils.parseaddr(given)[1] if "<" in given else given.strip()


def _addresses(body: Mapping[str, Any], name: str, *, required: bool = False) -> tuple[str, ...]:
    """The addresses of a field as given (display names kept), each checked."""
    value = body.get(name, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise Invalid(f"{name}: expected a list of addresses")
    if required and not value:
        raise Invalid(f"{name}: at least one address")
    for given in value:
        try:
            envelope.parse_mailbox(_address(given), smtputf8=True)
        except errors.AddressError as exc:
            raise Invalid(f"{name}: {given!r}: {exc.text}") from None
    return tuple(value)
