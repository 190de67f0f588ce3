"""Metrics read from real components when /metrics is rendered: the pools' use."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from mtad import db
from mtad.base import metrics


def pool_samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text.decode())
        if family.name.startswith("mtad_db_pool")
        for sample in family.samples
    }


async def test_the_watched_pools_use_is_read_at_every_scrape(dsn: str) -> None:
    main = await db.Database.connect(dsn, max_size=3)
    delivering = await db.Database.connect(dsn, max_size=4, name="delivery")
    try:
        metrics.watch_pools([main, delivering])
        async with main.connection(), main.connection():
            during = pool_samples(metrics.exposition())
        after = pool_samples(metrics.exposition())
        assert during[("mtad_db_pool_connections", (("pool", "main"), ("state", "in_use")))] == 2
        assert during[("mtad_db_pool_connections", (("pool", "delivery"), ("state", "in_use")))] == 0
        assert during[("mtad_db_pool_max_connections", (("pool", "main"),))] == 3
        assert during[("mtad_db_pool_max_connections", (("pool", "delivery"),))] == 4
        assert after[("mtad_db_pool_connections", (("pool", "main"), ("state", "in_use")))] == 0
        assert after[("mtad_db_pool_connections", (("pool", "main"), ("state", "idle")))] == 2
        metrics.watch_pools([delivering])
        assert {labels for _, labels in pool_samples(metrics.exposition())} == {
            (("pool", "delivery"), ("state", "in_use")),
            (("pool", "delivery"), ("state", "idle")),
            (("pool", "delivery"),),
        }  # a pool no longer watched is gone
    finally:
        metrics.watch_pools([])
        await delivering.close()
        await main.close()
