"""A read-only web view of a store: `create_app(store, *, auth=None)` is a Starlette ASGI
app a host mounts (or `cadence-store serve` runs).

Needs the `web` extra (Starlette, Jinja2, uvicorn); `import cadence_store` never imports
this package. Every page is a GET (HEAD too) read in one read snapshot of the store (on
its `read_bind` when it has one); anything else is refused with 405.
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
