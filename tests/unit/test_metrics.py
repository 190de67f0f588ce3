"""Metrics of several processes rendered as one: this process's samples plus the others'."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

import mtad
from mtad.base import metrics


def values(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


def test_other_processes_samples_are_added_to_this_ones() -> None:
    metrics.ACCEPTED.inc(2)
    metrics.ACCEPT_LATENCY.observe(0.003)
    metrics.SESSIONS.set(4)
    own = values(metrics.exposition())
    other = [
        ("mtad_submission_accepted_messages", "counter", "mtad_submission_accepted_messages_total", (), 5.0),
        ("mtad_submission_accept_seconds", "histogram", "mtad_submission_accept_seconds_count", (), 7.0),
        ("mtad_submission_accept_seconds", "histogram", "mtad_submission_accept_seconds_bucket",
         (("le", "0.005"),), 6.0),
        ("mtad_submission_sessions", "gauge", "mtad_submission_sessions", (), 3.0),
        # A label value only another process has seen: a sample of its own in the family.
        ("mtad_submission_rejected", "counter", "mtad_submission_rejected_total",
         (("reason", "only-elsewhere"),), 1.0),
    ]  # fmt: skip
    merged = values(metrics.exposition([other, other]))

    def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, tuple(sorted(labels.items()))

    accepted = key("mtad_submission_accepted_messages_total")
    assert merged[accepted] == own[accepted] + 10
    count = key("mtad_submission_accept_seconds_count")
    assert merged[count] == own[count] + 14
    bucket = key("mtad_submission_accept_seconds_bucket", le="0.005")
    assert merged[bucket] == own[bucket] + 12
    assert merged[key("mtad_submission_sessions")] == 4 + 6
    assert merged[key("mtad_submission_rejected_total", reason="only-elsewhere")] == 2
    # The other mtad samples are this process's own, untouched; its process metrics stay.
    added = {accepted, count, bucket, key("mtad_submission_sessions")}
    untouched = {k: v for k, v in merged.items() if k[0].startswith("mtad_") and k not in added and k in own}
    assert untouched == {k: own[k] for k in untouched}
    assert any(name.startswith("python_") for name, _ in merged)


def test_a_snapshot_holds_this_processes_mtad_samples_without_created() -> None:
    metrics.ACCEPTED.inc()
    taken = metrics.snapshot()
    names = {name for _, _, name, _, _ in taken}
    assert "mtad_submission_accepted_messages_total" in names
    assert not any(name.endswith("_created") for name in names)
    assert all(family.startswith("mtad_") for family, _, _, _, _ in taken)
    kinds = {family: kind for family, kind, _, _, _ in taken}
    assert kinds["mtad_submission_accept_seconds"] == "histogram"
    assert kinds["mtad_submission_sessions"] == "gauge"
    again = values(metrics.exposition([taken]))
    own = values(metrics.exposition())
    name = ("mtad_submission_accepted_messages_total", ())
    assert again[name] == 2 * own[name]


PAGE = Path(__file__).parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(mtad_\w+)` \| (counter|gauge|histogram) \|([^|]*)\|", re.MULTILINE)


def exported() -> dict[str, tuple[str, frozenset[str]]]:
    """Every metric of mtad's modules (metrics.py's and the few kept beside their
    code): the name a query uses (a counter's with _total), its type and its labels."""
    found = {}
    for info in pkgutil.walk_packages(mtad.__path__, "mtad."):
        if not info.name.endswith("__main__"):
            found.update(_metrics_of(importlib.import_module(info.name)))
    return found


def _metrics_of(module: object) -> dict[str, tuple[str, frozenset[str]]]:
    return {
        value._name + ("_total" if value._type == "counter" else ""): (value._type, frozenset(value._labelnames))
        for value in vars(module).values()
        if isinstance(value, MetricWrapperBase) and value._name.startswith("mtad_")
    }


def test_the_metrics_page_lists_every_metric_with_its_type_and_labels() -> None:
    listed = {
        name: (kind, frozenset(label.strip(" `") for label in labels.split(",") if label.strip()))
        for name, kind, labels in ROW.findall(PAGE.read_text())
    }
    every = exported()
    assert _metrics_of(metrics).items() <= every.items()
    assert listed == every
