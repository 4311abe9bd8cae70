"""The telemetry's state: the OpenTelemetry API's objects (imported on first use) and
the library call in progress, which the library's internals tell what they did
(`note_appended`, `count_committed`, `record_busy_retry`, `record_failover_rerun`).
`telemetry.py` opens and closes the calls' spans on it; without opentelemetry-api
installed nothing here is called (or imports it).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Final

NAME: Final = "cadence_store"


class Call:
    """The library call in progress (outermost only) and what it did so far."""

    __slots__ = ("appended", "method", "span")

    def __init__(self, span: Any, method: str | None = None) -> None:
        self.span = span
        self.method = method  # None while nothing records
        self.appended = 0


class NoSpan:
    """The span of a call while nothing records: its events go nowhere."""

    def add_event(self, *_args: Any) -> None:
        return None


current_call: ContextVar[Call | None] = ContextVar("cadence_store_call", default=None)
# the call in progress while no provider records (shared: nothing reads what it counts)
IDLE_CALL: Final = Call(NoSpan())


class Otel:
    """The API's objects, imported on first use."""

    def __init__(self) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.trace import Status, StatusCode

        self._trace_module = trace
        self._metrics_module = metrics
        self._configured = False  # a provider was seen (set once, it is never unset)
        self.trace = trace
        self.tracer = trace.get_tracer(NAME)
        meter = metrics.get_meter(NAME)
        self.appended = meter.create_counter(
            "cadence_store.events.appended", unit="{event}", description="events appended"
        )
        self.fenced = meter.create_counter(
            "cadence_store.leases.fenced", unit="{lease}", description="calls refused lease-fenced"
        )
        self.duration = meter.create_histogram(
            "cadence_store.call.duration", unit="s", description="duration of a public call"
        )
        self._status = Status
        self._error = StatusCode.ERROR

    def idle(self) -> bool:
        """No tracer or meter provider set up (the API's own stand-ins answer): nothing
        would be recorded, so a call skips its span and measurements. A provider is set
        once for the process's life, so once one is seen the check is one attribute read."""
        if self._configured:
            return False
        tracer_provider = self._trace_module.get_tracer_provider()
        meter_provider = self._metrics_module.get_meter_provider()
        # the API package's providers (its proxies and no-ops) record nothing
        self._configured = not (
            _from_the_api(tracer_provider, "opentelemetry.trace")
            and _from_the_api(meter_provider, "opentelemetry.metrics")
        )
        return not self._configured

    def error_status(self, code: str) -> Any:
        return self._status(self._error, code)


def _from_the_api(provider: object, package: str) -> bool:
    module = type(provider).__module__
    return module == package or module.startswith(package + ".")


_otel: Otel | None = None


def api() -> Otel:
    global _otel
    if _otel is None:
        _otel = Otel()
    return _otel


def note_appended(count: int = 1) -> str | None:
    """`count` events appended in the current call: its method, for `count_committed`
    once their transaction commits (None while nothing records)."""
    call = current_call.get()
    if call is None:
        return None
    call.appended += count
    return call.method


def count_committed(appended: Mapping[str, int]) -> None:
    """A transaction committed the events its calls appended (method -> count): only now
    are they counted, so that a rolled-back unit of work, a failed commit or a host's
    rollback counts nothing."""
    counter = api().appended
    for method, count in appended.items():
        counter.add(count, {"method": method})


def record_busy_retry(attempt: int, delay_s: float) -> None:
    """The call's transaction lost a race and is retried whole: a span event; the events
    of the rolled-back attempt no longer count."""
    _restarted("cadence_store.busy_retry", {"attempt": attempt, "delay_s": round(delay_s, 6)})


def record_failover_rerun(retry: int, remaining_s: float) -> None:
    """The call lost its connection and is re-run (`failover.py`), `remaining_s` of its
    budget left: a span event."""
    left = round(max(remaining_s, 0.0), 3)
    _restarted("cadence_store.failover_rerun", {"retry": retry, "remaining_s": left})


def _restarted(event: str, attributes: dict[str, Any]) -> None:
    call = current_call.get()
    if call is not None:
        call.appended = 0
        call.span.add_event(event, attributes)


__all__ = [
    "IDLE_CALL",
    "NAME",
    "Call",
    "NoSpan",
    "Otel",
    "api",
    "count_committed",
    "current_call",
    "note_appended",
    "record_busy_retry",
    "record_failover_rerun",
]
