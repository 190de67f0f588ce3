import pytest

from mtad.base import replies
from mtad.base.replies import Reply


def test_reply_line_and_classes() -> None:
    reply = Reply(451, "4.3.0", "try later")
    assert reply.line() == "451 4.3.0 try later"
    assert str(reply) == reply.line()
    assert reply.is_transient
    assert not reply.is_permanent
    assert not reply.is_success
    assert replies.queued("abc").line() == "250 2.0.0 Ok: queued as abc"


def test_reply_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="out of range"):
        Reply(99, "", "x")
    with pytest.raises(ValueError, match="does not match"):
        Reply(550, "4.1.1", "x")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("500 Error: bad syntax", "500 5.5.2 Error: bad syntax"),
        ("503 Error: need RCPT command", "503 5.5.1 Error: need RCPT command"),
        ("552 Error: Too much mail data", "552 5.3.4 Error: Too much mail data"),
        ("554 Command refused due to lack of security", "554 5.7.0 Command refused due to lack of security"),
        ("599 odd", "599 5.0.0 odd"),
        ("451 4.3.0 already has one", "451 4.3.0 already has one"),
        ("250 OK", "250 OK"),  # only refusals are reworded
        ("220 mx ESMTP", "220 mx ESMTP"),
        ("354 End data", "354 End data"),
    ],
)
def test_enhanced_codes_are_added_to_refusals_only(given: str, expected: str) -> None:
    assert replies.with_enhanced_code(given) == expected


def test_every_constant_refusal_has_an_enhanced_code() -> None:
    for value in vars(replies).values():
        if isinstance(value, Reply):
            assert value.enhanced, value
