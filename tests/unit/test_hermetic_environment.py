"""The test command ignores the caller's HOME, XDG_* and CADENCE_STORE_* (tests/conftest.py).

`.ci/run` runs the whole suite with those set to unrelated values; this checks, in every
test process, what the suite's tests then see."""

from __future__ import annotations

import os
from pathlib import Path


def test_no_caller_variable_reaches_the_tests() -> None:
    leaked = sorted(key for key in os.environ if key.startswith(("XDG_", "CADENCE_STORE_")))
    assert leaked == []


def test_home_is_a_fresh_directory_of_the_test_session() -> None:
    home = Path(os.environ["HOME"])
    assert home.name.startswith("cadence-test-home-")
    assert home.is_dir()
    assert Path.home() == home
