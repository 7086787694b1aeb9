"""The server's Prometheus metrics (``/metrics``): requests by path and status, latency, requests in flight, the models
loaded and their engines, documents, and per route (a model's name, or a pivot's: "de-en-fr") what happened to its
requests: the sentences repaired, protected spans, the fallback, the confidence of translated texts (each request's
counts and translations, pipeline.Translated: :meth:`Metrics.translated`); whether the shared storage and the keys
database answer, and the server's own failures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..translation import repair
from .batcher import DecodeMetrics

if TYPE_CHECKING:
    from ..translation.pipeline import Translated

# the confidence histogram's bounds (a text's confidence is in [0, 1])
CONFIDENCE_BOUNDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


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
        self.repaired = Counter("aiayn_repair_sentences", "sentences whose translation degenerated (a loop, a copy of "
                                "the source, a length out of line), by kind: flagged, and repaired",
                                ["model", "kind", "outcome"], registry=self.registry)
        self.confidence = Histogram("aiayn_confidence", "the confidence of translated texts (in [0, 1], calibrated: "
                                    "confidence.py); a text's is its least sure sentence's", ["model"],
                                    registry=self.registry, buckets=CONFIDENCE_BOUNDS)
        self.fallback = Counter("aiayn_fallback_texts", "texts less sure than --min-confidence, by outcome: sent to "
                                "the --fallback model, and those whose translation it bettered", ["model", "outcome"],
                                registry=self.registry)
        self.spans = Counter("aiayn_protected_spans", "protected spans (placeholders, URLs, tags) of translated "
                             "texts, by outcome: kept, or lost", ["model", "outcome"], registry=self.registry)
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

    def translated(self, model: str, done: Translated) -> None:
        """One request's counts and its texts' confidences (pipeline.Translated), under its route's name."""
        for kind in repair.KINDS:
            for outcome in ("flagged", "repaired"):
                if n := done.counts[f"repair.{kind}.{outcome}"]:
                    self.repaired.labels(model, kind, outcome).inc(n)
        for outcome in ("sent", "kept"):
            if n := done.counts[f"fallback.{outcome}"]:
                self.fallback.labels(model, outcome).inc(n)
        for outcome in ("kept", "lost"):
            if n := done.counts[f"spans.{outcome}"]:
                self.spans.labels(model, outcome).inc(n)
        for ts in done.translations:
            if ts and ts[0].confidence is not None:
                self.confidence.labels(model).observe(ts[0].confidence)

    def documented(self, report: Any) -> None:
        """A translated document's report (documents.common.Report) counted."""
        self.documents.labels(report.format or "unknown").inc()
        self.document_spans.labels("kept").inc(report.kept)
        self.document_spans.labels("lost").inc(report.spans - report.kept)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))
