"""The README's fence example runs as written (section "What a lease guarantees")."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_fence_example_runs(store) -> None:
    text = README.read_text(encoding="utf-8")
    block = re.search(
        r"<!-- fence-example:begin -->\n```python\n(.*?)```\n<!-- fence-example:end -->",
        text,
        re.DOTALL,
    )
    assert block is not None
    run = store.start_run("abel-implement", change="publish", operation_id="start")
    namespace = {"store": store, "run": run}
    exec(compile(block.group(1), "README.md (fence example)", "exec"), namespace)
    assert namespace["bucket"].highest == {"report.json": 2}
