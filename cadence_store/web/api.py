"""The JSON twins of the pages (`/api/runs`, `/api/runs/{run_id}`) and `/healthz`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import CadenceStoreError
from ..storage.failures import READ, database_errors
from ..storage.schema import assert_at_head
from .pages import counts_of, store_of
from .reads import RunFilters, read_runs_page
from .receipt_pages import OperationCursor
from .rendering import json_response
from .run_page import EventCursor, read_run_page


def runs(request: Request) -> Response:
    """`/api/runs`: what `/` shows, with the same query parameters."""
    page = read_runs_page(
        store_of(request), RunFilters.from_query(request.query_params), counts_of(request)
    )
    return json_response(
        {
            "runs": [run.to_dict() for run in page.runs],
            "next": None
            if page.next_after is None
            else page.filters.page_query(after=page.next_after),
            "previous": None
            if page.previous_before is None
            else page.filters.page_query(before=page.previous_before),
            "counts": page.counts.to_dict(),
            "countedAt": page.counted_at,
        }
    )


def run(request: Request) -> Response:
    """`/api/runs/{run_id}`: what the run's page shows (`?after=` / `?before=` a
    sequence: that page of events; `?operations_after=` / `?operations_before=` an
    operation id: that page of receipts)."""
    page = read_run_page(
        store_of(request),
        request.path_params["run_id"],
        EventCursor.from_query(request.query_params),
        OperationCursor.from_query(request.query_params),
    )
    verification: dict[str, Any] = {"intact": page.verification.intact}
    if not page.verification.intact:
        verification.update(code=page.verification.code, sequence=page.verification.sequence)
    return json_response(
        {
            "run": page.detail.to_dict(),
            "events": [event.to_dict() for event in page.events],
            "eventPage": page.window.to_dict(),
            "operationPage": page.receipt_window.to_dict(),
            "verification": verification,
            "checkpoint": None if page.checkpoint is None else page.checkpoint.to_json(),
        }
    )


def health(request: Request) -> Response:
    """`/healthz`: 200 when the database answers and its schema is at head, else 503
    with the code."""
    store = store_of(request)
    try:
        with database_errors(READ), store.engine.connect() as connection:
            assert_at_head(connection, store.schema)
            connection.rollback()
    except CadenceStoreError as error:
        return json_response({"ready": False, "code": error.code}, 503)
    return json_response({"ready": True})
