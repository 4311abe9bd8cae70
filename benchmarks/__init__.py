"""The benchmark harness (`python -m benchmarks`; docs/performance.md)."""

from .no_otel import hidden_by_environment, hide_opentelemetry

if hidden_by_environment():
    hide_opentelemetry()  # before any benchmark module imports cadence_store
