"""The web view over HTTP (Starlette's TestClient), on SQLite and PostgreSQL: read-only
for real, refused when `auth` says no, hostile data escaped, coded errors."""

from __future__ import annotations

import base64
import json
import re
from collections import deque
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from sqlalchemy import Engine, text
from starlette.requests import Request
from starlette.testclient import TestClient
from support import FakeClock
from web_support import (
    LARGE,
    SCRIPT,
    break_chain,
    database_digest,
    hostile_run,
    long_run,
    plain_runs,
    routes,
)

from cadence_store import RunStore
from cadence_store.web import create_app

WRITE_METHODS = ("POST", "PUT", "DELETE", "PATCH")
LINK = re.compile(r'href="([^"]+)"')


def test_every_route_refuses_every_write_method(client: TestClient, run_store: RunStore) -> None:
    run_id = plain_runs(run_store, 1)[0]
    for path in [*routes(run_id), "/no-such-page"]:
        for method in WRITE_METHODS:
            response = client.request(method, path)
            assert response.status_code == 405, (method, path)
            assert response.headers["allow"] == "GET, HEAD"
            assert "method-not-allowed" in response.text
        assert client.head(path).status_code in (200, 404), path


def test_auth_refusal_is_403_on_every_route(run_store: RunStore) -> None:
    run_id = plain_runs(run_store, 1)[0]

    def operators_only(request: Request) -> bool:
        return request.headers.get("x-user") == "operator"

    with TestClient(create_app(run_store, auth=operators_only)) as client:
        for path in routes(run_id):
            refused = client.get(path)
            assert refused.status_code == 403, path
            assert "access-refused" in refused.text
            assert client.get(path, headers={"x-user": "operator"}).status_code == 200, path


def test_an_unknown_run_is_a_404_page_naming_its_code(client: TestClient) -> None:
    page = client.get("/runs/01a24ce6-84b1-7268-8faa-cc1dff72ed7d")
    assert page.status_code == 404
    assert '<code id="error-code">run-not-found</code>' in page.text
    assert client.get("/api/runs/no-such-run").json()["error"] == "run-not-found"
    assert client.get("/nowhere").status_code == 404


def test_bad_input_is_a_coded_page_without_a_stack_trace(
    client: TestClient, run_store: RunStore
) -> None:
    run_id = plain_runs(run_store, 1)[0]
    for path, code in [
        ("/?state=no-such-state", "invalid-run-state"),
        ("/?updated_after=yesterday", "invalid-time-filter"),
        ("/?after=a&before=b", "invalid-run-cursor"),
        (f"/runs/{run_id}?after=x", "invalid-event-cursor"),
        (f"/runs/{run_id}?after=-1", "invalid-event-cursor"),
        (f"/runs/{run_id}?after=\u00b2", "invalid-event-cursor"),  # a digit, not ASCII
        (f"/runs/{run_id}?after={'9' * 19}", "invalid-event-cursor"),
        (f"/runs/{run_id}?after=2", "invalid-event-cursor"),  # its last event: none after
        (f"/runs/{run_id}?before=1", "invalid-event-cursor"),  # none before the first
        (f"/runs/{run_id}?before=4", "invalid-event-cursor"),  # past the end
        (f"/runs/{run_id}?after=0&before=2", "invalid-event-cursor"),
    ]:
        for route in (path, "/api" + path if path.startswith("/runs/") else None):
            if route is None:
                continue
            response = client.get(route)
            assert response.status_code == 400, route
            assert code in response.text
            assert "Traceback" not in response.text and 'File "' not in response.text
    assert client.get(f"/api/runs/{run_id}?after=x").json()["error"] == "invalid-event-cursor"


def test_hostile_data_is_escaped_and_the_policy_is_strict(
    client: TestClient, run_store: RunStore
) -> None:
    run_id = hostile_run(run_store)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert SCRIPT not in page.text and "<img" not in page.text
    assert "&lt;script&gt;window.__cadencePwned = 1&lt;/script&gt;" in page.text
    assert "lone \\udc80 surrogate" in page.text  # shown, not a failed encoding
    assert LARGE in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy
    nonce = re.search(r"'nonce-([^']+)'", policy)
    assert nonce is not None
    # every script on the page carries the nonce: nothing else may run
    assert page.text.count("<script") == page.text.count(f'<script nonce="{nonce[1]}"')
    twin = client.get(f"/api/runs/{run_id}")
    operations = twin.json()["run"]["operations"]
    [outcome] = [op["outcome"] for op in operations if op["operationId"] == "hostile-lease"]
    assert outcome["html"] == SCRIPT and outcome["lone"] == "lone \udc80 surrogate"
    listing = client.get("/?change=hostile")
    assert run_id in listing.text


def test_crawling_every_link_leaves_the_database_unchanged(
    client: TestClient, run_store: RunStore, db: Engine
) -> None:
    plain_runs(run_store, 60)
    hostile_run(run_store)
    before = database_digest(db)
    seen: set[str] = set()
    queue = deque(["/", "/api/runs", "/healthz"])
    while queue:
        path = queue.popleft()
        if path in seen:
            continue
        seen.add(path)
        response = client.get(path)
        assert response.status_code == 200, path
        for link in LINK.findall(response.text):
            target = urljoin(f"http://testserver{path}", link.replace("&amp;", "&"))
            parts = urlsplit(target)
            if parts.netloc == "testserver":
                queue.append(parts.path + (f"?{parts.query}" if parts.query else ""))
            else:
                pytest.fail(f"a link off the site: {link}")
        if path.startswith("/runs/"):
            queue.append("/api" + path)
    assert sum(path.startswith("/runs/") for path in seen) == 61
    assert "/feed" in seen and any("after=" in path for path in seen)
    assert database_digest(db) == before


def test_the_list_filters_and_pages_by_keyset(client: TestClient, run_store: RunStore) -> None:
    ids = plain_runs(run_store, 120)
    listed: list[str] = []
    query = ""
    while True:
        page = client.get(f"/api/runs?{query}").json()
        assert len(page["runs"]) <= 50
        listed += [run["runId"] for run in page["runs"]]
        if page["next"] is None:
            break
        query = page["next"]
    assert listed == ids
    validating = client.get("/api/runs?state=validating-delivery").json()["runs"]
    assert len(validating) == 40
    assert all(run["state"] == "validating-delivery" for run in validating)
    prefix = ids[7][:10]
    matching = [run_id for run_id in ids if run_id.startswith(prefix)]
    found = client.get(f"/api/runs?id={prefix}").json()["runs"]
    assert [run["runId"] for run in found] == matching[:50]
    counts = client.get("/api/runs").json()["counts"]
    assert counts["byState"] == {"created": 80, "validating-delivery": 40}
    assert client.get("/api/runs?updated_before=1").json()["runs"] == []


def test_a_long_run_pages_its_timeline(client: TestClient, run_store: RunStore) -> None:
    run_id = long_run(run_store, 500)  # 1,004 events: six pages of 200
    first = client.get(f"/api/runs/{run_id}").json()
    assert [event["sequence"] for event in first["events"]] == list(range(1, 201))
    assert first["eventPage"] == {
        "size": 200,
        "first": 1,
        "last": 200,
        "events": 1004,
        "previous": None,
        "next": "after=200",
    }
    # the state timeline of the page: the state changes among its events only
    timeline = first["run"]["timeline"]
    assert [entry["sequence"] for entry in timeline] == list(range(1, 201))
    assert timeline[-1] == {**timeline[-1], "state": "paused", "code": "p97"}
    # next to the end, then previous back to the start: every event once, in order
    pages, query = [first], first["eventPage"]["next"]
    while query is not None:
        pages.append(client.get(f"/api/runs/{run_id}?{query}").json())
        query = pages[-1]["eventPage"]["next"]
    assert len(pages) == 6
    forward = [event["sequence"] for page in pages for event in page["events"]]
    assert forward == list(range(1, 1005))
    assert (
        pages[-1]["eventPage"]["first"] == 1001
        and pages[-1]["run"]["timeline"][-1]["code"] == "p499"
    )
    backward, query = [], "before=1005"
    while query is not None:
        page = client.get(f"/api/runs/{run_id}?{query}").json()
        backward = [event["sequence"] for event in page["events"]] + backward
        assert len(page["events"]) == 200 or page["eventPage"]["previous"] is None
        query = page["eventPage"]["previous"]
    assert backward == list(range(1, 1005))
    last = client.get(f"/api/runs/{run_id}?before=1005").json()
    assert last["eventPage"]["first"] == 805 and last["eventPage"]["next"] is None
    # the HTML page: 200 events, its links, the page's state changes
    html = client.get(f"/runs/{run_id}?after=200").text
    assert html.count('class="mono recorded-at"') == 200
    assert 'href="?before=201"' in html and 'href="?after=400"' in html
    assert 'href="?before=1005"' in html and 'class="first-events" href="?"' in html
    assert "Events 201–400 of 1004" in html
    assert html.count("<td>p1") > 0 and "<td>p99</td>" in html and "<td>p9</td>" not in html
    end = client.get(f"/runs/{run_id}?before=1005").text
    assert 'class="next-events"' not in end and 'href="?before=805"' in end
    # a receipt per call: each page lists 100 of them (`test_a_long_run_pages_its_receipts`)
    assert len(first["run"]["operations"]) == 100


def test_a_long_run_pages_its_receipts(client: TestClient, run_store: RunStore, db: Engine) -> None:
    run_id = long_run(run_store, 150)  # 304 receipts: pages of 100, 100, 100, 4
    run_store.acquire_lease(run_id, "long-lease", 60_000)
    with db.connect() as connection:
        ids = (
            connection.execute(
                text(
                    "SELECT operation_id FROM operations WHERE run_id = :run_id "
                    "AND kind <> 'lease' ORDER BY operation_id"
                ),
                {"run_id": run_id},
            )
            .scalars()
            .all()
        )
    assert len(ids) == 304

    def receipts_of(page: dict[str, Any]) -> list[str]:
        operations = page["run"]["operations"]
        assert operations[0]["operationId"] == "long-lease"  # the leases, on every page
        return [operation["operationId"] for operation in operations[1:]]

    first = client.get(f"/api/runs/{run_id}").json()
    assert first["operationPage"] == {
        "size": 100,
        "first": ids[0],
        "last": ids[99],
        "receipts": 304,
        "previous": None,
        "next": f"operations_after={ids[99]}",
    }
    # next to the end, then previous back to the start: every receipt once, in order
    pages, query = [first], first["operationPage"]["next"]
    while query is not None:
        pages.append(client.get(f"/api/runs/{run_id}?{query}").json())
        query = pages[-1]["operationPage"]["next"]
    assert [len(receipts_of(page)) for page in pages] == [100, 100, 100, 4]
    assert [receipt for page in pages for receipt in receipts_of(page)] == ids
    backward, query = [], pages[-1]["operationPage"]["previous"]
    assert query == f"operations_before={ids[300]}"
    while query is not None:
        page = client.get(f"/api/runs/{run_id}?{query}").json()
        backward = receipts_of(page) + backward
        query = page["operationPage"]["previous"]
    assert backward == ids[:300]
    # the HTML page: its receipt links keep the page of events, its event links do not
    html = client.get(f"/runs/{run_id}?after=200&operations_after={ids[99]}").text
    assert f'href="?after=200&amp;operations_after={ids[199]}"' in html
    assert f'href="?after=200&amp;operations_before={ids[100]}"' in html
    assert 'class="first-receipts" href="?after=200"' in html
    assert 'href="?before=201"' in html and "304 receipts, 100 a page" in html
    for bad in (
        "operations_after=%00",
        f"operations_before={'x' * 1025}",
        f"operations_after={ids[0]}&operations_before={ids[9]}",
    ):
        refused = client.get(f"/api/runs/{run_id}?{bad}")
        assert refused.status_code == 400 and refused.json()["error"] == "invalid-operation-cursor"


def test_a_broken_chain_shows_broken_on_every_page(
    client: TestClient, run_store: RunStore, db: Engine
) -> None:
    run_id = long_run(run_store, 150)  # 304 events
    assert client.get(f"/api/runs/{run_id}").json()["verification"] == {"intact": True}
    break_chain(db, run_id, 290)  # on the second page: the first verifies the whole chain
    for path in (f"/api/runs/{run_id}", f"/api/runs/{run_id}?after=200"):
        verification = client.get(path).json()["verification"]
        assert verification["intact"] is False and verification["sequence"] == 290, path
    assert "broken: " in client.get(f"/runs/{run_id}").text


def test_a_chain_that_does_not_verify_still_shows_its_states(
    client: TestClient, run_store: RunStore, db: Engine
) -> None:
    """A page folds the rows verification read, once it verified the chain whole; a
    chain that breaks early (a hash the fold does not check) is read again to its head."""
    run_id = long_run(run_store, 600)  # 1,204 events: verification reads 1,000, then more
    with db.begin() as connection:
        connection.execute(
            text("UPDATE events SET event_hash = :hash WHERE run_id = :run_id AND sequence = 290"),
            {"hash": "ab" * 32, "run_id": run_id},
        )
    last = client.get(f"/api/runs/{run_id}?before=1205").json()
    assert last["verification"]["intact"] is False and last["verification"]["sequence"] == 290
    timeline = last["run"]["timeline"]
    assert [entry["sequence"] for entry in timeline] == list(range(1005, 1205))
    assert timeline[-1] == {**timeline[-1], "state": "paused", "code": "p599"}
    assert "broken: " in client.get(f"/runs/{run_id}?before=1205").text


def test_the_list_shows_times_and_pages_back_by_keyset(
    client: TestClient, run_store: RunStore, db: Engine, clock: FakeClock
) -> None:
    ids = plain_runs(run_store, 120)
    clock.advance(60_000)
    later = next(run_id for run_id in ids[2:50] if run_store.status(run_id).state == "created")
    run_store.transition(later, "validating-delivery", operation_id="later")
    with db.begin() as connection:  # a run cadence 1.x wrote: no times
        connection.execute(
            text("UPDATE runs SET created_at = NULL, updated_at = NULL WHERE run_id = :r"),
            {"r": ids[1]},
        )
    first = client.get("/api/runs").json()
    listed = {run["runId"]: run for run in first["runs"]}
    assert listed[ids[1]]["createdAt"] is None and listed[ids[1]]["updatedAt"] is None
    assert listed[later]["updatedAt"] - listed[later]["createdAt"] == 60_000
    assert all(isinstance(listed[run_id]["createdAt"], int) for run_id in ids[2:50])
    html = client.get("/").text
    assert "<th>created</th><th>updated</th>" in html
    assert html.count('<td class="mono">-</td>') >= 2  # the times cadence 1.x did not keep
    # forward to the last page, then back by `previous` to the first: the same pages
    pages, query = [first], first["next"]
    assert first["previous"] is None
    while query is not None:
        pages.append(client.get(f"/api/runs?{query}").json())
        query = pages[-1]["next"]
    assert [len(page["runs"]) for page in pages] == [50, 50, 20]
    back, query = [pages[-1]], pages[-1]["previous"]
    while query is not None:
        assert "before=" in query
        back.insert(0, client.get(f"/api/runs?{query}").json())
        query = back[0]["previous"]
    assert [[run["runId"] for run in page["runs"]] for page in back] == [
        ids[:50],
        ids[50:100],
        ids[100:],
    ]
    assert back[1]["next"] == pages[1]["next"]
    # with a filter: the 79 runs still `created`, two pages each way
    created_runs = [run_id for run_id in ids if run_store.status(run_id).state == "created"]
    second = client.get("/api/runs?" + client.get("/api/runs?state=created").json()["next"]).json()
    assert [run["runId"] for run in second["runs"]] == created_runs[50:]
    assert second["next"] is None and "state=created" in second["previous"]
    again = client.get(f"/api/runs?{second['previous']}").json()
    assert [run["runId"] for run in again["runs"]] == created_runs[:50]
    assert again["previous"] is None and again["next"] is not None
    # an id prefix pages back inside its prefix
    prefix = ids[0][:8]
    matching = [run_id for run_id in ids if run_id.startswith(prefix)]
    if len(matching) > 50:
        tail = client.get(f"/api/runs?id={prefix}&before={matching[-1]}").json()["runs"]
        assert [run["runId"] for run in tail] == matching[-51:-1]
    # the links of a middle page, on the HTML page
    middle = client.get(f"/?after={ids[49]}").text
    assert f'id="previous-page" href="/?before={ids[50]}"' in middle.replace("%2D", "-")
    assert f'id="next-page" href="/?after={ids[99]}"' in middle.replace("%2D", "-")


def test_a_broken_chain_shows_broken(client: TestClient, run_store: RunStore, db: Engine) -> None:
    run_id = plain_runs(run_store, 1)[0]
    assert client.get(f"/api/runs/{run_id}").json()["verification"] == {"intact": True}
    assert "chain verifies" in client.get(f"/runs/{run_id}").text
    break_chain(db, run_id, 1)
    verification = client.get(f"/api/runs/{run_id}").json()["verification"]
    assert verification["intact"] is False and verification["sequence"] == 1
    assert f"broken: {verification['code']}" in client.get(f"/runs/{run_id}").text


def test_health_and_feed(client: TestClient, run_store: RunStore) -> None:
    assert client.get("/healthz").json() == {"ready": True}
    run_id = plain_runs(run_store, 1)[0]
    run_store.read_feed()  # numbers the events (PostgreSQL numbers them on reading)
    feed = client.get("/feed")
    assert f'href="/runs/{run_id}"' in feed.text
    assert json.loads(client.get("/api/runs").text)["runs"][0]["runId"] == run_id


def test_the_counts_are_kept_for_their_max_age(run_store: RunStore) -> None:
    plain_runs(run_store, 2)
    with (
        TestClient(create_app(run_store)) as kept,
        TestClient(create_app(run_store, counts_max_age_s=0)) as fresh,
    ):
        assert kept.get("/api/runs").json()["counts"]["runs"] == 2
        assert fresh.get("/api/runs").json()["counts"]["runs"] == 2
        plain_runs(run_store, 1, change="later")
        assert kept.get("/api/runs").json()["counts"]["runs"] == 2  # read under 30 s ago
        assert fresh.get("/api/runs").json()["counts"]["runs"] == 3
        assert len(kept.get("/api/runs").json()["runs"]) == 3  # the listing is never kept


def test_a_run_covered_by_a_checkpoint_shows_it_and_its_proof(
    client: TestClient, run_store: RunStore
) -> None:
    from cadence_store import generate_signer_key
    from cadence_store.journal.merkle import feed_leaf_hash, verify_inclusion
    from cadence_store.journal.notes import verify_checkpoint

    key = generate_signer_key("web.example")
    run = run_store.start_run("abel-implement", change="covered", operation_id="covered-1")
    assert "no signed checkpoint covers this run" in client.get(f"/runs/{run.run_id}").text
    assert client.get(f"/api/runs/{run.run_id}").json()["checkpoint"] is None
    signed = run_store.checkpoint(key)
    assert "covered by the checkpoint of tree size 1" in client.get(f"/runs/{run.run_id}").text
    covering = client.get(f"/api/runs/{run.run_id}").json()["checkpoint"]
    assert covering["note"] == signed.note
    head = verify_checkpoint(covering["note"], key.verifier())
    event = run_store.list_events(run.run_id)[-1]
    leaf = feed_leaf_hash(run.run_id, event.sequence, event.hash)
    proof = [base64.b64decode(hash_) for hash_ in covering["hashes"]]
    verify_inclusion(leaf, covering["leafIndex"], covering["treeSize"], proof, head.root_hash)
    run_store.transition(run.run_id, "paused", operation_id="covered-2")  # grew since
    assert client.get(f"/api/runs/{run.run_id}").json()["checkpoint"] is None
