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
from cadence_store import telemetry
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
from cadence_store import telemetry
assert telemetry.OTEL_AVAILABLE and hasattr(RunStore.transition, "__wrapped__")
assert telemetry._api().idle()  # no provider set up: spans and measurements skipped
from opentelemetry import trace
assert not trace.get_current_span().get_span_context().is_valid
print("idle")
""",
        tmp_path,
    )
    assert out.strip() == "idle"
