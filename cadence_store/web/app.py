"""`create_app`: the routes, and the rules every request goes through — GET and HEAD
only, the host's `auth`, the security headers, coded errors instead of stack traces."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import CadenceStoreError, InvalidInputError, RunNotFoundError, StoreUnavailableError
from ..store.run_store import RunStore
from . import api, pages
from .reads import COUNTS_MAX_AGE_S, CountsCache
from .rendering import error_response

logger = logging.getLogger(__name__)

Auth = Callable[[Request], bool]
READ_METHODS = frozenset({"GET", "HEAD"})


def content_security_policy(nonce: str) -> str:
    """Nothing from elsewhere, no inline script or style but the page's own (by nonce)."""
    return (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; img-src 'self' data:; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )


class ReadOnlyGate(BaseHTTPMiddleware):
    """405 for anything but GET/HEAD, 403 when `auth` refuses, a coded 500 for a failure
    nobody expected, and the security headers on every response."""

    def __init__(self, app: object, auth: Auth | None) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.auth = auth

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        """Let a read through, or answer it here."""
        request.state.nonce = secrets.token_urlsafe(16)
        if request.method not in READ_METHODS:
            response = error_response(
                request, 405, "method-not-allowed", "this view only reads: GET and HEAD"
            )
            response.headers["Allow"] = "GET, HEAD"
        elif self.auth is not None and not self.auth(request):
            response = error_response(request, 403, "access-refused", "not allowed to read")
        else:
            try:
                response = await call_next(request)
            except Exception:
                logger.exception("cadence-store web: %s %s failed", request.method, request.url)
                response = error_response(request, 500, "internal-error", "the page failed")
        response.headers["Content-Security-Policy"] = content_security_policy(request.state.nonce)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Cache-Control", "no-store")
        return response


def _status_of(error: CadenceStoreError) -> int:
    if isinstance(error, RunNotFoundError):
        return 404
    if isinstance(error, InvalidInputError):
        return 400
    if isinstance(error, StoreUnavailableError):
        return 503
    return 500


async def _coded_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, CadenceStoreError)
    return error_response(request, _status_of(error), error.code, type(error).__name__)


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    code = "not-found" if error.status_code == 404 else f"http-{error.status_code}"
    return error_response(request, error.status_code, code, str(error.detail))


def create_app(
    store: RunStore, *, auth: Auth | None = None, counts_max_age_s: float = COUNTS_MAX_AGE_S
) -> Starlette:
    """The read-only web view of `store` as an ASGI app. `auth`: the host's check of a
    request (True lets it read; False answers 403). `counts_max_age_s`: how long the runs
    list shows the same counts before it counts again (0: on every page)."""
    routes = [
        Route("/", pages.runs_page, methods=["GET"]),
        Route("/runs/{run_id:path}", pages.run_page, methods=["GET"]),
        Route("/feed", pages.feed_page, methods=["GET"]),
        Route("/api/runs", api.runs, methods=["GET"]),
        Route("/api/runs/{run_id:path}", api.run, methods=["GET"]),
        Route("/healthz", api.health, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(ReadOnlyGate, auth=auth)],
        exception_handlers={CadenceStoreError: _coded_error, HTTPException: _http_error},
    )
    app.state.store = store
    app.state.counts = CountsCache(counts_max_age_s)
    return app
