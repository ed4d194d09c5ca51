"""Word timestamps on the sockets: Rumik's `WS /v1/tts/ws` and text-in `WS /v1/audio/speech/stream`.

Run: .venv/bin/python -m pytest -n0 -q tests/rumik_app/test_socket_words.py

The aligner is a stand-in (`EvenAligner`: each clip's words spread evenly over it), installed on
the running app, because the tiny checkpoint makes noise no real aligner can read; what is tested
is where the `words` frames go among the audio frames, which words they carry (as typed, in
order) and on which timeline. Accuracy on real speech is tests/evaluation/test_aligners.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
import wave

import httpx
import pytest
from websockets.asyncio.client import connect

from rumik_app.align import AlignerSet
from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.engine.stream import CROSSFADE_SECONDS
from rumik_app.serve.adapters import SchedulerAdapter
from tests.servers import ServerThread
from tests.sockets import recv, silk_socket, utterance

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
RATE = 24_000
# Two sentences of ~10 s of expected speech each: planned as two chunks (at most ~16 s a chunk).
FIRST = ("The quick brown fox jumps over the lazy dog near the river bank while the birds sing loudly in the "
         "tall green trees of the old park today.")
SECOND = ("Please pay ₹250 to the shopkeeper before you leave, and remember to bring the blue umbrella because "
          "the weather may turn wet this evening.")
CHUNK_TOKENS = 128  # ~1.3 s of audio a chunk: a few pieces each
SENTENCES = ["Please pay ₹250 today.", "Thank you, friend!"]
EDGE = 0.075  # s: the stand-in's silence at each end of a clip, more than CROSSFADE_SECONDS
TEXT_IN = {"type": "session.config", "voice": "Aisha", "seed": 40, "max_seconds": 0.4, "timestamps": True}


class EvenAligner:
    """Every word an equal share of the clip but its first and last EDGE seconds (silence, as
    speech has around it; more than the crossfade two chunks share), any language or script;
    deterministic."""

    name = "even"

    def __init__(self, delay: float = 0.0):
        self.delay = delay  # seconds each align() takes (a slow aligner)

    def covers(self, language: str, script: str) -> bool:
        return True

    def align(self, samples, sample_rate, words, language):
        time.sleep(self.delay)
        step = (len(samples) / sample_rate - 2 * EDGE) / max(1, len(words))
        return [(EDGE + i * step, EDGE + (i + 1) * step) for i in range(len(words))]


assert EDGE > CROSSFADE_SECONDS


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=4, max_queue=32, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY, max_seconds=0.5, aligners=None) as srv:  # None: timestamps refused
        yield srv


@pytest.fixture
def aligners(server):
    """Install the stand-in aligner on the running app (and take it away after the test)."""
    ctx = server.server.config.app.state.ctx

    def install(delay: float = 0.0) -> None:
        ctx.aligners = AlignerSet([EvenAligner(delay)])

    install()
    yield install
    ctx.aligners = None


def check_words(words: list[dict], typed: list[str], duration: float) -> None:
    """The typed words in order, inside the audio, starts and ends never going back."""
    assert [w["word"] for w in words] == typed
    assert all(w["kind"] == "word" for w in words)
    assert all(0.0 <= w["start"] <= w["end"] <= duration + 1e-3 for w in words), (words, duration)
    pairs = list(zip(words, words[1:], strict=False))
    assert all(a["start"] <= b["start"] and a["end"] <= b["end"] for a, b in pairs), words


# ---------------------------------------------------------------- Rumik's socket


async def silk_events(ws, frame: dict) -> tuple[list[tuple[str, object]], float]:
    """Send a frame; its events up to the terminal frame: ("audio", seconds received so far) or
    ("words", frame) or (type, frame); and the seconds of audio in all."""
    await ws.send(json.dumps(frame))
    events, received = [], 0
    while True:
        message = await recv(ws)
        if isinstance(message, bytes):
            received += len(message)
            events.append(("audio", received / 2 / RATE))
            continue
        events.append((message["type"], message))
        if message["type"] in ("done", "cancelled", "error"):
            return events, received / 2 / RATE


def test_silk_sends_each_chunks_words_after_its_audio_and_the_rest_before_done(server, aligners):
    async def go():
        async with silk_socket(server.url, KEY) as ws:
            first = await silk_events(ws, {"text": f"{FIRST} {SECOND}", "seed": 3, "timestamps": True,
                                           "max_new_tokens": CHUNK_TOKENS})
            again = await silk_events(ws, {"text": "Hello again.", "seed": 4, "max_new_tokens": 48})  # held
            return first, again
    (events, seconds), (again, again_seconds) = asyncio.run(go())
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "queued" and kinds[-1] == "done"
    done = events[-1][1]
    assert done["audio_duration"] == pytest.approx(seconds, abs=1e-3)
    assert done["aligner"] == "even" and done["missing"] is None
    said = [i for i, kind in enumerate(kinds) if kind == "words"]
    assert len(said) == 2  # one frame per chunk
    frames = [events[i][1] for i in said]
    assert all(f["request_id"] == done["request_id"] for f in frames)
    words = [w for f in frames for w in f["words"]]
    check_words(words, f"{FIRST} {SECOND}".split(), seconds)  # "₹250": one word, though read as four
    assert words[0]["start"] == pytest.approx(EDGE, abs=1e-3)
    assert words[-1]["end"] == pytest.approx(seconds - EDGE, abs=2e-3)
    last_audio = max(i for i, kind in enumerate(kinds) if kind == "audio")
    for i, frame in zip(said, frames, strict=True):
        heard = max((events[j][1] for j in range(i) if kinds[j] == "audio"), default=0.0)
        assert heard >= max(w["end"] for w in frame["words"]) - 1e-3  # after the audio its words describe
    assert said[0] < last_audio < said[1]  # chunk 0's words before the next chunk's audio ends; the rest after
    assert said[1] == len(kinds) - 2  # ... and just before done
    # the next utterance: timestamps held from the frame before, times from ITS audio's start
    again_words = [w for kind, f in again if kind == "words" for w in f["words"]]
    check_words(again_words, ["Hello", "again."], again_seconds)
    assert again_words[0]["start"] == pytest.approx(EDGE, abs=1e-3)


def test_silk_timestamps_are_refused_clearly_and_the_session_goes_on(server, aligners):
    ctx = server.server.config.app.state.ctx
    ctx.aligners = None

    async def go():
        async with silk_socket(server.url, KEY) as ws:
            _, none = await utterance(ws, {"text": "Hello.", "timestamps": True, "max_new_tokens": 48})
            aligners()
            _, ssml = await utterance(ws, {"text": "<speak>Hello.</speak>", "timestamps": True,
                                           "max_new_tokens": 48})
            _, bad = await utterance(ws, {"text": "Hello.", "timestamps": "yes"})
            audio, plain = await utterance(ws, {"text": "Hello.", "max_new_tokens": 48})  # nothing held from errors
            return none[-1], ssml[-1], bad[-1], audio, plain
    none, ssml, bad, audio, plain = asyncio.run(go())
    assert none["type"] == "error" and none["code"] == "timestamps_unavailable" and none["status"] == 400
    assert "no word timestamps" in none["message"] and "--aligner none" in none["message"]
    assert ssml["type"] == "error" and ssml["code"] == "unsupported_parameter" and "SSML" in ssml["message"]
    assert bad["type"] == "error" and bad["status"] == 422 and bad["message"].startswith("timestamps:")
    assert plain[-1]["type"] == "done" and len(audio) > 0
    assert not any(f["type"] == "words" for f in plain) and "aligner" not in plain[-1]
    resp = httpx.post(server.url + "/v1/tts", headers=AUTH, timeout=30, json={"text": "Hi.", "timestamps": True})
    assert resp.status_code == 400 and resp.json()["code"] == "unsupported_parameter"
    assert "POST /v1/audio/speech" in resp.json()["message"]


# ---------------------------------------------------------------- text in


def text_in(server):
    return connect(server.url.replace("http", "ws") + "/v1/audio/speech/stream", additional_headers=AUTH)


async def text_in_events(server, config: dict, sentences: list[str]) -> list:
    """Frames in order up to session.done: dicts, and ("audio", sentence, bytes) for binary frames."""
    ws_events, current = [], None
    async with text_in(server) as ws:
        await ws.send(json.dumps(config))
        for sentence in sentences:
            await ws.send(json.dumps({"type": "input.text", "text": sentence + " "}))
        await ws.send(json.dumps({"type": "input.done"}))
        while True:
            message = await recv(ws)
            if isinstance(message, bytes):
                ws_events.append(("audio", current, message))
                continue
            ws_events.append(message)
            if message["type"] == "audio.start":
                current = message["sentence_index"]
            if message["type"] in ("session.done", "error"):
                return ws_events


def index(events: list, kind: str, sentence: int) -> int:
    return next(i for i, e in enumerate(events)
                if isinstance(e, dict) and e["type"] == kind and e.get("sentence_index") == sentence)


def sentence_seconds(events: list, sentence: int, whole: bool) -> float:
    data = b"".join(e[2] for e in events if isinstance(e, tuple) and e[1] == sentence)
    if whole:
        with wave.open(io.BytesIO(data)) as w:
            return w.getnframes() / w.getframerate()
    return len(data) / 2 / RATE


@pytest.mark.parametrize("stream_audio", [False, True], ids=["whole-files", "streamed"])
def test_text_in_sends_each_sentences_words_after_its_audio_on_its_own_timeline(server, aligners, stream_audio):
    config = {**TEXT_IN, "stream_audio": stream_audio, "response_format": "pcm" if stream_audio else "wav"}
    events = asyncio.run(text_in_events(server, config, SENTENCES))
    assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}
    for k, sentence in enumerate(SENTENCES):
        said = index(events, "words", k)
        frame = events[said]
        assert frame["utterance_index"] == 0 and frame["aligner"] == "even" and frame["missing"] is None
        seconds = sentence_seconds(events, k, whole=not stream_audio)
        check_words(frame["words"], sentence.split(), seconds)  # "₹250": one word
        assert frame["words"][0]["start"] == pytest.approx(EDGE, abs=1e-3)  # from the start of this sentence's audio
        assert frame["words"][-1]["end"] == pytest.approx(seconds - EDGE, abs=2e-3)
        assert said > index(events, "audio.done", k)  # after its audio
        if k + 1 < len(SENTENCES):  # before the next sentence's audio ends
            ends = [i for i, e in enumerate(events) if isinstance(e, tuple) and e[1] == k + 1]
            assert said < (ends[-1] if not stream_audio else index(events, "audio.done", k + 1))
    assert index(events, "words", 1) < len(events) - 1  # the last sentence's words: before session.done


def test_text_in_a_slow_aligner_never_holds_back_the_next_sentence(server, aligners):
    aligners(delay=0.5)  # each align() takes half a second
    config = {**TEXT_IN, "stream_audio": True, "response_format": "pcm"}
    events = asyncio.run(text_in_events(server, config, SENTENCES))
    # sentence 1 starts (and plays) while sentence 0's words are still being aligned ...
    assert index(events, "audio.start", 1) < index(events, "words", 0) < index(events, "audio.done", 1)
    assert index(events, "words", 1) == len(events) - 2  # ... and every words frame is in before session.done
    assert [w["word"] for w in events[index(events, "words", 1)]["words"]] == SENTENCES[1].split()


def test_text_in_timestamps_are_refused_without_aligners(server):
    async def go():
        async with text_in(server) as ws:
            await ws.send(json.dumps({**TEXT_IN, "response_format": "pcm"}))
            return await recv(ws)
    reply = asyncio.run(go())
    assert reply["type"] == "error" and reply["param"] == "timestamps"
    assert "no word timestamps" in reply["message"]
