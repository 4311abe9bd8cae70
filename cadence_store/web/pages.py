"""The HTML pages: the runs list, a run, the feed."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..journal.vocabulary import RUN_STATE_NAMES, STAGE_NAMES
from ..store.run_store import RunStore
from .reads import (
    EVENTS_PER_PAGE,
    CountsCache,
    RunFilters,
    event_page_number,
    feed_per_hour,
    read_feed_page,
    read_run_page,
    read_runs_page,
)
from .rendering import html_page


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
    """`/runs/{run_id}`: the run, its events (a thousand a page), its verification."""
    number = event_page_number(request.query_params.get("events"))
    page = read_run_page(store_of(request), request.path_params["run_id"], number)
    return html_page(request, "run.html", page=page, events_per_page=EVENTS_PER_PAGE)


def feed_page(request: Request) -> Response:
    """`/feed`: the newest feed items, each linking to its run."""
    items = read_feed_page(store_of(request))
    return html_page(request, "feed.html", items=items, per_hour=feed_per_hour(items))
