"""The generated methods are what their script writes from today's signatures: a changed
signature without a re-run of `tools/generate_methods.py` fails here (and in CI's lint)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "generate_methods.py"


def _check(script: Path = SCRIPT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_generated_methods_are_up_to_date() -> None:
    result = _check()
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_stale_generated_module_is_reported(tmp_path: Path) -> None:
    """The check compares with what it would write: a method edited by hand is found (in
    a copy of the sources: the tree under test is never written)."""
    for part in ("tools", "cadence_store"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    generated = tmp_path / "cadence_store" / "store" / "run_store_calls.py"
    text = generated.read_text()
    edited = text.replace("in a read snapshot of its own", "in a snapshot, edited", 1)
    assert edited != text
    generated.write_text(edited)
    result = _check(tmp_path / "tools" / "generate_methods.py")
    assert result.returncode == 1
    removed = [line for line in result.stdout.splitlines() if line.startswith("-  ")]
    assert any("in a snapshot, edited" in line for line in removed), result.stdout
    assert "stale generated methods" in result.stderr
