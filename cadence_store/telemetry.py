"""Traces and metrics of the public calls, with the `otel` extra (opentelemetry-api).

`traced` (a method decorator) gives every public method of `RunStore`, `AsyncRunStore`,
`RunRepository`, `AsyncRunRepository` a span named `cadence_store.<method>` (tracer
`cadence_store`), a child of the caller's current span, and `opens_unit_of_work` /
`closes_unit_of_work` a unit of work one span from its `with` to its end
(`cadence_store.unit_of_work`). Attributes: `db.system`,
`cadence_store.run_id`, `cadence_store.operation_id`, `cadence_store.replayed` (journal
writes: no new event was appended), and on a failure `cadence_store.error_code` with
status ERROR. Only the outermost call of the library has a span: `RunStore.transition`
calling `RunRepository.transition` is one span. Metrics (meter `cadence_store`): counters
`cadence_store.events.appended` (events whose transaction committed, by the method that
appended them), `cadence_store.leases.fenced`, histogram
`cadence_store.call.duration` (seconds, attribute `method`).

Without opentelemetry-api installed nothing is imported and the decorators return the
methods as they are: a call costs what it did before. With the API but no SDK set up (the
API's proxy or no-op providers), a call checks that and skips its span and measurements;
the costs are measured by `python -m benchmarks.telemetry`.

Never an attribute from a payload, a lease token or a URL: only ids the caller chose
(run and operation ids), the dialect's name and error codes.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from types import FunctionType
from typing import Any, Final, TypeVar, cast

from .errors import CadenceStoreError, LeaseFencedError


def _api_installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:  # no `opentelemetry` namespace at all
        return False


C = TypeVar("C", bound=type)
F = TypeVar("F", bound=Callable[..., Any])
OTEL_AVAILABLE: Final = _api_installed()
NAME: Final = "cadence_store"
UNIT_OF_WORK_SPAN: Final = "cadence_store.unit_of_work"
# the calls whose span says whether they appended an event (`cadence_store.replayed`)
JOURNAL_WRITES: Final = frozenset(
    {
        "start_run",
        "bind_change",
        "bind_delivery",
        "bind_delivery_atomically",
        "bind_deliveries",
        "bind_deliveries_atomically",
        "bind_deliveries_once",
        "transition",
        "transition_atomically",
        "transition_once",
        "transition_many",
        "transition_many_once",
    }
)


class _Call:
    """The library call in progress (outermost only) and what it did so far."""

    __slots__ = ("appended", "method", "span")

    def __init__(self, span: Any, method: str | None = None) -> None:
        self.span = span
        self.method = method  # None while nothing records
        self.appended = 0


class _NoSpan:
    """The span of a call while nothing records: its events go nowhere."""

    def add_event(self, *_args: Any) -> None:
        return None


_current: ContextVar[_Call | None] = ContextVar("cadence_store_call", default=None)
# the call in progress while no provider records (shared: nothing reads what it counts)
_IDLE_CALL: Final = _Call(_NoSpan())


class _Otel:
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


_otel: _Otel | None = None


def _api() -> _Otel:
    global _otel
    if _otel is None:
        _otel = _Otel()
    return _otel


# -- what the library's internals tell the current call ------------------------------------


def note_appended(count: int = 1) -> str | None:
    """`count` events appended in the current call: its method, for `count_committed`
    once their transaction commits (None while nothing records)."""
    call = _current.get()
    if call is None:
        return None
    call.appended += count
    return call.method


def count_committed(appended: Mapping[str, int]) -> None:
    """A transaction committed the events its calls appended (method -> count): only now
    are they counted, so that a rolled-back unit of work, a failed commit or a host's
    rollback counts nothing."""
    counter = _api().appended
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
    call = _current.get()
    if call is not None:
        call.appended = 0
        call.span.add_event(event, attributes)


# -- spans -----------------------------------------------------------------------------


def _db_system(owner: Any) -> str | None:
    """The dialect's name of a store, repository or unit of work (its `dialect_name`),
    known without a round trip."""
    name = getattr(owner, "dialect_name", None)
    return None if name is None else str(name)


def _id_of(value: Any, key: str, alias: str) -> str | None:
    found = (
        value.get(key, value.get(alias))
        if isinstance(value, Mapping)
        else getattr(value, key, None)
    )
    return found if isinstance(found, str) else None


def _picker(
    signature: inspect.Signature,
) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, str]]:
    """Reads the run id and operation id of a call from its arguments (or its lease's)."""
    names = [
        name
        for name, parameter in signature.parameters.items()
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]

    def position(name: str) -> int | None:
        return names.index(name) if name in names else None

    where = {name: position(name) for name in ("run_id", "operation_id", "lease")}

    def argument(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        index = where[name]
        if name in kwargs:
            return kwargs[name]
        return args[index] if index is not None and index < len(args) else None

    def pick(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, str]:
        attributes: dict[str, str] = {}
        lease = argument("lease", args, kwargs)
        run_id = argument("run_id", args, kwargs)
        operation_id = argument("operation_id", args, kwargs)
        if lease is not None:  # its ids only: never its token
            run_id = run_id if isinstance(run_id, str) else _id_of(lease, "run_id", "runId")
            if not isinstance(operation_id, str):
                operation_id = _id_of(lease, "operation_id", "operationId")
        if isinstance(run_id, str):
            attributes["cadence_store.run_id"] = run_id
        if isinstance(operation_id, str):
            attributes["cadence_store.operation_id"] = operation_id
        return attributes

    return pick


def _mark_failed(span: Any, otel: _Otel, error: BaseException) -> None:
    """Status ERROR and the error's code (its class name when it has none); never its
    message, which may quote stored values."""
    code = error.code if isinstance(error, CadenceStoreError) else type(error).__name__
    span.set_attribute("cadence_store.error_code", code)
    span.set_status(otel.error_status(code))


class _Span:
    """Opens the span of an outermost call and closes it with its outcome."""

    __slots__ = ("call", "journal_write", "method", "otel", "scope", "started", "token")

    def __init__(self, method: str, journal_write: bool) -> None:
        self.method = method
        self.journal_write = journal_write

    def open(self, owner: Any, attributes: dict[str, Any], span_name: str) -> None:
        self.otel = otel = _api()
        self.scope = otel.tracer.start_as_current_span(
            span_name, record_exception=False, set_status_on_exception=False
        )
        span = self.scope.__enter__()
        if span.is_recording():
            system = _db_system(owner)
            if system is not None:
                attributes["db.system"] = system
            span.set_attributes(attributes)
        self.call = _Call(span, self.method)
        self.token = _current.set(self.call)
        self.started = time.perf_counter()

    def close(self, result: Any, error: BaseException | None) -> None:
        call, otel = self.call, self.otel
        span = call.span
        _current.reset(self.token)
        method = {"method": self.method}
        try:
            if error is not None:
                _mark_failed(span, otel, error)
                if isinstance(error, LeaseFencedError):
                    otel.fenced.add(1, method)
            else:
                if self.journal_write:
                    span.set_attribute("cadence_store.replayed", call.appended == 0)
                run_id = getattr(result, "run_id", None)
                if isinstance(run_id, str):
                    span.set_attribute("cadence_store.run_id", run_id)
            otel.duration.record(time.perf_counter() - self.started, method)
        finally:
            self.scope.__exit__(None, None, None)


def traced(method: F) -> F:
    """A public call's span (`cadence_store.<name>`; the module's rules): `method` wrapped
    by `functools.wraps`, so `__wrapped__` leads to it. Without the API, `method` itself;
    a stream (a generator) too, whose span would end before it is read."""
    if not OTEL_AVAILABLE or inspect.isgeneratorfunction(method):
        return method
    if inspect.isasyncgenfunction(method):
        return method
    name = method.__name__
    span_name = f"{NAME}.{name}"
    journal_write = name in JOURNAL_WRITES
    pick = _picker(inspect.signature(method))

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def traced_async(*args: Any, **kwargs: Any) -> Any:
            if _current.get() is not None or _api().idle():  # nested, or nothing records
                return await method(*args, **kwargs)
            span = _Span(name, journal_write)
            span.open(args[0] if args else None, pick(args, kwargs), span_name)
            try:
                result = await method(*args, **kwargs)
            except BaseException as error:
                span.close(None, error)
                raise
            span.close(result, None)
            return result

        return cast(F, traced_async)

    @functools.wraps(method)
    def traced_call(*args: Any, **kwargs: Any) -> Any:
        if _current.get() is not None:  # nested in a call with a span, or in an idle one
            return method(*args, **kwargs)
        if _api().idle():
            # asked once per public call: the API's getters read the environment each
            # time (measured: 3-15 us each, three levels deep in a transition)
            token = _current.set(_IDLE_CALL)
            try:
                return method(*args, **kwargs)
            finally:
                _current.reset(token)
        span = _Span(name, journal_write)
        span.open(args[0] if args else None, pick(args, kwargs), span_name)
        try:
            result = method(*args, **kwargs)
        except BaseException as error:
            span.close(None, error)
            raise
        span.close(result, None)
        return result

    return cast(F, traced_call)


def instrument(cls: C) -> C:
    """`traced` on each public method of `cls` (`RunRepository`, whose methods are spread
    over its parts); the stores and units of work decorate their methods one by one."""
    if not OTEL_AVAILABLE:
        return cls
    for name in dir(cls):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, FunctionType):
            setattr(cls, name, traced(raw))
    return cls


def opens_unit_of_work(enter: F) -> F:
    """A unit of work's span, from its `__enter__` (`__aenter__`) to the end of its block,
    committed or rolled back (`closes_unit_of_work` on its `__exit__`); the calls inside
    are its children. None when the unit of work is a library call's own (`RunStore` runs
    some calls in one)."""
    if not OTEL_AVAILABLE:
        return enter
    return cast(F, _entering(enter, inspect.iscoroutinefunction(enter)))


def closes_unit_of_work(leave: F) -> F:
    """The end of the span `opens_unit_of_work` began."""
    if not OTEL_AVAILABLE:
        return leave
    return cast(F, _leaving(leave, inspect.iscoroutinefunction(leave)))


def _entering(enter: Callable[..., Any], asynchronous: bool) -> Callable[..., Any]:
    def open_span(self: Any) -> bool:
        # not nested in a call, nor a re-entry (which fails: the open one's is kept)
        if _current.get() is not None or getattr(self, "_telemetry", None) is not None:
            return False
        if _api().idle():
            # the calls in the block skip their own check (it reads the environment): a
            # provider is set up before the work it traces, not in the middle of it
            self._telemetry = _current.set(_IDLE_CALL)
            return True
        scope = _api().tracer.start_as_current_span(
            UNIT_OF_WORK_SPAN, record_exception=False, set_status_on_exception=False
        )
        span = scope.__enter__()
        if span.is_recording():
            system = _db_system(self)
            if system is not None:
                span.set_attribute("db.system", system)
        self._telemetry = (scope, span, time.perf_counter())
        return True

    if asynchronous:

        @functools.wraps(enter)
        async def aenter(self: Any) -> Any:
            opened = open_span(self)
            try:
                return await enter(self)
            except BaseException as error:
                if opened:
                    _close_unit_of_work(self, error)
                raise

        return aenter

    @functools.wraps(enter)
    def sync_enter(self: Any) -> Any:
        opened = open_span(self)
        try:
            return enter(self)
        except BaseException as error:
            if opened:
                _close_unit_of_work(self, error)
            raise

    return sync_enter


def _leaving(leave: Callable[..., Any], asynchronous: bool) -> Callable[..., Any]:
    if asynchronous:

        @functools.wraps(leave)
        async def aexit(self: Any, *exc_info: Any) -> Any:
            try:
                result = await leave(self, *exc_info)
            except BaseException as error:
                _close_unit_of_work(self, error)
                raise
            _close_unit_of_work(self, exc_info[1])
            return result

        return aexit

    @functools.wraps(leave)
    def sync_exit(self: Any, *exc_info: Any) -> Any:
        try:
            result = leave(self, *exc_info)
        except BaseException as error:
            _close_unit_of_work(self, error)
            raise
        _close_unit_of_work(self, exc_info[1])
        return result

    return sync_exit


def _close_unit_of_work(owner: Any, error: BaseException | None) -> None:
    """End what `open_span` opened: the idle block's context (a token) or the span."""
    opened, owner._telemetry = getattr(owner, "_telemetry", None), None
    if opened is None:
        return
    if not isinstance(opened, tuple):
        with contextlib.suppress(ValueError):  # left in another context than entered
            _current.reset(opened)
        return
    scope, span, started = opened
    otel = _api()
    method = {"method": "unit_of_work"}
    try:
        if error is not None:
            _mark_failed(span, otel, error)
        otel.duration.record(time.perf_counter() - started, method)
    finally:
        scope.__exit__(None, None, None)


__all__ = [
    "JOURNAL_WRITES",
    "OTEL_AVAILABLE",
    "closes_unit_of_work",
    "count_committed",
    "instrument",
    "opens_unit_of_work",
    "note_appended",
    "record_busy_retry",
    "record_failover_rerun",
    "traced",
]
