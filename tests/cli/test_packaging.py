"""What a user installing cadence-store expects of the package (issue 23).

The built wheel and sdist are checked by `.ci/run` (step `sdist_tests`): building them
takes a minute, too long for the test command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_python_dash_m_runs_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.sqlite3'}"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CADENCE_STORE_")}
    upgraded = subprocess.run(
        [sys.executable, "-m", "cadence_store", "upgrade", "--url", url],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )
    assert upgraded.returncode == 0, upgraded.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "cadence_store", "--help"],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Usage: cadence-store ")  # named as the script is


ROOT = Path(__file__).resolve().parents[2]
# the third-party modules the test suite imports beyond the runtime dependencies
TEST_MODULES = (
    "pytest", "xdist", "hypothesis", "rfc8785", "psycopg", "aiosqlite", "greenlet",
    "fastapi", "httpx", "opentelemetry.sdk", "build",
)  # fmt: skip


def _quickstart() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- quickstart:begin -->", 1)[1].split("<!-- quickstart:end -->", 1)[0]
    return [line for line in block.strip().splitlines() if not line.startswith("```")]


def test_the_quickstart_installs_the_runtime_then_the_test_tools() -> None:
    install, tests = _quickstart()
    # command 1: the package alone (no extra), then the demo; command 2: the dev extra
    assert ".venv/bin/pip install -e . &&" in install and install.endswith("cadence-store demo")
    assert "[" not in install
    assert ".venv/bin/pip install -q -e '.[dev]'" in tests and "-m pytest" in tests


def test_the_dev_extra_brings_what_the_tests_import() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dev = " ".join(project["optional-dependencies"]["dev"]).lower()
    names = {
        "xdist": "pytest-xdist", "opentelemetry.sdk": "opentelemetry-sdk",
        "greenlet": "sqlalchemy[asyncio]",
    }  # fmt: skip
    for module in TEST_MODULES:
        assert names.get(module, module) in dev, module
