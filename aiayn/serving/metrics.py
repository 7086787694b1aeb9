"""The server's Prometheus metrics (``/metrics``): requests by path and status, latency, requests in flight, the models
loaded and their engines, documents, protected spans, the fallback, and the confidence of translated texts (a
histogram read from the pipeline's counts when scraped), whether the shared storage and the keys database answer,
and the server's own failures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import repair
from ..chains import FALLBACK
from ..pipeline import CONFIDENCE, CONFIDENCE_BOUNDS, SPANS
from .batcher import DecodeMetrics


@dataclass(frozen=True, eq=False)
class _Confidence:
    """pipeline.CONFIDENCE (every translated text's confidence, in this process) as a Prometheus histogram."""

    def collect(self) -> Any:
        from prometheus_client.core import HistogramMetricFamily

        counts, total = CONFIDENCE["counts"], 0
        buckets = []
        for bound, n in zip(CONFIDENCE_BOUNDS, counts, strict=True):
            total += n
            buckets.append(("+Inf" if bound == 1.0 else f"{bound:g}", total))
        yield HistogramMetricFamily("aiayn_confidence", "the confidence of translated texts (in [0, 1], calibrated: "
                                    "confidence.py); a text's is its least sure sentence's", buckets=buckets,
                                    sum_value=CONFIDENCE["sum"])


@dataclass(frozen=True, eq=False)
class _Counted:
    """A dict of counts this process keeps (repair.COUNTS, pipeline.SPANS) as a Prometheus counter, read when scraped:
    each key (a label value, or a tuple of them) one series."""

    name: str
    help: str
    labels: tuple[str, ...]
    counts: dict[Any, int]

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(self.name, self.help, labels=list(self.labels))
        for key, n in sorted(self.counts.items()):
            family.add_metric(list(key) if isinstance(key, tuple) else [key], n)
        yield family


class Metrics:
    """Prometheus metrics of one app (its own registry, so several apps can live in one process): its requests here,
    its decoding in batcher.DecodeMetrics."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("aiayn_requests", "HTTP requests", ["path", "status"], registry=self.registry)
        self.latency = Histogram("aiayn_request_seconds", "request latency", ["path"], registry=self.registry,
                                 buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.in_flight = Gauge("aiayn_requests_in_flight", "translation requests being answered", registry=self.registry)
        self.model_bytes = Gauge("aiayn_model_bytes", "bytes of a served model's weights, as loaded (0: not loaded)",
                                 ["model"], registry=self.registry)
        self.loads = Counter("aiayn_model_loads", "models loaded (at start, or on first use under --memory-budget)",
                             ["model"], registry=self.registry)
        self.unloads = Counter("aiayn_model_unloads", "models unloaded to hold --memory-budget", ["model"],
                               registry=self.registry)
        self.engine = Gauge("aiayn_model_engine", "the engine decoding a served model (--engine; auto: the one it "
                            "picked), 1", ["model", "engine"], registry=self.registry)
        self.decoding = DecodeMetrics(self.registry)
        self.registry.register(_Counted("aiayn_repair_sentences", "sentences whose translation degenerated (a loop, a "
                                        "copy of the source, a length out of line), by kind: flagged, and repaired",
                                        ("kind", "outcome"), repair.COUNTS))
        self.registry.register(_Confidence())
        self.registry.register(_Counted("aiayn_fallback_texts", "texts less sure than --min-confidence, by outcome: "
                                        "sent to the --fallback model, and those whose translation it bettered",
                                        ("outcome",), FALLBACK))
        self.registry.register(_Counted("aiayn_protected_spans", "protected spans (placeholders, URLs, tags) of "
                                        "translated texts, by outcome: kept, or lost", ("outcome",), SPANS))
        self.documents = Counter("aiayn_documents", "documents translated through /translate_file, by format",
                                 ["format"], registry=self.registry)
        self.document_spans = Counter("aiayn_document_spans", "the protected spans (placeholders, inline tags) of "
                                      "translated documents, by outcome: kept, or lost", ["outcome"],
                                      registry=self.registry)
        self.shared_up = Gauge("aiayn_shared_storage_up", "1 while the shared storage (--shared-storage: Redis) answers "
                               "or none is set; 0 while limits and cache are this replica's own", registry=self.registry)
        self.shared_up.set(1)
        self.shared_errors = Counter("aiayn_shared_storage_errors", "calls to the shared storage that failed (each "
                                     "answered from this replica's own state)", registry=self.registry)
        self.keys_up = Gauge("aiayn_keys_database_up", "1 while the keys database (--api-keys) answers or none is "
                             "set; 0 while the keys seen are served from memory (--keys-grace), then 503",
                             registry=self.registry)
        self.keys_up.set(1)
        self.keys_errors = Counter("aiayn_keys_database_errors", "calls to the keys database that failed",
                                   registry=self.registry)
        self.failures = Counter("aiayn_failures", "requests that failed on an error of the server's own (a 500; "
                                "logged as one line, without the request's text)", registry=self.registry)

    def documented(self, report: Any) -> None:
        """A translated document's report (documents.common.Report) counted."""
        self.documents.labels(report.format or "unknown").inc()
        self.document_spans.labels("kept").inc(report.kept)
        self.document_spans.labels("lost").inc(report.spans - report.kept)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))
