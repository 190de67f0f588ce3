"""Envelope addresses: parse the path of MAIL/RCPT and validate a mailbox; and
the one strict reading of an address as an application names one (`Name <mailbox>`,
HTTP injection's), built on the same two.

Parsing replaces aiosmtpd's use of the email package's header parser, which
costs ~60 us per address and was ~45 % of accept CPU; this is a string scan.
Domains are normalised to lower-case A-labels with IDNA 2008 + UTS 46 (the
`idna` package): the stdlib codec implements IDNA 2003, which maps "faß.de"
to the wrong domain. Sync, no I/O.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from mtad.base.errors import AddressError

MAX_LOCAL_OCTETS = 64  # RFC 5321 4.5.3.1.1
MAX_DOMAIN_OCTETS = 253  # RFC 1035, as an A-label without the root dot
MAX_PATH_OCTETS = 254  # RFC 5321 4.5.3.1.3 (256 with the angle brackets)

_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~\-"
_DOT_ATOM_ASCII = re.compile(rf"^[{_ATEXT}]+(?:\.[{_ATEXT}]+)*$")
_QUOTED_ASCII = re.compile(r'^"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"$')
_LDH_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Address:
    """A validated mailbox: local part as given, domain as a lower-case A-label."""

    local: str
    domain: str

    @property
    def needs_smtputf8(self) -> bool:
        return not self.local.isascii()

    def __str__(self) -> str:
        return f"{self.local}@{self.domain}"

    def __reduce__(self) -> tuple[type[Address], tuple[str, str]]:
        return Address, (self.local, self.domain)  # faster than dataclasses' pickling of a slotted class


def parse_path(arg: str) -> tuple[str, str] | None:
    """Split the argument of MAIL FROM:/RCPT TO: into (address, parameters).

    Accepts `<addr>`, `<>` (returns an empty address), a source route
    `<@a,@b:addr>` (the route is dropped, RFC 5321 4.1.2) and a bare `addr`.
    Returns None when the brackets or quotes do not balance, or when a source
    route leads to no mailbox (`<@a:>` is not the null path).
    """
    text = arg.strip()
    if not text:
        return "", ""
    if text[0] == "<":
        end = _closing(text, 1, ">")
        if end < 0:
            return None
        inner, rest = text[1:end], text[end + 1 :]
        if inner.startswith("@"):
            colon = _closing(inner, 0, ":")
            if colon < 0:
                return None
            inner = inner[colon + 1 :]
            if not inner:
                return None
        if _closing(inner, 0, "<") >= 0 or _closing(inner, 0, ">") >= 0:
            return None
        return inner, rest.strip()
    end = _closing(text, 0, " ")
    if end < 0:
        return text, ""
    return text[:end], text[end + 1 :].strip()


def _closing(text: str, start: int, char: str) -> int:
    """Index of the first `char` at or after start that is outside a quoted string."""
    if '"' not in text:
        return text.find(char, start)
    quoted = False
    i = start
    while i < len(text):
        c = text[i]
        if quoted and c == "\\":
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == char and not quoted:
            return i
        i += 1
    return -1


def parse_mailbox(address: str, *, smtputf8: bool = False) -> Address:
    """Validate `local@domain` and normalise its domain; raise AddressError.

    An octet that is not UTF-8 arrives as a lone surrogate (aiosmtpd decodes with
    surrogateescape): reason "not_utf8", with the octets shown as \\xNN escapes."""
    if not address.isascii():
        try:
            address.encode()
        except UnicodeEncodeError:
            shown = address.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
            raise AddressError("not_utf8", f"<{shown}> is not UTF-8 (RFC 6531)") from None
    local, at, domain = address.rpartition("@")
    if not at or not local:
        raise AddressError("syntax", f"<{address}> is not of the form local-part@domain")
    if len(local.encode()) > MAX_LOCAL_OCTETS:
        raise AddressError("syntax", f"The local part of <{address}> is longer than 64 octets")
    if local.isascii():
        ok = _DOT_ATOM_ASCII.match(local) or _QUOTED_ASCII.match(local)
    else:
        if not smtputf8:
            raise AddressError("needs_smtputf8", f"<{address}> has a non-ASCII local part; MAIL FROM needs SMTPUTF8")
        dot_atom, quoted = _utf8()
        ok = dot_atom.match(local) or quoted.match(local)
    if not ok:
        raise AddressError("syntax", f"The local part of <{address}> is not valid (RFC 5321 4.1.2)")
    ascii_domain = normalise_domain(domain, address)
    if len(local.encode()) + 1 + len(ascii_domain) > MAX_PATH_OCTETS:
        raise AddressError("syntax", f"<{address}> is longer than 254 octets")
    return Address(local, ascii_domain)


# RFC 5322 3.2.3 specials but ".": a name that holds one, unquoted, is not one name.
_NAME_SPECIALS = frozenset('()<>[]:;@\\,"')


@functools.cache
def _utf8() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The dot-atom and quoted-string patterns with UTF-8 (RFC 6531: atext is extended by
    any non-ASCII character), compiled when first needed: their ranges take 15 ms."""
    return (re.compile(rf"^[{_ATEXT}\u0080-\U0010ffff]+(?:\.[{_ATEXT}\u0080-\U0010ffff]+)*$"),
            re.compile(r'^"(?:[\x20\x21\x23-\x5b\x5d-\x7e\u0080-\U0010ffff]|\\[\x20-\x7e])*"$'))  # fmt: skip


def parse_named(text: str, *, smtputf8: bool = True) -> tuple[str, Address]:
    """An address as an application gives one: `local@domain`, `<local@domain>`, or
    `Name <local@domain>` whose name is a quoted string or words without specials.
    Returns (the name, unquoted; "" for none, the mailbox). Anything else raises
    AddressError and is never guessed at: a name that holds `@`, `<` or `,`
    ("evil@x.test <a@y.test>"), two addresses, a source route, text after `>`, or a
    control character (CR, LF) anywhere. The mailbox is checked by parse_mailbox, as
    MAIL and RCPT are. Sync, no I/O."""
    if not text.isprintable():
        raise AddressError("syntax", f"{text!r} holds a control character (a line break?)")
    text = text.strip()
    start = _closing(text, 0, "<")
    if start < 0:
        return "", parse_mailbox(text, smtputf8=smtputf8)
    name, path = text[:start].strip(), text[start:]
    parsed = parse_path(path)
    if parsed is None or not parsed[0] or parsed[1] or path.startswith("<@"):
        raise AddressError("syntax", f"{text!r} is not of the form Name <local-part@domain>")
    return _display_name(name, text), parse_mailbox(parsed[0], smtputf8=smtputf8)


def _display_name(name: str, text: str) -> str:
    if not name:
        return ""
    if name.startswith('"'):
        if not _utf8()[1].match(name):
            raise AddressError("syntax", f"{text!r}: the quoted name before <...> is not one quoted string")
        return re.sub(r"\\(.)", r"\1", name[1:-1])
    special = next((c for c in name if c in _NAME_SPECIALS), None)
    if special is not None:
        raise AddressError("syntax", f"{text!r}: the name before <...> holds {special!r}, which makes it "
                                     "ambiguous; quote the name")  # fmt: skip
    return " ".join(name.split())


def normalise_domain(domain: str, address: str = "") -> str:
    """Return the domain as a lower-case A-label; raise AddressError if it is not one."""
    try:
        return _normalise_valid(domain)
    except AddressError as exc:
        raise AddressError(exc.reason, f"<{address or domain}>: {exc.text}") from None


@functools.lru_cache(maxsize=16_384)
def _normalise_valid(domain: str) -> str:
    """normalise_domain, cached (mail goes to few domains); errors say what, not where."""
    if domain.startswith("["):
        raise AddressError("address_literal", "address literals are not accepted")
    if domain.endswith("."):
        domain = domain[:-1]
    if "." not in domain:
        raise AddressError("domain", "the domain must be fully qualified")
    if domain.isascii():
        ascii_domain = domain.lower()
    else:
        import idna  # only for a domain that needs it: 10 ms to load

        try:
            ascii_domain = idna.encode(domain, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise AddressError("domain", f"the domain is not a valid IDNA name ({exc})") from exc
    if len(ascii_domain) > MAX_DOMAIN_OCTETS:
        raise AddressError("domain", "the domain is longer than 253 octets")
    for label in ascii_domain.split("."):
        if not _LDH_LABEL.match(label):
            raise AddressError("domain", f"the domain label {label!r} is not a valid hostname label")
        if label.startswith("xn--"):
            import idna

            try:
                idna.decode(label)
            except idna.IDNAError as exc:
                raise AddressError("domain", f"the A-label {label!r} is not valid IDNA") from exc
    if ascii_domain.rsplit(".", 1)[1].isdigit():
        raise AddressError("domain", "the top-level label must not be numeric")
    return ascii_domain
