"""Telemetry is optional: without opentelemetry nothing is imported or wrapped; with the
API alone (no SDK set up) a call records nothing. Each case in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

HIDE_OTEL = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Hide())
"""

LIFECYCLE = """
import cadence_store
from cadence_store import RunStore, AsyncRunStore, RunRepository, UnitOfWork
url = "sqlite:///" + sys.argv[1]
cadence_store.upgrade(url)
with RunStore(url, root_hash="ab" * 32) as store:
    run = store.start_run("abel-implement", change="c", operation_id="s")
    store.transition(run.run_id, "validating-delivery", operation_id="t")
    with store.unit_of_work() as uow:
        uow.runs.transition(run.run_id, "ready", operation_id="u")
    assert [e.sequence for e in store.list_events(run.run_id)] == [1, 2, 3]
"""


def _python(code: str, tmp_path: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(tmp_path / "store.sqlite3")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_without_opentelemetry_nothing_is_imported_or_wrapped(tmp_path):
    out = _python(
        "import sys\n"
        + HIDE_OTEL
        + LIFECYCLE
        + """
from cadence_store import telemetry, telemetry_state
assert not telemetry.OTEL_AVAILABLE
assert not [name for name in sys.modules if name.startswith("opentelemetry")]
for cls in (RunStore, AsyncRunStore, RunRepository):
    assert not hasattr(cls.transition, "__wrapped__"), cls  # the method itself
assert UnitOfWork.__enter__.__qualname__ == "UnitOfWork.__enter__"
print("plain")
""",
        tmp_path,
    )
    assert out.strip() == "plain"


def test_with_the_api_alone_calls_record_nothing(tmp_path):
    out = _python(
        "import sys\n"
        + LIFECYCLE
        + """
from cadence_store import telemetry, telemetry_state
assert telemetry.OTEL_AVAILABLE and hasattr(RunStore.transition, "__wrapped__")
assert telemetry_state.api().idle()  # no provider set up: spans and measurements skipped
from opentelemetry import trace
assert not trace.get_current_span().get_span_context().is_valid
print("idle")
""",
        tmp_path,
    )
    assert out.strip() == "idle"


def test_an_idle_unit_of_work_checks_once_and_leaves_the_context_as_it_was(tmp_path):
    """Inside a unit of work entered while nothing records, its calls skip their own
    check; after its end (committed, rolled back, re-entered by mistake, sync or async)
    a provider set up then records the next calls, and a re-entry keeps the open unit
    of work's span."""
    out = _python(
        "import sys, asyncio\n"
        + LIFECYCLE
        + """
from cadence_store import telemetry, telemetry_state
assert telemetry_state.api().idle()
with RunStore(url, root_hash="ab" * 32) as store:
    with store.unit_of_work() as uow:
        assert telemetry_state.current_call.get() is telemetry_state.IDLE_CALL
        uow.runs.transition(run.run_id, "paused", operation_id="idle-1", code="x")
    assert telemetry_state.current_call.get() is None
    try:
        with store.unit_of_work() as uow:
            uow.runs.transition(run.run_id, "ready", operation_id="idle-2")
            raise KeyError("rolled back")
    except KeyError:
        pass
    assert telemetry_state.current_call.get() is None
    uow = store.unit_of_work()
    with uow:
        try:
            with uow:  # a re-entry fails, and leaves the open one's block as it is
                raise AssertionError("re-entered")
        except cadence_store.StoreUnavailableError as error:
            assert error.code == "unit-of-work-not-reentrant"
        assert telemetry_state.current_call.get() is telemetry_state.IDLE_CALL
    assert telemetry_state.current_call.get() is None

    async def in_async():
        async_url = url.replace("sqlite:", "sqlite+aiosqlite:")
        async with AsyncRunStore(async_url, root_hash="ab" * 32) as astore:
            async with astore.unit_of_work() as auow:
                assert telemetry_state.current_call.get() is telemetry_state.IDLE_CALL
                await auow.runs.transition(run.run_id, "ready", operation_id="idle-3")
            assert telemetry_state.current_call.get() is None

    asyncio.run(in_async())
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    uow = store.unit_of_work()
    with uow:
        uow.runs.transition(run.run_id, "paused", operation_id="traced-1", code="y")
        try:
            with uow:  # the open unit of work's span is kept, and ended once
                raise AssertionError("re-entered")
        except cadence_store.StoreUnavailableError:
            pass
    store.transition(run.run_id, "ready", operation_id="traced-2")
    names = [span.name for span in exporter.get_finished_spans()]
    assert names == [
        "cadence_store.transition",
        "cadence_store.unit_of_work",
        "cadence_store.transition",
    ], names
print("checked once")
""",
        tmp_path,
    )
    assert out.strip() == "checked once"
