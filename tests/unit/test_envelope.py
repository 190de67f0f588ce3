import pytest

from mtad.base import envelope, errors


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("<a@example.com>", ("a@example.com", "")),
        ("<a@example.com> SIZE=100 BODY=8BITMIME", ("a@example.com", "SIZE=100 BODY=8BITMIME")),
        ("  <a@example.com>", ("a@example.com", "")),
        ("<>", ("", "")),
        ("<@relay.example,@b.example:a@example.com>", ("a@example.com", "")),
        ('<"john >doe"@example.com> X', ('"john >doe"@example.com', "X")),
        ("a@example.com SIZE=5", ("a@example.com", "SIZE=5")),
        ("a@example.com", ("a@example.com", "")),
    ],
)
def test_parse_path(arg: str, expected: tuple[str, str]) -> None:
    assert envelope.parse_path(arg) == expected


@pytest.mark.parametrize(
    "arg",
    ["<a@example.com", '<"a@example.com>', "<a<b@example.com>", "<@relay:a@b.c", "<@x.test:>", "<@a.test,@b.test:>"],
)
def test_parse_path_refuses_what_is_not_a_path(arg: str) -> None:
    """Unbalanced brackets or quotes, or a source route that leads to no mailbox."""
    assert envelope.parse_path(arg) is None


@pytest.mark.parametrize(
    ("address", "local", "domain"),
    [
        ("user@Example.COM", "user", "example.com"),
        ("first.last+tag@example.com", "first.last+tag", "example.com"),
        ('"john doe"@example.com', '"john doe"', "example.com"),
        ("a@faß.de", "a", "xn--fa-hia.de"),  # IDNA 2008: not "fass.de"
        ("a@bücher.example", "a", "xn--bcher-kva.example"),
        ("a@xn--bcher-kva.example", "a", "xn--bcher-kva.example"),
        ("a@example.com.", "a", "example.com"),
    ],
)
def test_valid_mailboxes(address: str, local: str, domain: str) -> None:
    parsed = envelope.parse_mailbox(address)
    assert (parsed.local, parsed.domain) == (local, domain)
    assert str(parsed) == f"{local}@{domain}"


def test_utf8_local_part_needs_smtputf8() -> None:
    with pytest.raises(errors.AddressError) as info:
        envelope.parse_mailbox("jösé@example.com")
    assert info.value.reason == "needs_smtputf8"
    parsed = envelope.parse_mailbox("jösé@example.com", smtputf8=True)
    assert parsed.needs_smtputf8


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("caf\udce9@example.com", "not_utf8"),  # a Latin-1 octet, as aiosmtpd hands it over
        ("a@caf\udce9.example", "not_utf8"),
        ('"caf\udce9"@example.com', "not_utf8"),
        ("no-at-sign", "syntax"),
        ("@example.com", "syntax"),
        ("a..b@example.com", "syntax"),
        (".a@example.com", "syntax"),
        ("a b@example.com", "syntax"),
        ("a(b)@example.com", "syntax"),
        ("x" * 65 + "@example.com", "syntax"),
        ("a@localhost", "domain"),
        ("a@exa_mple.com", "domain"),
        ("a@-example.com", "domain"),
        ("a@example..com", "domain"),
        ("a@" + "x" * 64 + ".com", "domain"),
        ("a@1.2.3.4", "domain"),
        ("a@[192.0.2.1]", "address_literal"),
        ("a@xn--zz.example", "domain"),
        ("a@☃️.example", "domain"),  # emoji: valid in IDNA 2003, not in 2008
    ],
)
def test_invalid_mailboxes(address: str, reason: str) -> None:
    for smtputf8 in (False, True):
        with pytest.raises(errors.AddressError) as info:
            envelope.parse_mailbox(address, smtputf8=smtputf8)
        assert info.value.reason == reason
        assert info.value.text
        info.value.text.encode()  # a reply may quote it: no lone surrogate
