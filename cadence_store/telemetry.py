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
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeVar, cast

from .errors import CadenceStoreError, LeaseFencedError
from .telemetry_state import IDLE_CALL, NAME, Call, Otel, api, current_call


def _api_installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:  # no `opentelemetry` namespace at all
        return False


F = TypeVar("F", bound=Callable[..., Any])
OTEL_AVAILABLE: Final = _api_installed()
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


def _mark_failed(span: Any, otel: Otel, error: BaseException) -> None:
    """Status ERROR and the error's code (its class name when it has none); never its
    message, which may quote stored values."""
    code = error.code if isinstance(error, CadenceStoreError) else type(error).__name__
    span.set_attribute("cadence_store.error_code", code)
    span.set_status(otel.error_status(code))


class _Span:
    """Opens the span of an outermost call and closes it with its outcome: `with` it
    around the call, which hands its result to `returned`; leaving the block closes
    the span, with the error that left it if one did."""

    __slots__ = ("call", "journal_write", "method", "otel", "result", "scope", "started", "token")

    def __init__(self, method: str, journal_write: bool) -> None:
        self.method = method
        self.journal_write = journal_write

    def __enter__(self) -> _Span:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        self.close(None if error is not None else self.result, error)

    def returned(self, result: Any) -> Any:
        """`result`, kept as the call's outcome for the span's close."""
        self.result = result
        return result

    def open(self, owner: Any, attributes: dict[str, Any], span_name: str) -> None:
        self.otel = otel = api()
        self.scope = otel.tracer.start_as_current_span(
            span_name, record_exception=False, set_status_on_exception=False
        )
        span = self.scope.__enter__()
        if span.is_recording():
            system = _db_system(owner)
            if system is not None:
                attributes["db.system"] = system
            span.set_attributes(attributes)
        self.call = Call(span, self.method)
        self.token = current_call.set(self.call)
        self.started = time.perf_counter()

    def close(self, result: Any, error: BaseException | None) -> None:
        call, otel = self.call, self.otel
        span = call.span
        current_call.reset(self.token)
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

    def opened(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Span:
        """The span of this call of `method`, open."""
        span = _Span(name, journal_write)
        span.open(args[0] if args else None, pick(args, kwargs), span_name)
        return span

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def traced_async(*args: Any, **kwargs: Any) -> Any:
            if current_call.get() is not None or api().idle():  # nested, or nothing records
                return await method(*args, **kwargs)
            with opened(args, kwargs) as span:
                return span.returned(await method(*args, **kwargs))

        return cast(F, traced_async)

    @functools.wraps(method)
    def traced_call(*args: Any, **kwargs: Any) -> Any:
        if current_call.get() is not None:  # nested in a call with a span, or in an idle one
            return method(*args, **kwargs)
        if api().idle():
            # asked once per public call: the API's getters read the environment each
            # time (measured: 3-15 us each, three levels deep in a transition)
            token = current_call.set(IDLE_CALL)
            try:
                return method(*args, **kwargs)
            finally:
                current_call.reset(token)
        with opened(args, kwargs) as span:
            return span.returned(method(*args, **kwargs))

    return cast(F, traced_call)


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
        if current_call.get() is not None or getattr(self, "_telemetry", None) is not None:
            return False
        if api().idle():
            # the calls in the block skip their own check (it reads the environment): a
            # provider is set up before the work it traces, not in the middle of it
            self._telemetry = current_call.set(IDLE_CALL)
            return True
        scope = api().tracer.start_as_current_span(
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
            with _closed_if_failing(self, open_span(self)):
                entered = await enter(self)
            return entered

        return aenter

    @functools.wraps(enter)
    def sync_enter(self: Any) -> Any:
        with _closed_if_failing(self, open_span(self)):
            entered = enter(self)
        return entered

    return sync_enter


def _leaving(leave: Callable[..., Any], asynchronous: bool) -> Callable[..., Any]:
    if asynchronous:

        @functools.wraps(leave)
        async def aexit(self: Any, *exc_info: Any) -> Any:
            with _closed_if_failing(self):
                result = await leave(self, *exc_info)
            _close_unit_of_work(self, exc_info[1])
            return result

        return aexit

    @functools.wraps(leave)
    def sync_exit(self: Any, *exc_info: Any) -> Any:
        with _closed_if_failing(self):
            result = leave(self, *exc_info)
        _close_unit_of_work(self, exc_info[1])
        return result

    return sync_exit


@contextlib.contextmanager
def _closed_if_failing(owner: Any, opened: bool = True) -> Iterator[None]:
    """End the unit of work's span with the error its `__enter__` or `__exit__` raises
    (when this call opened it), and let the error go on."""
    try:
        yield
    except BaseException as error:
        if opened:
            _close_unit_of_work(owner, error)
        raise


def _close_unit_of_work(owner: Any, error: BaseException | None) -> None:
    """End what `open_span` opened: the idle block's context (a token) or the span."""
    opened, owner._telemetry = getattr(owner, "_telemetry", None), None
    if opened is None:
        return
    if not isinstance(opened, tuple):
        with contextlib.suppress(ValueError):  # left in another context than entered
            current_call.reset(opened)
        return
    scope, span, started = opened
    otel = api()
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
    "opens_unit_of_work",
    "traced",
]
