"""One telemetry configuration's durable transitions, in a process of its own.

Run by `benchmarks.telemetry` as `python benchmarks/telemetry_worker.py VARIANT URL` (by
path, so that PYTHONPATH decides which cadence_store is imported): reads `run N` lines
on stdin, answers each with a JSON list of N call durations (seconds).

Variants: `none` (opentelemetry hidden from this process: the library as installed
without the extra), `api` (opentelemetry-api, no SDK: the API's no-op tracer and meter),
`sdk` (the SDK with in-memory span and metric exporters), `before` (opentelemetry hidden,
the cadence_store that PYTHONPATH points at: an earlier version of the library).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from typing import Any

from no_otel import hide_opentelemetry  # run by path: this directory is on sys.path

ROOT_HASH = "ab" * 32


def _configure(variant: str) -> Any:
    """Set the variant up; returns what to reset between batches (or None)."""
    if variant in ("none", "before"):
        hide_opentelemetry()
        return None
    if variant == "api":
        return None
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    return exporter


def main() -> int:
    variant, url = sys.argv[1], sys.argv[2]
    exporter = _configure(variant)
    import cadence_store
    from cadence_store import RunStore, upgrade

    telemetry = getattr(cadence_store, "telemetry", None)
    if variant in ("api", "sdk"):
        assert telemetry is not None and telemetry.OTEL_AVAILABLE, "opentelemetry-api missing"
    elif telemetry is not None:
        assert not telemetry.OTEL_AVAILABLE
    upgrade(url)
    store = RunStore(url, root_hash=ROOT_HASH)
    key = hashlib.sha256(variant.encode()).hexdigest()
    run = store.start_run("abel-design", provisional_key=key, operation_id=f"start-{variant}")
    store.transition(run.run_id, "paused", operation_id=f"pause-{variant}")
    print(json.dumps({"ready": variant, "module": cadence_store.__file__}), flush=True)
    counter = 0
    for line in sys.stdin:
        command, _, count = line.partition(" ")
        if command != "run":
            break
        samples = []
        for _ in range(int(count)):
            counter += 1
            started = time.perf_counter()
            store.transition(run.run_id, "paused", operation_id=f"t-{counter}", code="bench")
            samples.append(time.perf_counter() - started)
        if exporter is not None:
            exporter.clear()  # the spans were exported (the cost measured); drop them
        print(json.dumps(samples), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
