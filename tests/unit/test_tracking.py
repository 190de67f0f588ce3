"""Open and click tracking: the tokens, the rewrite of a message's HTML (its links and
pixel, by offset, through transfer encodings, charsets and nested multiparts), what
is never rewritten, what goes out untouched, and machines told from people."""

from __future__ import annotations

import base64
import binascii
import email
import re
from datetime import UTC, datetime, timedelta
from email import policy
from pathlib import Path

import dkim as dkimpy
import hypothesis
import pytest
from hypothesis import strategies as st

from mtad import config
from mtad.base import errors
from mtad.feedback import html_links, html_parts, machines, settings
from mtad.feedback.tracking import Kind, Tokens, Tracked, Tracking
from mtad.signing import dkim

KEY = b"k" * 32
TRACKER = Tracking(Tokens(KEY), "https://t.example.org", "https://unsub.example.org")
HEAD = b"From: news@example.com\r\nTo: a@example.net\r\nSubject: Hi\r\nMIME-Version: 1.0\r\n"
PAGE = (
    '<html><body>\r\n<p>Hello <a class="x" href="https://shop.example.com/a?x=1&amp;y=2">shop</a>,\r\n'
    '<a href=\'mailto:help@example.com\'>mail</a> <a href="tel:+331">call</a> <a href="#top">top</a>\r\n'
    '<map><area shape="rect" href=http://example.com/area></map>\r\n'
    '<a href="https://unsub.example.org/unsubscribe/abc">leave</a> <a href="https://own.example.com/u">own</a>\r\n'
    "</body></html>\r\n"
)
TRACKED = ["https://shop.example.com/a?x=1&y=2", "http://example.com/area", "https://own.example.com/u"]
AS_WRITTEN = ['"https://shop.example.com/a?x=1&amp;y=2"', "http://example.com/area", '"https://own.example.com/u"']
LINK = re.compile(rb'"https://t\.example\.org/c/([A-Za-z0-9_-]+)"')
PIXEL = re.compile(rb'<img src="https://t\.example\.org/o/([A-Za-z0-9_-]+)"[^>]*>')


def rewrite(message: bytes, opens: bool = True, clicks: bool = True) -> bytes:
    return TRACKER.rewrite(message, 42, "shop", opens=opens, clicks=clicks)


def clicked(rewritten: bytes) -> list[str]:
    found = [TRACKER.tokens.read(t.decode(), Kind.CLICK) for t in LINK.findall(rewritten)]
    assert all(t is not None and t.delivery == 42 and t.tenant == "shop" for t in found)
    return [t.url for t in found if t is not None and t.url is not None]


def html_of(message: bytes) -> str:
    parsed = email.message_from_bytes(message, policy=policy.default)
    part = parsed.get_body(("html",))
    assert part is not None
    return str(part.get_content())


def restored(text: str) -> str:
    """The rewritten HTML with the pixel taken out and each tracking link as @@."""
    text = re.sub(PIXEL.pattern.decode(), "", text)
    for url in TRACKED:
        token = TRACKER.tokens.make(Kind.CLICK, 42, "shop", url)
        text = text.replace(f'"https://t.example.org/c/{token}"', "@@")
    return text


def expected(text: str) -> str:
    """The original HTML with each tracked link as @@."""
    for written in AS_WRITTEN:
        text = text.replace(written, "@@")
    return text


def test_a_token_reads_back_and_a_tampered_one_or_one_of_the_other_kind_does_not() -> None:
    tokens = Tokens(KEY)
    click = tokens.make(Kind.CLICK, 7, "shop", "https://example.com/x")
    assert tokens.read(click, Kind.CLICK) == Tracked(Kind.CLICK, 7, "shop", "https://example.com/x")
    assert tokens.read(click, Kind.OPEN) is None
    opened = tokens.make(Kind.OPEN, 7, "shop")
    assert tokens.read(opened, Kind.OPEN) == Tracked(Kind.OPEN, 7, "shop")
    tampered = click[:-3] + ("A" if click[-3] != "A" else "B") + click[-2:]
    assert tokens.read(tampered, Kind.CLICK) is None
    assert Tokens(b"o" * 32).read(click, Kind.CLICK) is None
    for bad in ("", "AAAA", "!!!", click + "=", "a" * 5000):
        assert tokens.read(bad, Kind.CLICK) is None


def test_a_single_part_html_gets_its_links_and_pixel_and_nothing_else_changes() -> None:
    original = HEAD + b"Content-Type: text/html; charset=utf-8\r\n\r\n" + PAGE.encode()
    rewritten = rewrite(original)
    assert clicked(rewritten) == TRACKED
    [opened] = PIXEL.findall(rewritten)
    assert TRACKER.tokens.read(opened.decode(), Kind.OPEN) == Tracked(Kind.OPEN, 42, "shop")
    assert rewritten.index(b"<img") < rewritten.index(b"</body>")
    assert rewritten.startswith(HEAD)
    text = rewritten.decode()
    assert restored(text) == expected(original.decode())
    assert "mailto:help@example.com" in text
    assert "tel:+331" in text
    assert 'href="#top"' in text
    assert "https://unsub.example.org/unsubscribe/abc" in text


def test_only_opens_or_only_clicks() -> None:
    original = HEAD + b"Content-Type: text/html\r\n\r\n" + PAGE.encode()
    assert not PIXEL.search(rewrite(original, opens=False))
    assert clicked(rewrite(original, opens=False)) == TRACKED
    assert PIXEL.search(rewrite(original, clicks=False))
    assert not LINK.search(rewrite(original, clicks=False))


def test_the_messages_own_list_unsubscribe_links_are_not_rewritten() -> None:
    original = (HEAD + b"List-Unsubscribe: <https://own.example.com/u>, <mailto:u@example.com>\r\n"
                b"Content-Type: text/html\r\n\r\n" + PAGE.encode())  # fmt: skip
    rewritten = rewrite(original)
    assert b'href="https://own.example.com/u"' in rewritten
    assert clicked(rewritten) == TRACKED[:2]


def alternative(html_part: bytes, outer: str = "alternative") -> bytes:
    return (
        HEAD + f'Content-Type: multipart/{outer}; boundary="==b1=="\r\n\r\nPreamble\r\n'.encode()
        + b"--==b1==\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nSee https://shop.example.com/a now.\r\n"
        + b"--==b1==\r\n" + html_part + b"\r\n--==b1==--\r\nEpilogue\r\n"
    )  # fmt: skip


def test_quoted_printable_in_a_multipart_and_the_text_part_untouched() -> None:
    page = ("<html><body><p>Caf\u00e9 " + "tr\u00e8s " * 30 + "</p>" + PAGE.split("<body>", 1)[1]).encode("latin-1")
    part = (b"Content-Type: text/html; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n"
            + binascii.b2a_qp(page, istext=True))  # fmt: skip
    original = alternative(part)
    rewritten = rewrite(original)
    text_part = b"Content-Type: text/plain; charset=utf-8\r\n\r\nSee https://shop.example.com/a now.\r\n"
    assert text_part in rewritten
    assert rewritten.endswith(b"\r\n--==b1==--\r\nEpilogue\r\n")
    assert rewritten.startswith(original[: original.index(b"--==b1==\r\nContent-Type: text/html")])
    html = html_of(rewritten)
    assert "Caf\u00e9 tr\u00e8s" in html
    assert all(len(line) <= 76 for line in rewritten.split(b"\r\n"))
    assert clicked(html.encode("latin-1")) == TRACKED
    assert restored(html) == expected(page.decode("latin-1"))


def test_base64_in_utf8_nested_in_mixed_and_related() -> None:
    page = PAGE.replace("Hello", "Gr\u00fc\u00dfe \u4f60\u597d").encode("utf-8")
    encoded = base64.encodebytes(page).replace(b"\n", b"\r\n")
    html_part = b"Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n" + encoded
    related = b'Content-Type: multipart/related; boundary="r"\r\n\r\n--r\r\n' + html_part + b"\r\n--r--"
    original = alternative(related, outer="mixed")
    rewritten = rewrite(original)
    html = html_of(rewritten)
    assert "Gr\u00fc\u00dfe \u4f60\u597d" in html
    decoded = base64.b64decode(re.search(rb"base64\r\n\r\n(.*?)\r\n--r--", rewritten, re.S).group(1))  # type: ignore[union-attr]
    assert clicked(decoded) == TRACKED
    assert restored(decoded.decode("utf-8")) == expected(page.decode("utf-8"))


def test_an_attachment_and_a_forwarded_message_are_left_alone() -> None:
    attached = b'Content-Type: text/html\r\nContent-Disposition: attachment; filename="a.html"\r\n\r\n' + PAGE.encode()
    original = alternative(attached, outer="mixed")
    assert rewrite(original) == original
    forwarded = b"Content-Type: message/rfc822\r\n\r\n" + HEAD + b"Content-Type: text/html\r\n\r\n" + PAGE.encode()
    assert rewrite(alternative(forwarded, outer="mixed")) == alternative(forwarded, outer="mixed")


def test_a_long_line_in_7bit_becomes_quoted_printable() -> None:
    long_url = "https://shop.example.com/" + "p" * 900
    page = f'<html><body><a href="{long_url}">x</a></body></html>'.encode()
    original = HEAD + b"Content-Type: text/html\r\nContent-Transfer-Encoding: 7bit\r\n\r\n" + page
    rewritten = rewrite(original)
    assert b"Content-Transfer-Encoding: quoted-printable\r\n" in rewritten
    assert b"7bit" not in rewritten
    assert all(len(line) <= 998 for line in rewritten.split(b"\r\n"))
    assert clicked(binascii.a2b_qp(rewritten.split(b"\r\n\r\n", 1)[1])) == [long_url]


@pytest.mark.parametrize(
    ("content_type", "body", "why"),
    [
        ("text/html", b"<html><body><!-- <a href='https://x.example/'>hidden</a> --></body></html>", "link tags"),
        ("text/html", b"<script>document.write('<a href=\"https://x.example/\">')</script>", "link tags"),
        ("text/html; charset=utf-16", "<a href='https://x.example/'>x</a>".encode("utf-16"), "utf-16"),
        (
            'multipart/signed; protocol="application/pkcs7-signature"; boundary="s"',
            b"--s\r\nContent-Type: text/html\r\n\r\n<a href='https://x/'>x</a>\r\n--s--\r\n",
            "signature",
        ),
        (
            'multipart/alternative; boundary="b"',
            b"--b\r\nContent-Type: text/html\r\n\r\n<a href='https://x/'>",
            "closing",
        ),
    ],
)
def test_what_cannot_be_rewritten_safely_goes_out_untouched(content_type: str, body: bytes, why: str) -> None:
    with pytest.raises(html_parts.Untouched, match=why):
        rewrite(HEAD + f"Content-Type: {content_type}\r\n\r\n".encode() + body)


def test_a_plain_text_message_is_not_changed() -> None:
    original = HEAD + b"Content-Type: text/plain\r\n\r\nhttps://shop.example.com/\r\n"
    assert rewrite(original) == original


def test_the_parser_finds_links_where_they_are() -> None:
    text = "<A HREF = 'https://a.example/' title=\"<a b\">x</A><area href=https://b.example/ /><a name=x>"
    with pytest.raises(html_links.Unsafe):  # "<a" inside an attribute value: more openings than tags
        html_links.find(text)
    found = html_links.find("<A HREF = 'https://a.example/?q=&lt;'>x</A><area href=https://b.example/ />")
    assert [link.url for link in found.links] == ["https://a.example/?q=<", "https://b.example/"]
    assert found.pixel_at == len("<A HREF = 'https://a.example/?q=&lt;'>x</A><area href=https://b.example/ />")


def test_a_signature_made_after_the_rewrite_verifies() -> None:
    key = dkim.generate("example.com", "s1", dkim.Algorithm.RSA2048)
    original = alternative(b"Content-Type: text/html; charset=utf-8\r\n\r\n" + PAGE.encode())
    signed = dkim.sign(rewrite(original), [key])
    records = {b"s1._domainkey.example.com.": key.record().encode()}
    assert dkimpy.DKIM(signed).verify(dnsfunc=lambda name, timeout=5: records.get(name, b""))
    assert LINK.search(signed)


AT = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
RULES = settings.Tracking()


@pytest.mark.parametrize(
    ("fetch", "why"),
    [
        (machines.Fetch(Kind.OPEN, AT, "17.58.1.2", "Mozilla/5.0 (iPhone)"), "apple_privacy_proxy"),
        (machines.Fetch(Kind.OPEN, AT, "192.0.2.1", "Mozilla/5.0"), "apple_privacy_proxy"),
        (machines.Fetch(Kind.CLICK, AT, "192.0.2.1", "Mozilla/5.0 (X11)", delivered_at=AT - timedelta(seconds=3)),
         "scanner"),
        (machines.Fetch(Kind.CLICK, AT, "192.0.2.1", "Mozilla/5.0 (X11)", delivered_at=AT - timedelta(hours=1),
                        last_click=AT - timedelta(seconds=1)), "scanner"),
        (machines.Fetch(Kind.OPEN, AT, "192.0.2.1", "Mozilla/5.0 (X11)", delivered_at=AT - timedelta(seconds=2)),
         "prefetch"),
        (machines.Fetch(Kind.CLICK, AT, "192.0.2.1", "python-requests/2.31"), "user_agent"),
        (machines.Fetch(Kind.CLICK, AT, "192.0.2.1", "Mozilla/5.0 (X11)", head=True), "head"),
        (machines.Fetch(Kind.CLICK, AT, "192.0.2.1", "Mozilla/5.0 (X11)", delivered_at=AT - timedelta(hours=1),
                        last_click=AT - timedelta(minutes=5)), None),
        (machines.Fetch(Kind.OPEN, AT, "192.0.2.1", "Mozilla/5.0 (X11)", delivered_at=AT - timedelta(hours=1)), None),
    ],
)  # fmt: skip
def test_machines_are_told_from_people(fetch: machines.Fetch, why: str | None) -> None:
    assert machines.machine(fetch, RULES) == why


def load(tmp_path: Path, text: str) -> config.Settings:
    path = tmp_path / "mtad.toml"
    path.write_text(text)
    return config.load(path, environ={})


def test_tracking_is_off_unless_a_tenant_turns_it_on_and_needs_a_url(tmp_path: Path) -> None:
    assert load(tmp_path, "").delivery.engine.tracked == {}
    with pytest.raises(errors.ConfigError) as refused:
        load(tmp_path, '[tenants."shop"]\ntrack_opens = true\ntrack_clicks = "yes"\n')
    problems = "\n".join(refused.value.problems)
    assert '[tenants."shop"] track_clicks: expected true or false' in problems
    with pytest.raises(errors.ConfigError) as refused:
        load(tmp_path, '[tenants."shop"]\ntrack_opens = true\n')
    assert any(p.startswith("[tracking] url: tenants shop ask for track_opens") for p in refused.value.problems)
    with pytest.raises(errors.ConfigError) as refused:
        load(tmp_path, '[database]\ndsn = "postgresql:///x"\n[tracking]\nurl = "https://t.example.org"\n')
    assert any(p.startswith("[unsubscribe] key_file: with a DSN") for p in refused.value.problems)


def test_a_tracked_tenant_reaches_delivery_and_the_embedded_default_makes_the_key(tmp_path: Path) -> None:
    found = load(tmp_path, '[tracking]\nurl = "https://t.example.org/"\n[tenants."shop"]\ntrack_clicks = true\n')
    assert found.delivery.engine.tracked == {"shop": (False, True)}
    assert found.tracking.url == "https://t.example.org"
    assert found.unsubscribe.key_file is not None
    assert found.unsubscribe.make


PIECES = [
    "<p>", "</p>", "text ", " \t", "&amp;", "\u00e9", "\r\n", ".", "=", "=3D", "<", ">", '"', "'", "<br/>",
    "<img src=x>", '<a href="https://x.example/a?b=1&amp;c=2">', "</a>", "<a href='http://y.example/'>",
    "<a href=https://z.example/ >",
    '<a name="n">', '<a href="mailto:a@example.org">', '<area href="https://w.example/">', '<A HREF="https://u.example/">',
    '<a href="https://v.example/" href="https://dup.example/">', "<!-- c -->", "<!-- <a href='https://h.example/'> -->",
    "<script>if (a<b) x()</script>", "<style>a{}</style>", "<body>", "</body>", "</html>", "x" * 80,
]  # fmt: skip
CLICKS = re.compile(r'"https://t\.example\.org/c/[A-Za-z0-9_-]+"')


def decoded(message: bytes) -> str:
    """A single-part message's body, its transfer encoding undone, one character an octet."""
    head, body = message.split(b"\r\n\r\n", 1)
    encoding = re.search(rb"Content-Transfer-Encoding: (\S+)", head)
    name = encoding.group(1).lower() if encoding else b"7bit"
    raw = (
        binascii.a2b_qp(body) if name == b"quoted-printable" else base64.b64decode(body) if name == b"base64" else body
    )
    return raw.decode("latin-1")


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(
    st.lists(st.sampled_from(PIECES), max_size=40),
    st.sampled_from(["7bit", "8bit", "quoted-printable", "base64"]),
    st.sampled_from(["utf-8", "iso-8859-1"]),
)
def test_only_the_links_and_the_pixel_change_whatever_the_html_and_its_encoding(
    pieces: list[str], encoding: str, charset: str
) -> None:
    text = "".join(pieces)
    raw = text.encode("ascii", "replace") if encoding == "7bit" else text.encode(charset)
    body = {
        "quoted-printable": lambda: binascii.b2a_qp(raw, istext=True),
        "base64": lambda: base64.encodebytes(raw).replace(b"\n", b"\r\n"),
    }.get(encoding, lambda: raw)()
    message = (
        HEAD + f"Content-Type: text/html; charset={charset}\r\nContent-Transfer-Encoding: {encoding}\r\n\r\n".encode()
    )
    original = raw.decode("latin-1")
    try:
        rewritten = rewrite(message + body)
    except html_parts.Untouched:
        with pytest.raises(html_links.Unsafe):
            html_links.find(original)
        return
    found = html_links.find(original)
    expected = html_links.replace(original, [(k.start, k.end, "@@") for k in found.links if k.url.startswith("http")])
    assert CLICKS.sub("@@", re.sub(PIXEL.pattern.decode(), "", decoded(rewritten))) == expected
    assert all(len(line) <= 998 for line in rewritten.split(b"\r\n"))
