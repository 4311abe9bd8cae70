"""Responses: HTML from the templates (autoescaped), JSON, and the coded error page.

Stored text may hold lone surrogates, which UTF-8 cannot encode: they are written as
`\\udxxx` (as the CLI prints them), so such a value shows instead of breaking the page.
"""

from __future__ import annotations

import json
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import Response

from . import charts
from .formatting import format_time, json_text, short_hash, time_input_value

TEMPLATES = Environment(
    loader=PackageLoader("cadence_store.web", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
TEMPLATES.filters.update(time=format_time, short_hash=short_hash, json_text=json_text)
TEMPLATES.filters["time_input"] = time_input_value
TEMPLATES.globals["charts"] = charts


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")


def mount_path(request: Request) -> str:
    """Where a host mounted the app (`""` at the root): the pages' links start there."""
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def route_path(request: Request) -> str:
    """The request's path inside the app (without the host's mount path)."""
    path = request.url.path
    root = mount_path(request)
    return path[len(root) :] if root and path.startswith(root) else path


def html_page(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    """`template` rendered with `context`, the request and its script nonce."""
    html = TEMPLATES.get_template(template).render(
        request=request, nonce=request.state.nonce, base=mount_path(request), **context
    )
    return Response(_utf8(html), status_code=status_code, media_type="text/html; charset=utf-8")


def json_response(value: Any, status: int = 200) -> Response:
    """`value` as JSON; non-ASCII escaped, so lone surrogates stay valid JSON text."""
    return Response(
        json.dumps(value, ensure_ascii=True).encode("ascii"),
        status_code=status,
        media_type="application/json",
    )


def wants_json(request: Request) -> bool:
    """Whether the path is one of the JSON routes (`/api/...`, `/healthz`)."""
    path = route_path(request)
    return path.startswith("/api/") or path == "/healthz"


def error_response(request: Request, status: int, code: str, message: str) -> Response:
    """The coded error: `{"error": code, "message": ...}` for the JSON routes, else a
    page naming the code (never a stack trace)."""
    if wants_json(request):
        return json_response({"error": code, "message": message}, status)
    return html_page(request, "error.html", status, code=code, message=message, status=status)
