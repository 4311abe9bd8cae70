"""The OpenTelemetry SDK's in-memory exporters, installed once per test process.

A process has one global tracer and meter provider, so they are set on first use and
kept; `Telemetry.recording()` collects only what one test does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class _SwitchedExporter(InMemorySpanExporter):
    """Keeps spans only while a test records (other tests' spans are dropped)."""

    active = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self.active:
            return SpanExportResult.SUCCESS
        return super().export(spans)


class Telemetry:
    def __init__(self) -> None:
        self.exporter = _SwitchedExporter()
        self.reader = InMemoryMetricReader()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[self.reader]))
        self._baseline: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}

    def _sums(self) -> dict[tuple[str, tuple[tuple[str, Any], ...]], float]:
        """Counter sums and histogram counts so far, by (metric, attributes)."""
        found: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        key = (metric.name, tuple(sorted(point.attributes.items())))
                        found[key] = getattr(point, "value", None) or getattr(point, "count", 0)
        return found

    @contextmanager
    def recording(self) -> Iterator[Telemetry]:
        self.exporter.clear()
        self._baseline = self._sums()
        self.exporter.active = True
        try:
            yield self
        finally:
            self.exporter.active = False

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def metric(self, name: str) -> float:
        """What metric `name` gained while recording (all attributes together)."""
        now = self._sums()
        return sum(
            value - self._baseline.get(key, 0) for key, value in now.items() if key[0] == name
        )


_installed: Telemetry | None = None


def installed() -> Telemetry:
    global _installed
    if _installed is None:
        _installed = Telemetry()
    return _installed
