"""Make `opentelemetry` look uninstalled in this process: the library as `pip install
cadence-store` installs it (without the `otel` extra, `cadence_store.telemetry` imports
nothing and instruments nothing).

Installed before `cadence_store` is imported: by `benchmarks/__init__.py` when the
environment says `CADENCE_BENCH_OTEL=absent` (inherited by every process a benchmark
starts), and by `telemetry_worker.py` for its `none` and `before` variants.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from typing import Any, Final

ENVIRONMENT: Final = "CADENCE_BENCH_OTEL"  # "absent": hidden; anything else: as installed
ABSENT: Final = "absent"


class _NoOpentelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def hide_opentelemetry() -> None:
    if not any(isinstance(finder, _NoOpentelemetry) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NoOpentelemetry())


def hidden_by_environment() -> bool:
    return os.environ.get(ENVIRONMENT) == ABSENT


def rerun_as_installed(module: str, arguments: list[str]) -> None:
    """Run `python -m module arguments` again in a process where opentelemetry is hidden
    (replacing this one), unless it is hidden here already or `--otel` was given: the
    figures are the library's as installed without the `otel` extra (what the extra
    costs is `benchmarks.telemetry`'s, and `store_url_otel`'s in `sqlite_gap --processes`).
    Only for a benchmark started as a program: a test calling `main(argv)` is never
    replaced."""
    if hidden_by_environment() or "--otel" in arguments:
        return
    os.environ[ENVIRONMENT] = ABSENT
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", module, *arguments])


def opentelemetry_importable() -> bool:
    """Whether this process's `cadence_store` records telemetry when a provider is set."""
    from cadence_store import telemetry

    return bool(telemetry.OTEL_AVAILABLE)
