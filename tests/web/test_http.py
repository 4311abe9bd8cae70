"""The web view over HTTP (Starlette's TestClient), on SQLite and PostgreSQL: read-only
for real, refused when `auth` says no, hostile data escaped, coded errors."""

from __future__ import annotations

import base64
import json
import re
from collections import deque
from urllib.parse import urljoin, urlsplit

import pytest
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.testclient import TestClient
from web_support import (
    LARGE,
    SCRIPT,
    break_chain,
    database_digest,
    hostile_run,
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
        (f"/runs/{run_id}?events=0", "invalid-event-page"),
        (f"/runs/{run_id}?events=9", "invalid-event-page"),
    ]:
        response = client.get(path)
        assert response.status_code == 400, path
        assert code in response.text
        assert "Traceback" not in response.text and 'File "' not in response.text


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
    run = run_store.start_run("abel-implement", change="long", operation_id="long")
    for state in ("validating-delivery", "ready", "queued"):
        run_store.transition(run.run_id, state, operation_id=f"long-{state}")
    for number in range(500):  # 1,004 events in all: two pages
        run_store.transition(run.run_id, "running", operation_id=f"run-{number}")
        run_store.transition(run.run_id, "paused", operation_id=f"pause-{number}", code="p")
    first = client.get(f"/api/runs/{run.run_id}").json()
    assert first["eventPages"] == 2
    assert [event["sequence"] for event in first["events"]] == list(range(1, 1001))
    second = client.get(f"/api/runs/{run.run_id}?events=2").json()
    assert [event["sequence"] for event in second["events"]] == list(range(1001, 1005))
    page = client.get(f"/runs/{run.run_id}?events=2")
    assert page.text.count('class="mono recorded-at"') == 4
    assert 'href="?events=1"' in page.text
    # a receipt per call: the page lists 100 of them, the JSON twin every one
    assert 'id="operations-left-out"' in page.text
    assert len(second["run"]["operations"]) == 1004


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
