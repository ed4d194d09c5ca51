"""Speech servers for tests: in this process (a uvicorn thread) or as a process of their own.

    with ServerThread(adapter, api_key="k") as server:      # the real app, on a free port
        httpx.get(server.url + "/health")
    proc, url = start_server_process(checkpoint, "--max-batch", "1")   # `python -m rumik_app.serve`
    BAD_INPUTS                                             # bad requests and the error each must get
    check_sigterm_drain(proc, url, speech)                 # SIGTERM: streaming finishes, queued/new refused
    check_full_batch(url, 64)                              # 64 concurrent seeded requests, every one answered
    await fetch_speech(async_client, payload)              # one streamed request: pcm, first audio, latency
    generated, data = stream_openai(client, server.health, **args)   # openai client streaming: tokens per chunk
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from rumik_app.align import DEFAULT_ALIGNERS
from rumik_app.prompt import PromptError, validate_text
from rumik_app.request import SERVER_LIMITS
from tests.conftest import made_here
from tests.warm_process import WarmProcess, start_module

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120.0
POLL_S = 0.05


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout: float = START_TIMEOUT_S,
                 proc: subprocess.Popen | WarmProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {Path(proc.log_path).read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(POLL_S * 4)
    raise TimeoutError(f"server at {url} not healthy after {timeout} s")


def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(POLL_S)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


@functools.cache
def default_aligners():
    """The server's default word aligners, loaded once per test process and shared by its in-process
    servers (each server loading pocketsphinx's dictionary again cost 0.35 s of CPU, dozens of times a
    worker). An AlignerSet keeps one lock per aligner, so servers sharing it still use each decoder
    from one thread at a time."""
    from rumik_app.serve.app import server_aligners

    return server_aligners(DEFAULT_ALIGNERS)


class ServerThread:
    """The speech app on a uvicorn server in a daemon thread (no signal handling). Without `aligners` in
    app_options it gets the default ones, as `create_app` would load them (`default_aligners`)."""

    def __init__(self, adapter, model_name: str = "tiny", shutdown_timeout: float = 10.0, **app_options):
        import uvicorn

        from rumik_app.serve.app import SpeechServer, create_app

        self.adapter = adapter
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if "aligners" not in app_options:  # a test that sets them (None, its own set) loads nothing here
            app_options["aligners"] = default_aligners()
        app = create_app(adapter, model_name=model_name, shutdown_timeout=shutdown_timeout, **app_options)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=shutdown_timeout)
        self.server = SpeechServer(config, adapter)
        self.thread = threading.Thread(target=self.server.run, name=f"speech-server-{self.port}", daemon=True)

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        wait_healthy(self.url)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=5).json()


@functools.cache
def _log_folder() -> str:
    """Where the servers' logs go: removed when this process's pytest run ends (77 had piled up in /tmp)."""
    return made_here("speech-server-logs-")


def start_server_process(checkpoint, *args: str, timeout: float = START_TIMEOUT_S):
    """`python -m rumik_app.serve --model CHECKPOINT ARGS` on a free port; returns (process, url) once healthy
    (within `timeout` s). The engine backend's server is a fork of a warm process (tests/warm_process.py:
    its own pid, signals and exit status, without 10 CPU s of imports); vLLM's, whose engine core starts
    processes of its own, a fresh interpreter (a subprocess.Popen)."""
    port = free_port()
    env = dict(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    words = ["--model", str(checkpoint), "--port", str(port), "--log-level", "warning", *args]
    log = tempfile.NamedTemporaryFile("w+", prefix="speech-server-", suffix=".log", dir=_log_folder(), delete=False)
    if "vllm" in args:
        proc = subprocess.Popen([sys.executable, "-m", "rumik_app.serve", *words], cwd=ROOT, text=True,
                                env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
                                    "PYTHONPATH", "")])}, stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = log.name  # read it to see what the server said
    else:
        proc = start_module("rumik_app.serve", words, cwd=ROOT, log=log.name, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout=timeout, proc=proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, url


# ---------------------------------------------------------------- bad requests (both backends)


def _prompt_message(fn) -> str:
    with pytest.raises(PromptError) as info:
        fn()
    return str(info.value)


BAD_INPUTS = [
    # (what, body changes, status, param, expected message or a fragment of it)
    ("unknown tag", dict(input="Hello <giggle> there"), 400, "input",
     _prompt_message(lambda: validate_text("Hello <giggle> there"))),
    ("empty input", dict(input=""), 400, "input", _prompt_message(lambda: validate_text(""))),
    ("blank input", dict(input="   "), 400, "input", _prompt_message(lambda: validate_text(""))),
    ("unknown voice", dict(voice="nova"), 400, "voice", "Unknown voice 'nova'. Choose one of: Ira, Aisha, Siya, Zoya."),
    ("too long", dict(input="a" * (SERVER_LIMITS.max_chars + 1)), 400, "input",
     _prompt_message(lambda: validate_text("a" * (SERVER_LIMITS.max_chars + 1), max_chars=SERVER_LIMITS.max_chars))),
    ("bad format", dict(response_format="wma"), 400, "response_format", "Unsupported response_format 'wma'"),
    ("unknown sample rate", dict(sample_rate=11025), 400, "sample_rate",
     "Unsupported sample_rate 11025. Choose one of: 8000, 16000, 22050, 24000, 44100, 48000 (Hz)."),
    ("rate opus cannot code", dict(response_format="opus", sample_rate=44100), 400, "sample_rate",
     "response_format 'opus' cannot use sample_rate 44100"),
    ("flac as events", dict(response_format="flac", stream_format="sse"), 400, "response_format",
     "With stream_format 'sse' choose one of: wav, pcm, mp3, opus, ulaw, alaw, aac."),
    ("unknown tone", dict(tone="sleepy"), 400, "tone", "Unknown tone 'sleepy'"),
    ("tone and instructions", dict(tone="happy", instructions="calm and warm"), 400, "instructions",
     "Give either tone/accent/pace or a free-form description, not both."),
    ("temperature", dict(temperature=5), 400, "temperature", "Temperature 5 is out of range: use 0 (greedy) to 2."),
    ("top_p", dict(top_p=0), 400, "top_p", "Top-p 0 is out of range"),
    ("top_k", dict(top_k=1000), 400, "top_k", "Top-k 1000 is out of range"),
    ("max_seconds", dict(max_seconds=90), 400, "max_seconds", "Max seconds 90 is out of range"),
    ("seed", dict(seed=-7), 400, "seed", "Seed -7 is not valid"),
    ("speed range", dict(speed=9), 400, "speed", "speed 9.0 is out of range: use 0.25 to 4.0"),
    ("speed vs pace", dict(speed=0.5, pace="fast"), 400, "speed", "speed 0.5 means pace 'slow', but pace 'fast'"),
    ("typo in extra_body", dict(temprature=0.5), 400, "temprature",
     "Unrecognized request argument supplied: temprature"),
    ("not a number", dict(temperature="hot"), 400, "temperature", "Invalid value for 'temperature'"),
    ("missing input", dict(input=None), 400, "input", "Missing required parameter: 'input'."),
    ("unknown language", dict(language="Klingon"), 400, "language", "Unknown language 'Klingon'"),
    ("unknown model", dict(model="whisper-1"), 404, "model", "The model 'whisper-1' does not exist"),
]


def assert_openai_error(resp: httpx.Response, status: int, param: str, message: str) -> None:
    """resp carries OpenAI's error body with this status, param and message (or a fragment of it)."""
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and message in error["message"], error


# ---------------------------------------------------------------- shutdown (both backends)
EXIT_WITHIN_S = 30.0


def stream_in_thread(url: str, body: dict, first: threading.Event, out: dict) -> threading.Thread:
    """POST a speech request in a thread; `out` gets status, headers and data (or error), and
    `first` is set at the first chunk (or at the end)."""
    def run() -> None:
        try:
            with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as resp:
                out["status"], out["headers"], data = resp.status_code, dict(resp.headers), b""
                for chunk in resp.iter_raw():
                    data += chunk
                    first.set()
                out["data"] = data
        except httpx.HTTPError as exc:
            out["error"] = exc
        first.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def connection_refused(url: str, body: dict) -> bool:
    try:
        httpx.post(url + "/v1/audio/speech", json=body, timeout=5)
    except httpx.ConnectError:
        return True
    return False


def check_sigterm_drain(proc: subprocess.Popen | WarmProcess, url: str, speech: dict) -> None:
    """A server started with --max-batch 1: one request streams, a second queues; on SIGTERM
    the queued one gets 503 "shutting down" with Retry-After, new connections are refused, the
    streaming one finishes byte for byte as when run alone, and the process exits in time.
    `speech` must run long enough to still stream when the second request queues."""
    alone = httpx.post(url + "/v1/audio/speech", json=speech, timeout=120).raise_for_status().content
    streaming, queued = {}, {}
    started = threading.Event()
    first = stream_in_thread(url, speech, started, streaming)
    assert started.wait(60)
    second = stream_in_thread(url, {**speech, "seed": speech.get("seed", 0) + 1, "max_seconds": 1.0},
                              threading.Event(), queued)
    wait_for(lambda: httpx.get(url + "/health").json()["queue_depth"] == 1, what="a request to queue")
    proc.send_signal(signal.SIGTERM)
    second.join(30)
    assert queued["status"] == 503 and "shutting down" in queued["data"].decode()
    assert int(queued["headers"]["retry-after"]) > 0
    wait_for(lambda: connection_refused(url, speech), timeout=10, what="new connections to be refused")
    first.join(60)
    assert streaming["status"] == 200 and streaming["data"] == alone  # finished, every byte
    proc.wait(timeout=EXIT_WITHIN_S)  # it exits by itself (the bound is ~20x what it takes)
    assert proc.returncode in (0, -signal.SIGTERM)


# ---------------------------------------------------------------- a full batch (both backends)
FULL_BATCH_SPEECH = {"model": "tiny", "voice": "Ira", "response_format": "pcm", "max_seconds": 0.32}


def check_full_batch(url: str, count: int) -> list[dict]:
    """`count` concurrent requests, each with its own seed and text (prompts of ~70 tokens: 64
    of them exceed one vLLM step's default token budget): every one is answered 200 with audio
    and its seed, and /health stays "ok". Returns the `fetch_speech` results."""
    import asyncio

    async def run() -> list[dict]:
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            return await asyncio.gather(*(fetch_speech(client, {
                **FULL_BATCH_SPEECH, "input": f"Seeded request number {i} of the full batch.", "seed": 1000 + i})
                for i in range(count)))

    results = asyncio.run(run())
    assert [r["status"] for r in results] == [200] * count
    assert [r["seed"] for r in results] == [str(1000 + i) for i in range(count)]
    assert all(len(r["pcm"]) > 0 for r in results)
    assert httpx.get(url + "/health", timeout=10).json()["status"] == "ok"
    return results


# ---------------------------------------------------------------- clients (both backends)
def pcm_samples(data: bytes) -> np.ndarray:
    """OpenAI's `pcm`: 16-bit little-endian mono samples."""
    return np.frombuffer(data, dtype="<i2")


async def fetch_speech(client: httpx.AsyncClient, payload: dict) -> dict:
    """One streamed /v1/audio/speech request: status, seed header, pcm samples, seconds to the
    first audio byte and to the end."""
    start = time.perf_counter()
    first, data = None, b""
    async with client.stream("POST", "/v1/audio/speech", json=payload) as resp:
        async for chunk in resp.aiter_raw():
            first = first if first is not None else time.perf_counter() - start
            data += chunk
    return {"status": resp.status_code, "seed": resp.headers.get("x-rumik-seed"), "pcm": pcm_samples(data),
            "first_audio_s": first, "latency_s": time.perf_counter() - start}


def stream_openai(client, health, **args) -> tuple[list[int], bytes]:
    """`client.audio.speech.with_streaming_response.create(**args)`, checked to be `audio/pcm`,
    with nothing else running: the tokens this request had generated when each chunk arrived
    (the server's `tokens_total` from `health()`, counted from the start), then the total once
    it ended, and the bytes. Audio is streamed as generated when the first chunk comes before
    the last token: the order of events, not a stopwatch."""
    start, generated, data = health()["tokens_total"], [], b""
    with client.audio.speech.with_streaming_response.create(**args) as resp:
        assert resp.headers["content-type"] == "audio/pcm"
        for chunk in resp.iter_bytes():
            generated.append(health()["tokens_total"] - start)
            data += chunk
    wait_for(lambda: health()["active"] == 0, what="the request to end")
    return [*generated, health()["tokens_total"] - start], data
