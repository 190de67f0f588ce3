"""What delivery adds for feedback to come back: VERP envelope senders that name their
delivery (null senders keep theirs), and List-Unsubscribe fields with a link per
recipient, added before DKIM signs; each such delivery in a transaction of its own."""

from __future__ import annotations

import dataclasses
import re

from mtad import db
from mtad.deliver import delivery, egress
from mtad.feedback import unsubscribe
from mtad.feedback.verp import Verp
from mtad.outbound import outcomes, routing, sessions
from tests.integration.delivering import PROVIDERS, RULES, ZONE, accept, deliveries, new_message
from tests.sink import Sink
from tests.zones import ZoneResolver

VERP = Verp("bounces.example.org", b"v" * 32)


async def test_each_mx_delivery_gets_an_envelope_sender_naming_it(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("a@sink.test", "b@sink.test"),
                 dataclasses.replace(new_message("c@sink.test"), sender=""))  # fmt: skip
    router = routing.Router(ZoneResolver(ZONE), PROVIDERS, port=sink.port)
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"))
    settings = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0))
    engine = delivery.Delivery(settings, database, router, pool, RULES, pools=egress.Egress({}), verp=VERP)
    await engine.run_until_idle()
    ids = {r: d["id"] for r, d in (await deliveries(database)).items()}
    by_recipient = {m.recipients[0]: m for m in sink.received}
    assert all(len(m.recipients) == 1 for m in sink.received)  # one transaction per delivery
    for recipient in ("a@sink.test", "b@sink.test"):
        sender = by_recipient[recipient].sender
        assert sender.endswith("@bounces.example.org")
        assert VERP.delivery(sender) == ids[recipient]
    assert by_recipient["c@sink.test"].sender in ("", "<>")  # a bounce gets no bounce


async def test_a_tenants_mail_gets_a_one_click_link_per_recipient(database: db.Database, sink: Sink) -> None:
    tokens = unsubscribe.Tokens(b"u" * 32)
    links = unsubscribe.Unsubscribing(tokens, "https://unsub.example.org")
    own = b"List-Unsubscribe: <https://shop.example/u>\r\nSubject: t\r\n\r\nhello\r\n"
    await accept(database, new_message("a@sink.test", "b@sink.test"),
                 dataclasses.replace(new_message("c@sink.test", body=own)))  # fmt: skip
    router = routing.Router(ZoneResolver(ZONE), PROVIDERS, port=sink.port)
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"))
    settings = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0),
                                 list_unsubscribe=frozenset({"t1"}))  # fmt: skip
    engine = delivery.Delivery(settings, database, router, pool, RULES, pools=egress.Egress({}), unsubscribing=links,
                               verp=VERP)  # fmt: skip
    await engine.run_until_idle()
    by_recipient = {m.recipients[0]: m for m in sink.received}
    ids = {r: d["id"] for r, d in (await deliveries(database)).items()}
    assert sorted(by_recipient) == ["a@sink.test", "b@sink.test", "c@sink.test"]  # one transaction each
    for recipient in ("a@sink.test", "b@sink.test"):
        data = by_recipient[recipient].data
        link = re.search(rb"List-Unsubscribe: <https://unsub.example.org/unsubscribe/([A-Za-z0-9_-]+)>", data)
        assert link is not None
        subscriber = tokens.read(link.group(1).decode())
        assert subscriber is not None
        assert (subscriber.tenant, subscriber.address) == ("t1", recipient)
        assert b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n" in data
        mailto = re.search(rb"<mailto:(u-[^>]+)>", data)  # with VERP: unsubscribing by mail names the delivery too
        assert mailto is not None
        assert VERP.unsubscribing(mailto.group(1).decode()) == ids[recipient]
    assert b"List-Unsubscribe: <https://shop.example/u>" in by_recipient["c@sink.test"].data  # its own, kept
    assert b"unsub.example.org" not in by_recipient["c@sink.test"].data
