"""Word timestamps on the OpenAI route: one JSON answer, or SSE word events between the audio.

The tiny checkpoint makes noise no real aligner reads, so the server's aligners are replaced by a
stand-in that spreads the words evenly (tests/rumik_app/test_align_words.EvenAligner): what is
tested is the delivery (which words, in what order, against which audio). Real alignment accuracy
is tests/evaluation/test_aligners.py.
"""

from __future__ import annotations

import base64
import io
import json

import httpx
import openai
import pytest
import soundfile as sf

from rumik_app import TTSEngine
from rumik_app.align import AlignerSet
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from tests.rumik_app.test_align_words import EvenAligner
from tests.servers import ServerThread

KEY = "test-key"
# Two chunks: more than ~16 s of expected speech, each chunk capped at 1.5 s of audio to stay cheap.
LONG = ("The first part of this text is long enough to need its own chunk, and it keeps going with more words "
        "so that the planner has to cut it somewhere sensible. Then a second part follows with ₹250 and a "
        "few more words, so that there is a second chunk whose words come after its own audio.")


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=2, max_queue=8, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY) as srv:
        srv.ctx = srv.server.config.app.state.ctx
        srv.ctx.aligners = AlignerSet([EvenAligner()])
        yield srv


def post(server, body: dict, stream: bool = False):
    base = {"model": "tiny", "voice": "Ira", "seed": 3, "max_seconds": 1.5, "timestamps": True}
    return httpx.post(server.url + "/v1/audio/speech", json={**base, **body}, timeout=120,
                      headers={"Authorization": f"Bearer {KEY}"})


def test_the_openai_client_gets_the_audio_and_its_words_in_one_json_answer(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    response = client.audio.speech.create(model="tiny", voice="Ira", input="Pay ₹2,50,000 now <laugh> okay.",
                                          response_format="wav",
                                          extra_body={"timestamps": True, "seed": 4, "max_seconds": 1.5})
    body = json.loads(response.content)
    samples, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
    duration = len(samples) / rate
    assert [w["word"] for w in body["words"]] == ["Pay", "₹2,50,000", "now", "<laugh>", "okay."]
    assert body["words"][3]["kind"] == "tag"
    assert all(0 <= w["start"] <= w["end"] <= duration + 1e-3 for w in body["words"])
    assert body["segments"][0]["start"] == 0.0 and body["segments"][-1]["end"] == pytest.approx(duration, abs=2e-3)
    assert body["aligner"] == "even" and body["missing"] is None and body["seed"] == 4


def test_sse_sends_each_chunks_words_after_its_audio_and_before_the_next_chunks_audio_ends(server):
    events = []
    with httpx.stream("POST", server.url + "/v1/audio/speech", timeout=120, headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "tiny", "voice": "Ira", "input": LONG, "seed": 3, "max_seconds": 1.5,
                            "timestamps": True, "stream_format": "sse", "response_format": "pcm"}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    kinds = [e["type"] for e in events]
    words_at = [i for i, kind in enumerate(kinds) if kind == "speech.audio.words"]
    audio_at = [i for i, kind in enumerate(kinds) if kind == "speech.audio.delta"]
    assert len(words_at) == 2 and kinds[-1] == "speech.audio.done"
    assert audio_at[0] < words_at[0] < audio_at[-1]  # chunk 0's words while chunk 1 is still sounding
    assert words_at[1] < len(kinds) - 1
    done = events[-1]
    seconds = sum(len(base64.b64decode(events[i]["audio"])) for i in audio_at) / 2 / 24_000
    first, second = done["segments"]
    words = [w for i in words_at for w in events[i]["words"]]
    assert [w["word"] for w in words] == LONG.split()
    chunk = [e["words"] for e in (events[i] for i in words_at)]
    assert all(first["start"] <= w["start"] and w["end"] <= first["end"] for w in chunk[0])
    assert all(second["start"] <= w["start"] and w["end"] <= second["end"] + 1e-3 for w in chunk[1])
    assert second["end"] == pytest.approx(seconds, abs=2e-3)


@pytest.mark.parametrize(("extra", "message"), [
    ({"spans": True}, "ask for one"),
    ({"input": "Ira: Hello.\nAisha: Hi.", "dialogue": True}, "dialogue or SSML"),
])
def test_timestamps_refuse_what_they_cannot_do(server, extra, message):
    resp = post(server, {"input": "Hello there.", **extra})
    assert resp.status_code == 400 and message in resp.json()["error"]["message"]
    assert resp.json()["error"]["param"] == "timestamps"


def test_a_server_without_aligners_says_so(server):
    saved, server.ctx.aligners = server.ctx.aligners, None
    try:
        resp = post(server, {"input": "Hello there."})
    finally:
        server.ctx.aligners = saved
    assert resp.status_code == 400 and "--aligner none" in resp.json()["error"]["message"]


def test_a_batch_item_with_timestamps_gets_its_own_error(server):
    items = [{"model": "tiny", "voice": "Ira", "input": "Hello.", "max_seconds": 0.3, "seed": 1},
             {"model": "tiny", "voice": "Ira", "input": "Hello.", "max_seconds": 0.3, "timestamps": True}]
    resp = httpx.post(server.url + "/v1/audio/speech/batch", json={"items": items}, timeout=120,
                      headers={"Authorization": f"Bearer {KEY}"})
    first, second = resp.json()["results"]
    assert "audio" in first and second["error"]["param"] == "timestamps"
    assert "POST /v1/audio/speech" in second["error"]["message"]


def test_stream_words_stop_cleanly_when_the_client_leaves(server):
    """A hang-up mid-stream: the words task is cancelled, nothing waits on it."""
    import asyncio

    import numpy as np

    from rumik_app.request import SynthesisRequest
    from rumik_app.serve.words import StreamWords

    async def run():
        info = {"chunk_samples": []}
        words = StreamWords(SynthesisRequest(LONG, seed=1), server.adapter, server.ctx.aligners, info)
        assert words.chunks == 2
        info["chunk_samples"].append(24_000)
        words.push(np.zeros(24_000, np.float32))  # chunk 0 complete (no crossfade seam after it yet)
        words.push(np.zeros(1_200, np.float32))
        words.cancel()  # the client left
        await asyncio.sleep(0.05)
        assert words.worker.cancelled() or words.worker.done()
        return words

    words = asyncio.run(run())
    assert words.scheduled == 1 and len(words.pieces[0]) <= 1_200 + 1_200  # only the seam's audio is kept
