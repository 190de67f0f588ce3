"""A message given over HTTP (`POST /v1/messages`), made into what the accept takes.

Either raw, with its envelope, as KumoMTA's inject API takes it:
    {"envelope_sender": "app@example.org", "recipients": ["a@example.com"], "content": "From: ...\r\n..."}
or structured, built into MIME by the stdlib email package:
    {"from": "Shop <app@example.org>", "to": ["a@example.com"], "cc": [...], "bcc": [...],
     "subject": "...", "text": "...", "html": "...", "headers": {"X-Campaign": "7"},
     "attachments": [{"filename": "a.pdf", "content_type": "application/pdf", "content": "<base64>"}]}
Both may name a "tenant" (else [submission] default_tenant) and a "campaign" (the
tenant's, made on first use: X-Mtad-Campaign, a bad name a 400). The content's line
endings become CRLF; the Idempotency-Key request header becomes the message's
when it has none of its own.

Every address is read by one strict parser (mtad.base.envelope.parse_named, on the
checks MAIL and RCPT make): `a@example.com`, `<a@example.com>` or
`Name <a@example.com>`; an ambiguous one ("x@evil.test <a@example.com>") is refused,
never guessed at. The envelope sender is read as MAIL FROM's path ("" or "<>": the
null sender). The structured form's header fields are written from what was parsed;
a value that would hold a line break is refused. Each refusal names its field.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.headerregistry import Address as HeaderAddress
from email.message import EmailMessage
from email.policy import SMTP, SMTPUTF8
from typing import Any

from mtad.base import envelope, errors, headers
from mtad.base.envelope import Address
from mtad.base.smtp_data import CRLF, MAX_LINE


class Invalid(ValueError):
    """What is wrong with the request, for its 422 answer; `field` names the field
    ("to[1]", "attachments[0].filename"), when one is at fault."""

    def __init__(self, why: str, field: str | None = None) -> None:
        super().__init__(why)
        self.field = field


Named = tuple[str, Address]  # a name ("": none) and its mailbox
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+")


@dataclass(frozen=True, slots=True)
class Injected:
    tenant: str | None  # None: the default tenant
    sender: str  # the envelope sender; "": the null sender
    recipients: tuple[str, ...]  # as given: the accept checks each
    content: bytes
    smtputf8: bool


_STRUCTURED_FIELDS = frozenset({"from", "to", "cc", "bcc", "subject", "text", "html", "headers", "attachments",
                                "tenant", "envelope_sender", "reply_to", "campaign"})  # fmt: skip
_RAW_FIELDS = frozenset({"envelope_sender", "recipients", "content", "tenant", "campaign"})
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
    if "campaign" in body:
        injected = _campaign(injected, body["campaign"])
    if idempotency_key is not None:
        key = idempotency_key.strip()
        if not key or len(key) > 200 or not key.isprintable() or not key.isascii():
            raise Invalid("Idempotency-Key: 1-200 printable ASCII characters")
        block = injected.content.split(b"\r\n\r\n", 1)[0] + b"\r\n"
        if not headers.find(block, (b"idempotency-key",)):
            keyed = f"Idempotency-Key: {key}\r\n".encode() + injected.content
            injected = dataclasses.replace(injected, content=keyed)
    return injected


def _campaign(injected: Injected, name: Any) -> Injected:
    """The message with its campaign as X-Mtad-Campaign (in place of any it gave)."""
    from mtad.admin import campaigns_api

    name = campaigns_api.name_of(name, "campaign")
    end = headers.header_end(injected.content)
    block, _ = headers.remove(injected.content[:end], (b"x-mtad-campaign",))
    named = f"X-Mtad-Campaign: {name}\r\n".encode() + block + injected.content[end:]
    return dataclasses.replace(injected, content=named)


def _raw(body: Mapping[str, Any]) -> Injected:
    _known(body, _RAW_FIELDS)
    sender = _sender(_text(body, "envelope_sender", required=True))
    recipients = tuple(str(mailbox) for _, mailbox in _addresses(body, "recipients", required=True))
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
    author = _named(_text(body, "from", required=True), "from")
    to, cc, bcc = (_addresses(body, name) for name in ("to", "cc", "bcc"))
    if not (to or cc or bcc):
        raise Invalid('give at least one recipient in "to", "cc" or "bcc"')
    reply_to = _addresses(body, "reply_to")
    sender = _sender(_text(body, "envelope_sender")) if "envelope_sender" in body else str(author[1])
    recipients = tuple(str(mailbox) for _, mailbox in (*to, *cc, *bcc))
    # Names are encoded (RFC 2047) as needed: only a mailbox's non-ASCII local part needs SMTPUTF8.
    smtputf8 = not (sender.isascii() and all(m.local.isascii() for _, m in (author, *to, *cc, *reply_to)))
    message = EmailMessage(policy=SMTPUTF8 if smtputf8 else SMTP)
    message["From"] = _header_addresses([author])
    if to:
        message["To"] = _header_addresses(to)
    if cc:
        message["Cc"] = _header_addresses(cc)
    if reply_to:
        message["Reply-To"] = _header_addresses(reply_to)
    message["Subject"] = _header_text(body, "subject")
    extra = body.get("headers", {})
    if not isinstance(extra, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in extra.items()):
        raise Invalid('headers: expected an object of names and values, e.g. {"X-Campaign": "7"}', "headers")
    for name, value in extra.items():
        if name.lower() in _OWN_HEADERS or not name or not all(33 <= ord(c) <= 126 and c != ":" for c in name):
            raise Invalid(f"headers: {name!r} cannot be given here (a field name of its own, or set by the message)",
                          "headers")  # fmt: skip
        if not _one_line(value):
            raise Invalid(f"headers: the value of {name} holds a line break or a control character", "headers")
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
        raise Invalid(f'{where}: expected {{"filename", "content_type", "content" (base64)}}', where)
    filename = _header_text(attachment, "filename", required=True, where=where)
    kind = _text(attachment, "content_type", where=where) or "application/octet-stream"
    if not _MEDIA_TYPE.fullmatch(kind):
        raise Invalid(f"{where}.content_type: {kind!r} is not a type/subtype", f"{where}.content_type")
    main, _, sub = kind.partition("/")
    try:
        data = base64.b64decode(_text(attachment, "content", required=True, where=where), validate=True)
    except (binascii.Error, ValueError):
        raise Invalid(f"{where}.content: not base64", f"{where}.content") from None
    message.add_attachment(data, maintype=main, subtype=sub, filename=filename)


def _known(body: Mapping[str, Any], fields: frozenset[str]) -> None:
    unknown = sorted(set(body) - fields)
    if unknown:
        raise Invalid(f"unknown fields: {', '.join(unknown)} (known: {', '.join(sorted(fields))})", unknown[0])


def _tenant(body: Mapping[str, Any]) -> str | None:
    if "tenant" not in body:
        return None
    from mtad.spool import tenants

    try:
        return tenants.check_name(_text(body, "tenant", required=True))
    except errors.MtadError as exc:
        raise Invalid(f"tenant: {exc}", "tenant") from None


def _text(body: Mapping[str, Any], name: str, *, required: bool = False, where: str = "") -> str:
    value = body.get(name, "")
    label = f"{where}.{name}" if where else name
    if not isinstance(value, str):
        raise Invalid(f"{label}: expected a string", label)
    if required and name not in body:
        raise Invalid(f"{label}: required", label)
    return value


def _one_line(value: str) -> bool:
    """Whether a header field's value holds no line break and no other control
    character (a tab aside)."""
    return value.replace("\t", " ").isprintable()


def _header_text(body: Mapping[str, Any], name: str, *, required: bool = False, where: str = "") -> str:
    """A text that goes into a header field (a subject, a file name): one line."""
    value = _text(body, name, required=required, where=where)
    if not _one_line(value):
        label = f"{where}.{name}" if where else name
        raise Invalid(f"{label}: holds a line break or a control character", label)
    return value


def _named(given: str, label: str) -> Named:
    """An address as given ("Name <a@example.com>"), read by the one strict parser."""
    try:
        return envelope.parse_named(given, smtputf8=True)
    except errors.AddressError as exc:
        raise Invalid(f"{label}: {given!r}: {exc.text}", label) from None


def _addresses(body: Mapping[str, Any], name: str, *, required: bool = False) -> tuple[Named, ...]:
    """The addresses of a field (a list, or one string), each read by `_named`."""
    value = body.get(name, [])
    if isinstance(value, str):
        return (_named(value, name),)
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise Invalid(f"{name}: expected a list of addresses", name)
    if required and not value:
        raise Invalid(f"{name}: at least one address", name)
    return tuple(_named(given, f"{name}[{n}]") for n, given in enumerate(value))


def _sender(given: str) -> str:
    """The envelope sender, read as MAIL FROM's path is: "" or "<>" for the null sender,
    else one mailbox, bare or in angle brackets, with nothing after it."""
    if not given.isprintable():
        raise Invalid(f"envelope_sender: {given!r} holds a control character (a line break?)", "envelope_sender")
    if given.strip() in ("", "<>"):
        return ""
    parsed = envelope.parse_path(given)
    if parsed is None or not parsed[0] or parsed[1]:
        raise Invalid(f"envelope_sender: {given!r} is not an address (give local-part@domain, or \"\" for the "
                      "null sender)", "envelope_sender")  # fmt: skip
    try:
        return str(envelope.parse_mailbox(parsed[0], smtputf8=True))
    except errors.AddressError as exc:
        raise Invalid(f"envelope_sender: {exc.text}", "envelope_sender") from None


def _header_addresses(named: Sequence[Named]) -> list[HeaderAddress]:
    """The addresses as the email package writes them into a field, quoting and
    encoding each name as it needs: from what was parsed, never parsed again."""
    return [HeaderAddress(display_name=name, username=_unquoted(mailbox.local), domain=mailbox.domain)
            for name, mailbox in named]  # fmt: skip


def _unquoted(local: str) -> str:
    """A local part as its characters (`"john doe"` is `john doe`): the email package quotes it again."""
    return re.sub(r"\\(.)", r"\1", local[1:-1]) if local.startswith('"') else local
