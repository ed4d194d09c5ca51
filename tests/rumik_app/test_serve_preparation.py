"""Text preparation is shared fairly: one API key's queue of texts never holds another key's request.

Run: .venv/bin/python -m pytest tests/rumik_app/test_serve_preparation.py -q
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import PREPARE_PER_CLIENT, SchedulerAdapter
from tests.servers import ServerThread, wait_for

KEY_A, KEY_B = "prep-key-a-0123456789abcdef", "prep-key-b-0123456789abcdef"
SPEECH = {"model": "tiny", "voice": "Ira", "response_format": "pcm", "seed": 3, "max_seconds": 0.3}
HELD = "Held in preparation."
OTHER_KEY_WAIT_S = 30.0  # generous: the other key's request needs one preparation thread for milliseconds


def speak(url: str, key: str, text: str, timeout: float = 120.0) -> httpx.Response:
    return httpx.post(url + "/v1/audio/speech", json={**SPEECH, "input": text},
                      headers={"Authorization": f"Bearer {key}"}, timeout=timeout)


def test_one_keys_held_texts_take_one_preparation_thread_and_another_key_is_served(tiny_checkpoint, monkeypatch):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    scheduler = BatchScheduler(engine, max_batch=2, max_queue=8, max_prompt_tokens=256)
    release, lock, inside = threading.Event(), threading.Lock(), {"now": 0, "most": 0}
    prepare = scheduler.prepare

    def slow_prepare(req, abandoned=None):  # key A's texts take as long as the test says
        if HELD in req.text:
            with lock:
                inside["now"] += 1
                inside["most"] = max(inside["most"], inside["now"])
            release.wait(120)
            with lock:
                inside["now"] -= 1
        return prepare(req, abandoned)

    monkeypatch.setattr(scheduler, "prepare", slow_prepare)
    with ServerThread(SchedulerAdapter(scheduler), api_key=(KEY_A, KEY_B)) as server, ThreadPoolExecutor(3) as pool:
        held = [pool.submit(speak, server.url, KEY_A, f"{HELD} {i}") for i in range(3)]
        try:
            wait_for(lambda: inside["now"] >= 1, what="key A's first text to be in preparation")
            other = speak(server.url, KEY_B, "Hello from another key.", timeout=OTHER_KEY_WAIT_S)
            assert other.status_code == 200 and len(other.content) > 0
            assert inside["most"] == PREPARE_PER_CLIENT  # key A never held both threads
        finally:
            release.set()
        assert [answer.result().status_code for answer in held] == [200, 200, 200]
