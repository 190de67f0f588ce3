"""VERP addresses: they name their delivery, and nothing forged or mangled does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtad.feedback.verp import Verp

VERP = Verp("bounces.example.org", b"k" * 32)


@given(st.integers(min_value=1, max_value=2**63 - 1))
def test_a_sender_names_its_delivery_whatever_the_case(delivery: int) -> None:
    sender = VERP.sender(delivery)
    assert len(sender.split("@")[0]) <= 64  # a local part's limit
    assert VERP.delivery(sender) == delivery
    assert VERP.delivery(sender.upper()) == delivery  # receivers may change the case
    assert VERP.delivery(f"<{sender}>") == delivery


@given(st.text(max_size=80))
def test_anything_else_names_no_delivery(text: str) -> None:
    assert VERP.delivery(text) is None or text.lower().endswith("@bounces.example.org")


def test_a_forged_or_foreign_bounce_names_no_delivery() -> None:
    sender = VERP.sender(42)
    local = sender.split("@")[0]
    assert VERP.delivery(sender.replace("b-2a-", "b-2b-")) is None  # another delivery, the same mac
    assert VERP.delivery(local + "@elsewhere.example") is None
    assert Verp("bounces.example.org", b"x" * 32).delivery(sender) is None  # another key
    assert VERP.delivery(local[:-1] + ("a" if local[-1] != "a" else "b") + "@bounces.example.org") is None
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Verp("bounces.example.org", b"short")


def test_an_unsubscribe_address_names_its_delivery_and_is_no_bounce_address() -> None:
    address = VERP.unsubscribe(42)
    assert address.startswith("u-2a-")
    assert VERP.unsubscribing(address) == 42
    assert VERP.unsubscribing(address.upper()) == 42
    assert VERP.delivery(address) is None  # not a bounce address
    assert VERP.unsubscribing(VERP.sender(42)) is None
    assert VERP.unsubscribing(address.replace("u-2a-", "u-2b-")) is None
