"""Prometheus metrics of the speech server (`GET /metrics`, text format 0.0.4).

    metrics = ServerMetrics(backend)
    metrics.request_done(status=200, fmt="pcm", seconds=1.9, first_audio_s=0.21)
    body = metrics.render()

Uses `prometheus_client`, the reference client: its exposition format and histogram
buckets are what every Prometheus scraper expects. One registry per server (no globals).

  rumik_requests_total{status,format}        speech requests answered, by HTTP status
  rumik_request_errors_total{code}           failed ones, by error code (400s, 401, 503, 500, disconnects)
  rumik_time_to_first_audio_seconds          histogram: request received -> first audio ready
  rumik_request_duration_seconds             histogram: request received -> last byte
  rumik_queue_depth                          requests waiting for a batch row
  rumik_active_requests                      requests decoding now (batch rows in use)
  rumik_batch_slots                          rows decoded together at most (--max-batch)
  rumik_generated_tokens_total               audio tokens generated (100 per second of audio)
  rumik_tokens_per_second                    over the last ~10 s
  rumik_audio_seconds_total                  audio produced
  rumik_backend_healthy                      1 while the decode loop runs
  rumik_websocket_sessions                   WebSocket sessions open (Silk and text-in)
  rumik_websocket_streaming                  utterances those sessions are streaming now
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFA_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
DURATION_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


class _BackendCollector:
    """Reads the backend's stats at scrape time."""

    def __init__(self, backend, sessions=None):
        self.backend, self.sessions = backend, sessions

    def collect(self):
        if self.sessions is not None:
            yield GaugeMetricFamily("rumik_websocket_sessions", "WebSocket sessions open",
                                    value=len(self.sessions.open))
            yield GaugeMetricFamily("rumik_websocket_streaming", "Utterances WebSocket sessions are streaming",
                                    value=self.sessions.streaming)
        s = self.backend.stats()
        yield GaugeMetricFamily("rumik_queue_depth", "Requests waiting for a batch row", value=s.queue_depth)
        yield GaugeMetricFamily("rumik_active_requests", "Requests decoding now (batch rows in use)", value=s.active)
        yield GaugeMetricFamily("rumik_batch_slots", "Rows decoded together at most", value=s.max_batch)
        yield CounterMetricFamily("rumik_generated_tokens", "Audio tokens generated", value=s.tokens_total)
        yield GaugeMetricFamily("rumik_tokens_per_second", "Tokens generated per second, last ~10 s",
                                value=s.tokens_per_second)
        yield CounterMetricFamily("rumik_audio_seconds", "Seconds of audio produced", value=s.audio_seconds_total)
        yield GaugeMetricFamily("rumik_backend_healthy", "1 while the decode loop runs", value=int(s.healthy))


class ServerMetrics:
    """Counters and histograms the HTTP layer updates, plus the backend's gauges."""

    def __init__(self, backend, sessions=None):
        self.registry = CollectorRegistry()
        self.requests = Counter("rumik_requests", "Speech requests answered, by HTTP status",
                                ["status", "format"], registry=self.registry)
        self.errors = Counter("rumik_request_errors", "Failed requests, by error code", ["code"],
                              registry=self.registry)
        self.first_audio = Histogram("rumik_time_to_first_audio_seconds", "Request received to first audio ready",
                                     buckets=TTFA_BUCKETS, registry=self.registry)
        self.duration = Histogram("rumik_request_duration_seconds", "Request received to last byte sent",
                                  buckets=DURATION_BUCKETS, registry=self.registry)
        self.registry.register(_BackendCollector(backend, sessions))

    def error(self, code: str | None) -> None:
        self.errors.labels(code=code or "error").inc()

    def request_done(self, status: int, fmt: str, seconds: float | None = None) -> None:
        self.requests.labels(status=str(status), format=fmt).inc()
        if seconds is not None:
            self.duration.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
