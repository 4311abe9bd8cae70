"""Fixtures of the web view's tests: the app over the test's store, and its client."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from starlette.testclient import TestClient

from cadence_store import RunStore
from cadence_store.web import create_app


@pytest.fixture
def client(run_store: RunStore) -> Iterator[TestClient]:
    """A client of `create_app(run_store)` (no auth)."""
    with TestClient(create_app(run_store), raise_server_exceptions=False) as test_client:
        yield test_client
