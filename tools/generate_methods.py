"""Write, as source, the store methods whose signature is another's.

As SQLAlchemy writes its asyncio proxies (its `tools/generate_proxy_methods.py`), each
module of `TARGETS` is written here, whole: one class of methods, each generated from
the signature and docstring of the function it stands for, read from that function's
source. A signature is stated once, where the work is; a generated method is a real `def`
that an editor, `help()`, `inspect.getsource` and mypy read as written, and the store's
class inherits it (`class RunStore(RunStoreCalls)`).

    python tools/generate_methods.py          # write the modules
    python tools/generate_methods.py --check  # exit 1 if one is not what it would write

CI's lint step runs `--check` (so does `tests/unit/test_generated_methods.py`).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = ROOT / "cadence_store/repository/run_repository.py"

RUN_STORE = ROOT / "cadence_store/store/run_store.py"
RUN_STORE_CALLS = ROOT / "cadence_store/store/run_store_calls.py"
ASYNC_STORE_CALLS = ROOT / "cadence_store/async_store/store_calls.py"
ASYNC_REPOSITORY_CALLS = ROOT / "cadence_store/async_store/repository_calls.py"
HOST_CALLS = ROOT / "cadence_store/store/host_calls.py"
FOLLOWING = ROOT / "cadence_store/store/following.py"


@dataclass(frozen=True)
class Source:
    """Where a method's signature and docstring are stated: a function of `path` (a
    method of `owner`, whose `self` the generated method keeps), `drop_first`: a function
    whose first parameter the generated method's `self` stands for."""

    path: Path
    name: str
    owner: str | None = None
    drop_first: bool = False


@dataclass(frozen=True)
class Method:
    """A generated method: `source`'s signature and docstring, `body` its code (a
    template: `{name}`, `{arguments}`: the call's arguments, passed on as received)."""

    source: Source
    body: str
    asynchronous: bool = False
    decorator: str | None = "@traced"


def repository(name: str) -> Source:
    """`RunRepository.name` where it is written: in its class, or in the first of its bases
    (depth first, as written) that defines it; read without importing the package, whose
    modules include the ones written here."""
    found = _defining_class(REPOSITORY, "RunRepository", name)
    if found is None:
        raise SystemExit(f"RunRepository.{name} is not defined in cadence_store/repository/")
    path, owner = found
    return Source(path, name, owner=owner)


def _defining_class(path: Path, owner: str, name: str) -> tuple[Path, str] | None:
    tree = ast.parse(path.read_text())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == owner)
    if any(isinstance(node, ast.FunctionDef) and node.name == name for node in cls.body):
        return path, owner
    imported = {
        alias.asname or alias.name: path.parent / f"{node.module}.py"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for alias in node.names
    }
    for base in cls.bases:
        if isinstance(base, ast.Name):
            module = imported.get(base.id, path)
            if module.exists():
                found = _defining_class(module, base.id, name)
                if found is not None:
                    return found
    return None


def run_store(name: str) -> Source:
    """`RunStore.name`: written in `run_store.py`, or generated in `run_store_calls.py`."""
    if f"    def {name}(" in RUN_STORE.read_text():
        return Source(RUN_STORE, name, owner="RunStore")
    return Source(RUN_STORE_CALLS, name, owner="RunStoreCalls")


def host_call(name: str) -> Source:
    return Source(HOST_CALLS, name)


def feed(name: str) -> Source:
    return Source(FOLLOWING, name, drop_first=True)


READS = (
    "status",
    "list_events",
    "rebuild_projection",
    "verify_integrity",
    "run_ids",
    "list_runs",
    "run_detail",
    "counts",
    "follower_position",
)
PLAIN_WRITES = ("bind_change", "renew_lease", "assert_lease", "recover_expired_leases")
HOST_CALLS_NAMES = (
    "bind_delivery_atomically",
    "bind_deliveries_atomically",
    "transition_atomically",
)
FEED = ("read_feed", "follow")

HOSTING_WRITE = (
    "return self.transactions.write_hosting(*host_calls.{name}({arguments}).synchronous())"
)
WRITE = "return self.transactions.write(lambda runs: runs.{name}({arguments}))"
READ = "return self.transactions.read(lambda runs: runs.{name}({arguments}))"
FEED_CALL = "return following.{name}(self.transactions, {arguments})"
ON_STORE = "return await self._on_store(RunStore.{name}, {arguments})"
HOST_CALL = "return await self._host_call(host_calls.{name}({arguments}))"
RUN_SYNC = "return await self.run_sync(lambda runs: runs.{name}({arguments}))"
# an iterable read once, as a list: every attempt of the call sees the same keys
STARTING_WRITE = "provisional_aliases = materialised(provisional_aliases)\n" + WRITE
REPLAYING_WRITE = """
def work(runs: RunRepository) -> RunProjection:
    return runs.{name}({arguments})

return self.transactions.write(work, replaying({kind}, run_id, operation_id, work))
"""


def run_store_methods() -> list[Method]:
    """`RunStore`'s: the host-code calls, the repository's replaying write, its plain
    writes and its reads (one snapshot each), and the feed."""
    return [
        *(Method(host_call(name), HOSTING_WRITE) for name in HOST_CALLS_NAMES),
        Method(repository("start_run"), STARTING_WRITE),
        Method(repository("bind_delivery"), REPLAYING_WRITE.replace("{kind}", "DELIVERY_BOUND")),
        *(Method(repository(name), WRITE) for name in PLAIN_WRITES),
        *(Method(repository(name), READ) for name in READS),
        *(Method(feed(name), FEED_CALL) for name in FEED),
    ]


LEASES = (
    "acquire_lease",
    "renew_lease",
    "assert_lease",
    "commit_lease",
    "interrupt_lease",
    "inspect_operation",
    "recover_expired_leases",
)
# `RunStore`'s methods that `AsyncRunStore` runs as they are, off the event loop
ASYNC_STORE_PROXIES = (
    "start_run",
    "bind_change",
    "bind_delivery",
    "transition",
    "transition_many",
    *LEASES,
    *READS,
    "read_feed",
)
# `RunStore`'s transparency-tree calls (the store's own: not calls of `RunRepository`)
TREE_CALLS = ("checkpoint", "verify_checkpoint", "inclusion_proof", "consistency_proof", "archive")


def async_store_methods() -> list[Method]:
    """`AsyncRunStore`'s: `RunStore`'s calls off the loop, the host-code calls in an async
    unit of work (their `write` awaited when it returns an awaitable)."""
    return [
        *(
            Method(run_store(name), ON_STORE, asynchronous=True)
            for name in (*ASYNC_STORE_PROXIES, *TREE_CALLS)
        ),
        *(Method(host_call(name), HOST_CALL, asynchronous=True) for name in HOST_CALLS_NAMES),
    ]


# `RunRepository`'s methods that `AsyncRunRepository` runs in its connection's greenlet:
# the store's, and the journal calls that say whether they appended
ASYNC_REPOSITORY_PROXIES = (
    *ASYNC_STORE_PROXIES,
    "bind_deliveries",
    "bind_deliveries_once",
    "transition_once",
    "transition_many_once",
    "record_position",
)


def async_repository_methods() -> list[Method]:
    """`AsyncRunRepository`'s: each `RunRepository` method through `run_sync`."""
    return [
        Method(repository(name), RUN_SYNC, asynchronous=True) for name in ASYNC_REPOSITORY_PROXIES
    ]


@dataclass(frozen=True)
class Target:
    """A generated module: its docstring and imports, its class (its docstring, and what
    the class it is the base of provides: `needs`, abstract) and the methods."""

    doc: str
    imports: str
    name: str
    class_doc: str
    needs: str
    methods: Callable[[], list[Method]]


TYPES = """
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from os import PathLike

from ..journal import OperationLease, OperationStatus, RunEvent, RunProjection
from ..journal.archives import ArchiveProgressCallback, ArchiveReport
from ..journal.feed import FeedItem
from ..journal.note_keys import SignerKey, VerifierKey
from ..journal.tree_views import (
    CheckpointReport, ConsistencyProof, InclusionProof, SignedCheckpoint
)
from ..journal.values import ApprovalProof, BindDelivery, Transition
from ..journal.views import RunDetail, StoreCounts
from ..repository.run_repository import DELIVERY_BOUND, RunRepository
from ..store.retention import DEFAULT_ARCHIVE_BATCH
from ..telemetry import traced
"""

RUN_STORE_NEEDS = '''
@property
@abstractmethod
def transactions(self) -> Transactions:
    """How the store's calls become transactions."""
'''
ASYNC_STORE_NEEDS = '''
@abstractmethod
async def _on_store(
    self, method: Callable[Concatenate[RunStore, P], R], /, *args: P.args, **kwargs: P.kwargs
) -> R:
    """`method` of the `RunStore` behind this one, run off the event loop."""

@abstractmethod
async def _host_call(self, host: HostCall[R]) -> R:
    """A call with host code, in an async unit of work of its own."""
'''
ASYNC_REPOSITORY_NEEDS = '''
@abstractmethod
async def run_sync(self, work: Callable[[RunRepository], R]) -> R:
    """`work(repository)` on the synchronous repository, inside this transaction."""
'''

TARGETS: dict[Path, Target] = {
    RUN_STORE_CALLS: Target(
        doc="`RunStore`'s calls whose signature is another's: the repository's reads and"
        " plain writes, the feed's, and the host-code calls of `host_calls.py`.",
        imports=TYPES
        + "from . import following, host_calls\n"
        + "from .following import DEFAULT_POLL_S, Stop\n"
        + "from .host_calls import HostWrite, materialised\n"
        + "from .retries import replaying\n"
        + "from .transactions import Transactions\n",
        name="RunStoreCalls",
        class_doc="The calls `RunStore` (its only subclass) makes of other signatures.",
        needs=RUN_STORE_NEEDS,
        methods=run_store_methods,
    ),
    ASYNC_STORE_CALLS: Target(
        doc="`AsyncRunStore`'s proxies: `RunStore`'s calls, run off the event loop, and the"
        " host-code calls of `host_calls.py`, in an async unit of work.",
        imports=TYPES
        + "from ..store import host_calls\n"
        + "from ..store.host_calls import HostCall, HostWrite\n"
        + "from ..store.run_store import RunStore\n",
        name="AsyncRunStoreCalls",
        class_doc="The coroutine methods `AsyncRunStore` (its only subclass) proxies.",
        needs=ASYNC_STORE_NEEDS,
        methods=async_store_methods,
    ),
    ASYNC_REPOSITORY_CALLS: Target(
        doc="`AsyncRunRepository`'s proxies: each `RunRepository` method through `run_sync`.",
        imports=TYPES,
        name="AsyncRunRepositoryCalls",
        class_doc="The coroutine methods `AsyncRunRepository` (its only subclass) proxies.",
        needs=ASYNC_REPOSITORY_NEEDS,
        methods=async_repository_methods,
    ),
}


def definition(source: Source, texts: dict[Path, str]) -> ast.FunctionDef:
    """The `def` of `source`, parsed from its module's text as this run writes it."""
    text = texts.get(source.path) or source.path.read_text()
    tree = ast.parse(text)
    scope: list[ast.stmt] = tree.body
    if source.owner is not None:
        owner = next(
            node
            for node in tree.body
            if isinstance(node, ast.ClassDef) and node.name == source.owner
        )
        scope = owner.body
    return next(
        node for node in scope if isinstance(node, ast.FunctionDef) and node.name == source.name
    )


def parameters(function: ast.FunctionDef, source: Source) -> tuple[str, str]:
    """The generated method's parameters (with `self`) and the arguments that pass them on."""
    signature = ast.arguments(
        posonlyargs=list(function.args.posonlyargs),
        args=list(function.args.args),
        vararg=function.args.vararg,
        kwonlyargs=list(function.args.kwonlyargs),
        kw_defaults=list(function.args.kw_defaults),
        kwarg=function.args.kwarg,
        defaults=list(function.args.defaults),
    )
    positional = signature.posonlyargs + signature.args
    if source.owner is not None or source.drop_first:
        positional.pop(0)  # its `self`, or the parameter `self` stands for
    passed = [argument.arg for argument in positional]
    if signature.vararg is not None:
        passed.append(f"*{signature.vararg.arg}")
    passed += [f"{argument.arg}={argument.arg}" for argument in signature.kwonlyargs]
    if signature.kwarg is not None:
        passed.append(f"**{signature.kwarg.arg}")
    signature.posonlyargs = []
    signature.args = [ast.arg("self"), *positional]
    return ast.unparse(signature), ", ".join(passed)


def result_of(annotation: ast.expr) -> ast.expr:
    """What the call returns: `X` of a description's `HostCall[X]` (what running it gives)."""
    if (
        isinstance(annotation, ast.Subscript)
        and isinstance(annotation.value, ast.Name)
        and annotation.value.id == "HostCall"
    ):
        return annotation.slice
    return annotation


def method_source(method: Method, texts: dict[Path, str]) -> str:
    function = definition(method.source, texts)
    signature, arguments = parameters(function, method.source)
    returns = "" if function.returns is None else f" -> {ast.unparse(result_of(function.returns))}"
    docstring = ast.get_docstring(function)
    if not docstring:
        raise SystemExit(
            f"{method.source.path}:{function.lineno}: {function.name} has no docstring"
        )
    quoted = '"""' + docstring.replace("\\", "\\\\").replace('"""', '\\"\\"\\"') + '"""'
    body = method.body.strip("\n").format(name=function.name, arguments=arguments)
    keyword = "async def" if method.asynchronous else "def"
    lines = [method.decorator] if method.decorator else []
    lines.append(f"{keyword} {function.name}({signature}){returns}:")
    lines.append(textwrap.indent(quoted, "    "))
    lines.append(textwrap.indent(body, "    "))
    return textwrap.indent("\n".join(lines), "    ") + "\n"


def generated(path: Path, texts: dict[Path, str]) -> str:
    """`path`'s module written anew (its unused imports dropped and the rest formatted, as
    `ruff check --fix` and `ruff format` do)."""
    target = TARGETS[path]
    methods = "\n".join(method_source(method, texts) for method in target.methods())
    doc = textwrap.fill(
        f"{target.doc} Generated by tools/generate_methods.py from the signatures it names:"
        " do not edit; after changing one, run `python tools/generate_methods.py` (CI runs"
        " it with `--check`).",
        width=92,
    )
    text = (
        f'"""{doc}\n"""\n\n'
        f"from __future__ import annotations\n{target.imports}\n"
        'P = ParamSpec("P")\nR = TypeVar("R")\n\n\n'
        f'class {target.name}(ABC):\n    """{target.class_doc}"""\n\n'
        + textwrap.indent(target.needs.strip("\n"), "    ")
        + "\n\n"
        + methods
        + f'\n\n__all__ = ["{target.name}"]\n'
    )
    return ruff(path, ruff(path, text, "check", "--fix-only", "--quiet"), "format")


def ruff(path: Path, text: str, *command: str) -> str:
    """`text` through `ruff COMMAND`, as if it were `path` (the project's settings)."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--stdin-filename", str(path), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"ruff {command[0]} failed on {path}:\n{result.stdout}{result.stderr}")
    return result.stdout


def differs(path: Path, text: str) -> bool:
    """Whether `path` holds other code than `text`: its syntax tree, docstrings included,
    not its layout (which `ruff format --check` judges, with whatever ruff is installed:
    the lowest one allowed may lay out a line otherwise)."""
    if not path.exists():
        return True
    return ast.dump(ast.parse(path.read_text())) != ast.dump(ast.parse(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/generate_methods.py")
    parser.add_argument("--check", action="store_true", help="report stale blocks, write nothing")
    options = parser.parse_args(argv)
    texts: dict[Path, str] = {}
    for path in TARGETS:  # in order: RunStore's first, the async store's read it
        texts[path] = generated(path, texts)
    stale = [path for path, text in texts.items() if differs(path, text)]
    if options.check:
        for path in stale:
            sys.stdout.writelines(
                difflib.unified_diff(
                    (path.read_text() if path.exists() else "").splitlines(keepends=True),
                    texts[path].splitlines(keepends=True),
                    str(path.relative_to(ROOT)),
                    f"{path.relative_to(ROOT)} (generated)",
                )
            )
        if stale:
            print("stale generated methods: run python tools/generate_methods.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(texts[path])
        print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
