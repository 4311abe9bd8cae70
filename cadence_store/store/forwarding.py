"""Methods made from another callable: named, documented and signed as that callable.

`RunStore` is made of its calls' descriptions and the repository's reads, and the async
classes of the sync ones; each made method must look like the one it stands for to
`help()`, the API docs and the telemetry (which reads the arguments by name).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def as_method(call: Callable[..., Any], model: Callable[..., Any], owner: str) -> None:
    """Name, document and sign `call` as `owner`'s method made from `model` (a method,
    or a function to which the method adds `self`)."""
    call.__name__ = model.__name__
    call.__qualname__ = f"{owner}.{model.__name__}"
    call.__doc__ = model.__doc__
    signature = inspect.signature(model)
    parameters = list(signature.parameters.values())
    if not parameters or parameters[0].name != "self":
        parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY), *parameters]
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=_described(signature.return_annotation)
    )


def _described(annotation: Any) -> Any:
    """`Call[X]` / `HostCall[X]` -> `X`: what a method made of a description returns."""
    if isinstance(annotation, str) and annotation.endswith("]") and "Call[" in annotation:
        return annotation[annotation.index("[") + 1 : -1]
    return annotation
