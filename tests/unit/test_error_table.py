"""README "Error codes" is the table of every code: its class, whether retrying the same
call may succeed (`CadenceStoreError.retryable`) and the CLI's exit status
(`cli.render.exit_code`). Checked against the code: every code the package raises (found
in its source) has a row, and every row's class, retryability and exit status are what
the library and the CLI give."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import cadence_store.errors as errors
from cadence_store.cli.render import exit_code

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PACKAGE = ROOT / "cadence_store"
START, END = "<!-- --8<-- [start:errors] -->", "<!-- --8<-- [end:errors] -->"
CLASSES = {
    name: value
    for name, value in vars(errors).items()
    if isinstance(value, type) and issubclass(value, errors.CadenceStoreError)
}
# classes whose first argument is not the code: they always raise their default code
DEFAULT_CODE_ONLY = {"SchemaOutOfDateError", "StoreFormatError", "HostWriteError"}
# the codes helpers take as an argument (`require_callable(value, code)`, ...)
CODE_ARGUMENT_HELPERS = {"require_callable": 1, "require_bool": 1, "_names": 2}
PLACEHOLDER = re.compile(r"<[^>]+>|\{[^}]+\}")


def table_rows() -> dict[str, dict[str, str]]:
    text = README.read_text(encoding="utf-8")
    assert START in text and END in text, "README has the errors snippet markers"
    section = text.split(START, 1)[1].split(END, 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    header = [cell.strip().lower() for cell in lines[0].strip("|").split("|")]
    assert header == ["code", "class", "meaning", "retryable", "cli exit status"], header
    rows: dict[str, dict[str, str]] = {}
    for line in lines[2:]:
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        row = dict(zip(header, cells, strict=True))
        assert row["code"] not in rows, f"{row['code']} is listed twice"
        rows[row["code"]] = row
    return rows


def _constants(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Constant)
            and isinstance(value.value, str)
        ):
            found[target.id] = value.value
    return found


def raised_codes() -> dict[str, set[str]]:
    """code (f-strings with `*` for their fields) -> the classes raised with it."""
    codes: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = _constants(tree)

        def code_of(argument: ast.expr, _constants: dict[str, str] = constants) -> str | None:
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                return argument.value
            if isinstance(argument, ast.Name):
                return _constants.get(argument.id)
            if isinstance(argument, ast.JoinedStr):
                return PLACEHOLDER.sub("*", ast.unparse(argument)[2:-1])
            return None

        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in CLASSES and name not in DEFAULT_CODE_ONLY and node.args:
                code = code_of(node.args[0])
                if code is not None:
                    codes.setdefault(code, set()).add(name)
            elif name in CODE_ARGUMENT_HELPERS and len(node.args) > CODE_ARGUMENT_HELPERS[name]:
                code = code_of(node.args[CODE_ARGUMENT_HELPERS[name]])
                if code is not None:
                    codes.setdefault(code, set()).add("InvalidInputError")
    for name in DEFAULT_CODE_ONLY:
        codes.setdefault(CLASSES[name].default_code, set()).add(name)
    return codes


def instance(class_name: str, code: str) -> errors.CadenceStoreError:
    cls = CLASSES[class_name]
    if class_name == "HostWriteError":
        return errors.HostWriteError(Exception("host"))
    if class_name == "StoreFormatError":
        return errors.StoreFormatError("db")
    if class_name == "SchemaOutOfDateError":
        return errors.SchemaOutOfDateError()
    return cls(code)


def test_every_raised_code_has_a_row() -> None:
    rows = {PLACEHOLDER.sub("*", code): row for code, row in table_rows().items()}
    missing = []
    for code, classes in sorted(raised_codes().items()):
        if not re.fullmatch(r"[a-z][a-z0-9*]*(?:[-:][a-z0-9*]+)*", code):
            continue  # a detail text, not a code
        row = rows.get(code)
        if row is None and "*" in code:  # an f-string: a row it produces stands for it
            shape = re.compile(re.escape(code).replace(r"\*", "[a-z0-9]+"))
            row = next((r for listed, r in table_rows().items() if shape.fullmatch(listed)), None)
        if row is None:
            missing.append(code)
            continue
        listed = {name.strip() for name in row["class"].split(",")}
        assert classes <= listed, (code, classes, listed)
    assert not missing, f"README 'Error codes' lacks: {missing}"


@pytest.mark.parametrize("code", sorted(table_rows()))
def test_a_rows_class_retryability_and_exit_status_are_the_codes(code: str) -> None:
    row = table_rows()[code]
    assert row["retryable"] in ("yes", "no"), row
    assert row["meaning"], row
    concrete = PLACEHOLDER.sub("x", code)
    class_names = [name.strip() for name in row["class"].split(",")]
    statuses = [status.strip() for status in row["cli exit status"].split(",")]
    assert len(statuses) == len(class_names), row
    for class_name, status in zip(class_names, statuses, strict=True):
        assert class_name in CLASSES, row
        error = instance(class_name, concrete)
        assert error.code == concrete or class_name in DEFAULT_CODE_ONLY, row
        assert error.retryable is (row["retryable"] == "yes"), row
        assert str(exit_code(error)) == status, row


def test_retryable_codes_are_exactly_the_tables() -> None:
    listed = {code for code, row in table_rows().items() if row["retryable"] == "yes"}
    assert listed == set(errors.RETRYABLE_CODES)
