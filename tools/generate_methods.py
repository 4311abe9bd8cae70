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
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from method_sources import (
    ASYNC_CALLS,
    ROOT,
    RUN_STORE_CALLS,
    Source,
    definition,
    feed,
    host_call,
    repository,
    run_store,
)


@dataclass(frozen=True)
class Method:
    """A generated method: `source`'s signature, `body` its code (a template: `{name}`,
    `{arguments}`: the call's arguments, passed on as received) and `doc` its docstring
    (a template of `{name}`: one line naming the call it runs and how, whose full text is
    stated once, at the source; None: the source's docstring, where the source is not a
    public method, e.g. a function of `host_calls.py`)."""

    source: Source
    body: str
    doc: str | None
    asynchronous: bool = False
    decorator: str | None = "@traced"
    returns: str | None = None  # what it returns, if not what the source returns


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


# the generated docstrings: what runs the call, the rest as its source states it
SAME = "(same arguments, same result)"
WRITE_DOC = f"`RunRepository.{{name}}` in a write transaction of its own, retried {SAME}."
REPLAYING_WRITE_DOC = (
    f"`RunRepository.{{name}}` in a write transaction of its own, retried {SAME}; a re-run"
    " after a lost connection replays what the lost try committed."
)
READ_DOC = f"`RunRepository.{{name}}` in a read snapshot of its own {SAME}."
ON_STORE_DOC = f"Await `RunStore.{{name}}`, run off the event loop {SAME}."
HOST_CALL_DOC = (
    f"Await `RunStore.{{name}}`, in an async unit of work of its own {SAME}; `write`"
    " gets its `AsyncSession`, and what it returns is awaited if it is awaitable."
)
# closed at once with the outer one: an inner async generator left to the collector
# is closed later, by a task of the loop's, and would hold the follower's name till then
FOLLOW_ASYNC = """
async with aclosing(self._follow({arguments})) as items:
    async for item in items:
        yield item
"""
FOLLOW_ASYNC_DOC = (
    "`RunStore.follow` as an async iterator (`async for`; see `following.py`): leaving the"
    " loop (or cancelling it) stops the follower."
)
RUN_SYNC_DOC = f"Await `RunRepository.{{name}}` in this transaction (`run_sync`) {SAME}."


def run_store_methods(_texts: dict[Path, str]) -> list[Method]:
    """`RunStore`'s: the host-code calls, the repository's replaying write, its plain
    writes and its reads (one snapshot each), and the feed."""
    replaying = REPLAYING_WRITE.replace("{kind}", "DELIVERY_BOUND")
    return [
        *(Method(host_call(name), HOSTING_WRITE, None) for name in HOST_CALLS_NAMES),
        Method(repository("start_run"), STARTING_WRITE, WRITE_DOC),
        Method(repository("bind_delivery"), replaying, REPLAYING_WRITE_DOC),
        *(Method(repository(name), WRITE, WRITE_DOC) for name in PLAIN_WRITES),
        *(Method(repository(name), READ, READ_DOC) for name in READS),
        *(Method(feed(name), FEED_CALL, None) for name in FEED),
    ]


# the calls `AsyncRunStore` and `AsyncRunRepository` share, one coroutine each: the same
# signature in `RunStore` and `RunRepository` (checked), awaited on the one behind them
ASYNC_SHARED = (
    "start_run",
    "bind_change",
    "bind_delivery",
    "transition",
    "transition_many",
    "renew_lease",
    "assert_lease",
    "commit_lease",
    "interrupt_lease",
    "recover_expired_leases",
    *READS,
    "read_feed",
)
# their calls of another signature in each: `RunStore`'s take no `lease_token` / `expire`
ASYNC_OWN = ("acquire_lease", "inspect_operation")
# `RunStore`'s transparency-tree calls (the store's own: not calls of `RunRepository`)
TREE_CALLS = (
    "checkpoint",
    "verify_checkpoint",
    "inclusion_proof",
    "consistency_proof",
    "archive",
)
ON_SYNC = "return await self._on_sync(lambda calls: calls.{name}({arguments}))"
ON_SYNC_DOC = f"Await the synchronous `{{name}}` behind this one {SAME}."


def shared(name: str, texts: dict[Path, str]) -> Source:
    """`RunRepository.name`, whose signature `RunStore.name` states as well (as this run
    writes it: a signature changed at the repository is compared with its new copy)."""
    store, journal = definition(run_store(name), texts), definition(repository(name), texts)
    if ast.dump(store.args) != ast.dump(journal.args) or (
        ast.dump(store.returns or ast.Constant(None))
        != ast.dump(journal.returns or ast.Constant(None))
    ):
        raise SystemExit(f"RunStore.{name} and RunRepository.{name} differ: not in ASYNC_SHARED")
    return repository(name)


def async_journal_methods(texts: dict[Path, str]) -> list[Method]:
    """The shared coroutines, each through `_on_sync`."""
    return [
        Method(shared(name, texts), ON_SYNC, ON_SYNC_DOC, asynchronous=True)
        for name in ASYNC_SHARED
    ]


def async_store_methods(_texts: dict[Path, str]) -> list[Method]:
    """`AsyncRunStore`'s own: `RunStore`'s calls off the loop, the host-code calls in an
    async unit of work (their `write` awaited when it returns an awaitable)."""
    return [
        *(
            Method(run_store(name), ON_STORE, ON_STORE_DOC, asynchronous=True)
            for name in (*ASYNC_OWN, *TREE_CALLS)
        ),
        *(
            Method(host_call(name), HOST_CALL, HOST_CALL_DOC, asynchronous=True)
            for name in HOST_CALLS_NAMES
        ),
        Method(
            feed("follow"),
            FOLLOW_ASYNC,
            FOLLOW_ASYNC_DOC,
            asynchronous=True,
            returns="AsyncIterator[FeedItem]",
        ),
    ]


# `RunRepository`'s methods that only `AsyncRunRepository` runs in its connection's
# greenlet: the journal calls that say whether they appended, and its own signatures
ASYNC_REPOSITORY_PROXIES = (
    *ASYNC_OWN,
    "bind_deliveries",
    "bind_deliveries_once",
    "transition_once",
    "transition_many_once",
    "record_position",
)


def async_repository_methods(_texts: dict[Path, str]) -> list[Method]:
    """`AsyncRunRepository`'s own: each `RunRepository` method through `run_sync`."""
    return [
        Method(repository(name), RUN_SYNC, RUN_SYNC_DOC, asynchronous=True)
        for name in ASYNC_REPOSITORY_PROXIES
    ]


@dataclass(frozen=True)
class Generated:
    """A generated class: its docstring, what the class it is the base of provides
    (`needs`, abstract), its methods and its base."""

    name: str
    doc: str
    needs: str
    methods: Callable[[dict[Path, str]], list[Method]]  # of the texts written so far
    base: str = "ABC"


@dataclass(frozen=True)
class Target:
    """A generated module: its docstring and imports, and its classes (in order)."""

    doc: str
    imports: str
    classes: tuple[Generated, ...]


TYPES = """
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator, Mapping
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
from ..journal.vocabulary import DELIVERY_BOUND
from ..repository.run_repository import RunRepository
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

@abstractmethod
def _follow(self, **arguments: Any) -> AsyncGenerator[FeedItem, None]:
    """`follow_async` on the `RunStore` behind this one, with `follow`'s arguments."""
'''
ASYNC_JOURNAL_NEEDS = '''
@abstractmethod
async def _on_sync(self, work: Callable[[RunStore | RunRepository], R]) -> R:
    """`work` on the synchronous store or repository behind this one."""
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
        classes=(
            Generated(
                "RunStoreCalls",
                "The calls `RunStore` (its only subclass) makes of other signatures.",
                RUN_STORE_NEEDS,
                run_store_methods,
            ),
        ),
    ),
    ASYNC_CALLS: Target(
        doc="The coroutine proxies of `AsyncRunStore` and `AsyncRunRepository`: the calls"
        " they share (`RunStore` and `RunRepository` state them with one signature), then"
        " each one's own: `RunStore`'s calls off the event loop and the host-code calls of"
        " `host_calls.py` in an async unit of work; `RunRepository`'s through `run_sync`.",
        imports=TYPES
        + "from contextlib import aclosing\n"
        + "from ..store import host_calls\n"
        + "from ..store.following import DEFAULT_POLL_S, Stop\n"
        + "from ..store.host_calls import HostCall, HostWrite\n"
        + "from ..store.run_store import RunStore\n",
        classes=(
            Generated(
                "AsyncJournalCalls",
                "The coroutines `AsyncRunStore` and `AsyncRunRepository` share: each the"
                " method of the same name of the synchronous one behind, awaited: the"
                " `RunStore`'s off the event loop, the `RunRepository`'s in the transaction"
                " (`run_sync`).",
                ASYNC_JOURNAL_NEEDS,
                async_journal_methods,
            ),
            Generated(
                "AsyncRunStoreCalls",
                "The coroutines of `AsyncRunStore` (its only subclass) of its own.",
                ASYNC_STORE_NEEDS,
                async_store_methods,
                base="AsyncJournalCalls",
            ),
            Generated(
                "AsyncRunRepositoryCalls",
                "The coroutines of `AsyncRunRepository` (its only subclass) of its own.",
                ASYNC_REPOSITORY_NEEDS,
                async_repository_methods,
                base="AsyncJournalCalls",
            ),
        ),
    ),
}


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
    if method.returns is not None:
        returns = f" -> {method.returns}"
    docstring = ast.get_docstring(function)
    if method.doc is not None:
        docstring = (
            textwrap.fill(method.doc.format(name=function.name), width=84) if docstring else None
        )
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


GENERATED = "Generated by tools/generate_methods.py: do not edit (CI runs it with `--check`)."
TYPE_VARIABLES = {"P": 'P = ParamSpec("P")', "R": 'R = TypeVar("R")'}


def class_source(generated: Generated, texts: dict[Path, str]) -> str:
    methods = "\n".join(method_source(method, texts) for method in generated.methods(texts))
    return (
        f"class {generated.name}({generated.base}):\n"
        + textwrap.indent(f'"""{textwrap.fill(generated.doc, width=88)}"""', "    ")
        + "\n\n"
        + textwrap.indent(generated.needs.strip("\n"), "    ")
        + "\n\n"
        + methods
    )


def generated(path: Path, texts: dict[Path, str]) -> str:
    """`path`'s module written anew (its unused imports dropped and the rest formatted, as
    `ruff check --fix` and `ruff format` do)."""
    target = TARGETS[path]
    classes = "\n\n".join(class_source(generated, texts) for generated in target.classes)
    doc = textwrap.fill(f"{target.doc} {GENERATED}", width=92)
    # the type variables the methods use (ruff keeps an unused assignment)
    variables = "".join(
        f"{line}\n" for name, line in TYPE_VARIABLES.items() if re.search(rf"\b{name}\b", classes)
    )
    names = ", ".join(f'"{generated.name}"' for generated in target.classes)
    text = (
        f'"""{doc}\n"""\n\n'
        f"from __future__ import annotations\n{target.imports}\n{variables}\n\n"
        f"{classes}\n\n__all__ = [{names}]\n"
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
