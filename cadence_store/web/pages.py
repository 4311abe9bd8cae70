"""The HTML pages: the runs list, a run, the feed."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..journal.vocabulary import RUN_STATE_NAMES, STAGE_NAMES
from ..store.run_store import RunStore
from .reads import CountsCache, RunFilters, feed_per_hour, read_feed_page, read_runs_page
from .receipt_pages import OperationCursor
from .rendering import html_page
from .run_page import EventCursor, read_run_page


def store_of(request: Request) -> RunStore:
    """The store the app was made for."""
    store: RunStore = request.app.state.store
    return store


def counts_of(request: Request) -> CountsCache:
    """The app's cache of the store's counts."""
    counts: CountsCache = request.app.state.counts
    return counts


def runs_page(request: Request) -> Response:
    """`/`: runs, filtered, 50 a page, with the counts by state."""
    page = read_runs_page(
        store_of(request), RunFilters.from_query(request.query_params), counts_of(request)
    )
    return html_page(
        request,
        "runs.html",
        page=page,
        states=sorted(RUN_STATE_NAMES),
        stages=sorted(STAGE_NAMES),
    )


def run_page(request: Request) -> Response:
    """`/runs/{run_id}`: the run, a page of its events (`?after=` / `?before=` a
    sequence) and of its receipts (`?operations_after=` / `?operations_before=` an
    operation id), the whole chain's verification."""
    page = read_run_page(
        store_of(request),
        request.path_params["run_id"],
        EventCursor.from_query(request.query_params),
        OperationCursor.from_query(request.query_params),
    )
    return html_page(request, "run.html", page=page)


def feed_page(request: Request) -> Response:
    """`/feed`: the newest feed items, each linking to its run."""
    items = read_feed_page(store_of(request))
    return html_page(request, "feed.html", items=items, per_hour=feed_per_hour(items))
