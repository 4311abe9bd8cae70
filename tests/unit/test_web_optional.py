"""The web view is optional: the core import never loads it or its extra."""

from __future__ import annotations

import subprocess
import sys


def test_import_cadence_store_loads_no_web_dependency() -> None:
    code = (
        "import sys, cadence_store, cadence_store.cli\n"
        "loaded = {'starlette', 'jinja2', 'uvicorn', 'cadence_store.web'} & set(sys.modules)\n"
        "sys.exit(f'loaded: {sorted(loaded)}' if loaded else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
