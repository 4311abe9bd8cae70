"""The checkpoint calls through `AsyncRunStore`, and the signer key kept out of what a
call leaves behind: spans, their events, error messages, reprs."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from support import ROOT_HASH, FakeClock, signer_seed
from telemetry_support import installed

import cadence_store
from cadence_store import AsyncRunStore, InvalidInputError, RunStore, generate_signer_key
from cadence_store.async_store import async_database_url
from cadence_store.journal import merkle
from cadence_store.journal.notes import verify_checkpoint

KEY = generate_signer_key("example.com/async")


def test_the_async_store_signs_verifies_and_proves(database_url: str) -> None:
    url = async_database_url(database_url).render_as_string(hide_password=False)
    cadence_store.upgrade(database_url)

    async def scenario() -> tuple[Any, ...]:
        async with AsyncRunStore(url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
            run = await store.start_run("abel-implement", change="a", operation_id="s-1")
            first = await store.checkpoint(KEY)
            await store.transition(run.run_id, "paused", operation_id="t-1")
            second = await store.checkpoint(KEY.encode(), origin="async.example/log")
            report = await store.verify_checkpoint(first.note, KEY.verifier())
            proof = await store.inclusion_proof(run.run_id, 1, size=1)
            consistency = await store.consistency_proof(1, second.size)
            return first, second, report, proof, consistency

    first, second, report, proof, consistency = asyncio.run(scenario())
    assert (first.size, second.size, report.size, report.runs_verified) == (1, 2, 1, 1)
    assert verify_checkpoint(second.note, KEY.verifier()).origin == "async.example/log"
    root = bytes.fromhex(first.root_hash)
    merkle.verify_inclusion(proof.leaf_hash, 0, 1, list(proof.hashes), root)
    merkle.verify_consistency(1, 2, root, bytes.fromhex(second.root_hash), list(consistency.hashes))


def _everything_recorded(spans: list[Any]) -> str:
    parts = []
    for span in spans:
        parts.append(span.name)
        parts.extend(f"{key}={value}" for key, value in (span.attributes or {}).items())
        for event in span.events:
            parts.extend(f"{key}={value}" for key, value in (event.attributes or {}).items())
        parts.append(str(span.status.description))
    return "\n".join(parts)


def test_no_span_or_log_record_carries_the_signer_key(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = KEY.encode()
    seed = signer_seed(secret)
    broken = secret[:-6] + ("AAAA" if not secret.endswith("AAAA==") else "BBBB") + "=="
    with RunStore(store_url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        store.start_run("abel-implement", change="otel", operation_id="s-1")
        with caplog.at_level(logging.DEBUG), installed().recording() as telemetry:
            store.checkpoint(secret)
            store.checkpoint(KEY)
            with pytest.raises(InvalidInputError) as refused:
                store.checkpoint(broken)
        recorded = _everything_recorded(telemetry.spans())
    assert "cadence_store.checkpoint" in recorded  # traced like the other calls
    assert refused.value.code == "checkpoint-key-invalid"
    assert "checkpoint of 1 leaves" in caplog.text  # logged, by the key's name and id only
    for text in (recorded, caplog.text, str(refused.value), repr(refused.value), repr(KEY)):
        assert seed not in text
        assert signer_seed(broken) not in text
