"""Lexicons on the speech server: per API key, used by id, bounded, persisted.

Run: .venv/bin/python -m pytest tests/rumik_app/test_serve_lexicons.py -q
"""

from __future__ import annotations

import json

import httpx
import pytest

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.protocol import MAX_LEXICON_BODY_BYTES
from tests.servers import ServerThread

KEY_A, KEY_B = "lexicon-key-a-0123456789", "lexicon-key-b-0123456789"
BRANDS = {"name": "brands", "entries": [{"grapheme": "SBI", "alias": "State Bank"},
                                        {"grapheme": "UPI", "alias": "you pee eye"}]}
PLS = """<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="x-rumik" xml:lang="en">
  <lexeme><grapheme>HDFC</grapheme><alias>H D F C</alias></lexeme>
</lexicon>"""
SPEECH = {"model": "tiny", "voice": "Ira", "response_format": "pcm", "seed": 5, "max_seconds": 0.3}


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")


def _server(engine, **options) -> ServerThread:
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=2, max_queue=8, max_prompt_tokens=256))
    return ServerThread(adapter, api_key=(KEY_A, KEY_B), **options)


@pytest.fixture(scope="module")
def server(engine):
    with _server(engine) as srv:
        yield srv


def speak(server, key: str, text: str, **extra) -> httpx.Response:
    return httpx.post(server.url + "/v1/audio/speech", json={**SPEECH, "input": text, **extra}, headers=auth(key),
                      timeout=60)


def test_a_lexicon_changes_what_is_said_for_its_own_key_only(server):
    made = httpx.post(server.url + "/v1/lexicons", json=BRANDS, headers=auth(KEY_A), timeout=10)
    assert made.status_code == 201 and made.json()["entries"] == 2
    lexicon_id = made.json()["id"]
    with_lexicon = speak(server, KEY_A, "Pay SBI by UPI.", lexicon=[lexicon_id])
    by_hand = speak(server, KEY_A, "Pay State Bank by you pee eye.")
    assert with_lexicon.status_code == 200 and with_lexicon.content == by_hand.content  # applied before the prompt
    assert speak(server, KEY_A, "Pay SBI by UPI.").content != with_lexicon.content

    listed = httpx.get(server.url + "/v1/lexicons", headers=auth(KEY_B), timeout=10).json()["data"]
    assert lexicon_id not in [item["id"] for item in listed]
    assert httpx.get(server.url + f"/v1/lexicons/{lexicon_id}", headers=auth(KEY_B), timeout=10).status_code == 404
    refused = speak(server, KEY_B, "Pay SBI by UPI.", lexicon=lexicon_id)
    assert refused.status_code == 404 and refused.json()["error"]["param"] == "lexicon"
    gone = httpx.delete(server.url + f"/v1/lexicons/{lexicon_id}", headers=auth(KEY_B), timeout=10)
    assert gone.status_code == 404  # nor delete it
    assert httpx.get(server.url + f"/v1/lexicons/{lexicon_id}", headers=auth(KEY_A), timeout=10).status_code == 200


def test_pls_in_and_out_and_replace_and_delete(server):
    made = httpx.post(server.url + "/v1/lexicons", json={"name": "banks", "format": "pls", "data": PLS},
                      headers=auth(KEY_A), timeout=10)
    assert made.status_code == 201, made.text
    lexicon_id = made.json()["id"]
    exported = httpx.get(server.url + f"/v1/lexicons/{lexicon_id}?format=pls", headers=auth(KEY_A), timeout=10)
    assert exported.status_code == 200 and "<alias>H D F C</alias>" in exported.text
    replaced = httpx.put(server.url + f"/v1/lexicons/{lexicon_id}", json=BRANDS, headers=auth(KEY_A), timeout=10)
    assert replaced.status_code == 200 and replaced.json()["entries"] == 2
    assert httpx.delete(server.url + f"/v1/lexicons/{lexicon_id}", headers=auth(KEY_A), timeout=10).status_code == 200
    assert speak(server, KEY_A, "SBI.", lexicon=lexicon_id).status_code == 404


@pytest.mark.parametrize("body, status", [
    ({"name": "bad", "entries": [{"grapheme": "", "alias": "x"}]}, 400),
    ({"name": "bad", "format": "pls", "data": "<!DOCTYPE x [<!ENTITY a 'b'>]><lexicon/>"}, 400),
    ({"name": "bad", "format": "yaml", "data": "a: b"}, 400),
])
def test_bad_lexicons_get_one_clear_400(server, body, status):
    resp = httpx.post(server.url + "/v1/lexicons", json=body, headers=auth(KEY_A), timeout=10)
    assert resp.status_code == status and resp.json()["error"]["message"] and "Traceback" not in resp.text


def test_aliases_that_grow_past_the_routes_bound_stop_there_before_any_number_is_read(server):
    """A 200-byte request whose lexicon says "a" as 150 nines read as 30,000 spoken characters
    (the route's bound is 8,192) and was normalised whole, minutes of CPU on the server's shared
    threads, before the bound refused it. The aliases now stop at the route's bound."""
    nines = {"name": "nines", "entries": [{"grapheme": "a", "alias": " ".join(["9"] * 150)}]}
    made = httpx.post(server.url + "/v1/lexicons", json=nines, headers=auth(KEY_A), timeout=10)
    assert made.status_code == 201, made.text
    refused = speak(server, KEY_A, " ".join(["a"] * 100), lexicon=[made.json()["id"]])
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "lexicon"
    assert "grows past 8,192 characters (the limit); shorten the text or the aliases" in refused.text
    assert speak(server, KEY_B, "Pay by UPI.").status_code == 200  # the server is free for others


def test_stored_lexicons_cost_their_size_once_in_any_order_and_nothing_once_deleted(server):
    """Two lexicons of 1,000 100-letter words, named in both orders: one match table each, about
    their size (a trie per order took ~40 MB here and kept it after the lexicons were deleted)."""
    import gc
    import random
    import tracemalloc

    from rumik_app.text import lexicon as lexicon_module

    rng = random.Random(48)
    bodies = [{"name": f"long-{k}", "entries": [
        {"grapheme": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(100)), "alias": "x"}
        for _ in range(1_000)]} for k in range(2)]
    ids = [httpx.post(server.url + "/v1/lexicons", json=body, headers=auth(KEY_A), timeout=10).json()["id"]
           for body in bodies]
    text = f"say {bodies[0]['entries'][5]['grapheme']} now"
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for order in (ids, ids[::-1], ids):
            assert speak(server, KEY_A, text, lexicon=order).content == speak(server, KEY_A, "say x now").content
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 8 * sum(len(json.dumps(body)) for body in bodies), f"{grown:,} bytes"  # once, any order
    held = len(lexicon_module._TABLES)
    for lexicon_id in ids:
        assert httpx.delete(server.url + f"/v1/lexicons/{lexicon_id}", headers=auth(KEY_A), timeout=10).is_success
    gc.collect()
    assert len(lexicon_module._TABLES) == held - 2  # deleted: their tables are gone too


def test_a_full_quota_and_a_huge_upload_are_refused(server):
    store = server.server.config.app.state.ctx.lexicons
    store.max_per_owner = len(store.list(_owner(server, KEY_B))) + 1
    assert httpx.post(server.url + "/v1/lexicons", json=BRANDS, headers=auth(KEY_B), timeout=10).status_code == 201
    full = httpx.post(server.url + "/v1/lexicons", json=BRANDS, headers=auth(KEY_B), timeout=10)
    assert full.status_code == 400 and full.json()["error"]["code"] == "lexicon_quota"
    huge = httpx.post(server.url + "/v1/lexicons", content=b"x" * (MAX_LEXICON_BODY_BYTES + 1),
                      headers={**auth(KEY_B), "Content-Type": "application/json"}, timeout=10)
    assert huge.status_code == 413


def _owner(server, key: str) -> str:
    from rumik_app.serve.gate import owner_id

    return owner_id(key)


def test_lexicons_survive_a_restart_with_a_data_dir(engine, tmp_path):
    with _server(engine, data_dir=tmp_path) as first:
        lexicon_id = httpx.post(first.url + "/v1/lexicons", json=BRANDS, headers=auth(KEY_A), timeout=10).json()["id"]
    assert list((tmp_path / "lexicons").glob(f"*/{lexicon_id}.json"))
    assert KEY_A not in "".join(str(path) for path in (tmp_path / "lexicons").rglob("*"))  # a hash, not the key
    with _server(engine, data_dir=tmp_path) as second:
        listed = httpx.get(second.url + "/v1/lexicons", headers=auth(KEY_A), timeout=10).json()["data"]
        assert [item["id"] for item in listed] == [lexicon_id]
        assert httpx.get(second.url + "/v1/lexicons", headers=auth(KEY_B), timeout=10).json()["data"] == []


def test_a_stored_file_that_cannot_be_read_is_skipped_and_the_server_starts(engine, tmp_path):
    from rumik_app.serve.gate import owner_id

    with _server(engine, data_dir=tmp_path) as first:
        kept = httpx.post(first.url + "/v1/lexicons", json=BRANDS, headers=auth(KEY_A), timeout=10).json()["id"]
    folder = tmp_path / "lexicons" / owner_id(KEY_A)
    (folder / "lex_0123456789abcdef.json").write_text("{not json", encoding="utf-8")
    (folder / "lex_fedcba9876543210.json").write_text('{"name": "x", "entries": [{"grapheme": ""}]}',
                                                      encoding="utf-8")
    with _server(engine, data_dir=tmp_path) as second:
        listed = httpx.get(second.url + "/v1/lexicons", headers=auth(KEY_A), timeout=10).json()["data"]
        assert [item["id"] for item in listed] == [kept]
