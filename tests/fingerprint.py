"""Behaviour fingerprint for refactors: what the public entry points produce, hashed, as JSON.

    .venv/bin/python tests/fingerprint.py /tmp/before-engine.json                  # engine backend
    .venv/bin/python tests/fingerprint.py /tmp/before-vllm.json --backend vllm
    ... change the code ...
    .venv/bin/python tests/fingerprint.py /tmp/after-engine.json && diff /tmp/before-engine.json /tmp/after-engine.json

Not a test (pytest does not collect it): a code-shape change runs it before and after and
shows the two files are equal. It touches only interfaces a refactor must keep: the library
(`load_engine`: synthesize, stream with a crossfaded 3-chunk text, generate_batch in
"sample" mode: token ids, log-probs, stop decisions), the speech server as a client sees it
(`python -m rumik_app.serve`: OpenAI's route, Rumik's /v1/tts, the text-in socket, and the
error each gives for bad values) and the CLI (`python -m rumik_app.synthesize`: the WAV and
the error line). Everything runs on a random checkpoint (hidden 256, head size 64, so vLLM's
CPU attention takes it) in float32 with fixed seeds.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # the repository, not tests/ (whose vllm/ folder would shadow vLLM)
os.environ.setdefault("RUMIK_CPU_DTYPE", "fp32")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from tests.servers import free_port, wait_healthy  # noqa: E402

SHORT = "Hello there, this is one sentence."
LONG = " ".join(f"Sentence number {n} of a long text, read in chunks." for n in range(1, 17))
BAD_VALUES = {"temperature": 3, "top_k": 500, "top_p": 0, "repetition_penalty": 5, "seed": -7}


def sha(data: bytes | np.ndarray) -> str:
    raw = data.tobytes() if isinstance(data, np.ndarray) else data
    return hashlib.sha256(raw).hexdigest()[:16]


def library(path: str, backend: str) -> dict:
    import torch

    from rumik_app import SynthesisRequest, load_engine

    options = {"dtype": "float32"} if backend == "vllm" else {"device": "cpu", "dtype": "float32"}
    engine = load_engine(path, backend=backend, **options)
    out = {}
    for name, req in {
        "sampled": SynthesisRequest(SHORT, seed=7, max_new_tokens=160),
        "greedy": SynthesisRequest(SHORT, seed=7, temperature=0, max_new_tokens=160, tone="happy"),
        "penalised": SynthesisRequest(SHORT, seed=9, repetition_penalty=1.3, top_k=50, top_p=0.9,
                                      max_new_tokens=160, description="warm and calm"),
    }.items():
        audio = engine.synthesize(req)
        out[f"synthesize/{name}"] = [audio.info["tokens"], audio.info["finish_reasons"], sha(audio.samples)]
    stats: dict = {}
    long = SynthesisRequest(LONG, seed=11, max_new_tokens=160)
    pieces = list(engine.stream(long, stats=stats))
    out["stream/long"] = [len(engine.plan(long)), stats["tokens"], stats["finish_reasons"],
                          sha(np.concatenate(pieces))]
    rollouts = engine.generate_batch([SynthesisRequest(SHORT, seed=3, max_new_tokens=96),
                                      SynthesisRequest("Another one.", seed=5, max_new_tokens=64, voice="Zoya")],
                                     num_samples=2, stop_mode="sample")
    out["generate_batch/sample"] = [sha(rollouts.token_ids.numpy()), rollouts.finish_reasons,
                                    sha(rollouts.stop_decisions.numpy()), sha(rollouts.log_probs.numpy()),
                                    sha(rollouts.stop_log_probs.numpy()), rollouts.seeds]
    if hasattr(engine, "close"):
        engine.close()
    del engine
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return out


def server(python: str, path: str, backend: str) -> dict:
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([python, "-m", "rumik_app.serve", "--model", path, "--port", str(port), "--backend",
                             backend, "--dtype", "float32", "--max-seconds", "2"], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)
    proc.log_path = log.name
    out = {}
    try:
        wait_healthy(url, timeout=300, proc=proc)
        speech = {"model": "tts-1", "input": SHORT, "voice": "Ira", "response_format": "pcm", "seed": 7,
                  "temperature": 0.7, "top_k": 40, "top_p": 0.95, "repetition_penalty": 1.1, "max_seconds": 1.5,
                  "tone": "happy"}
        resp = httpx.post(url + "/v1/audio/speech", json=speech, timeout=120)
        out["openai/speech"] = [resp.status_code, resp.headers.get("x-rumik-seed"), sha(resp.content)]
        silk = {"text": "[happy] " + SHORT, "model": "mulberry", "speaker": "aisha", "seed": 7, "temperature": 0.7,
                "top_k": 40, "max_new_tokens": 120}
        resp = httpx.post(url + "/v1/tts", json=silk, timeout=120)
        out["silk/tts"] = [resp.status_code, resp.headers.get("x-rumik-seed"), sha(resp.content)]
        out["text_in/stream"] = asyncio.run(_text_in(port))
        for field, value in BAD_VALUES.items():
            resp = httpx.post(url + "/v1/audio/speech", json={**speech, field: value}, timeout=30)
            out[f"openai/bad/{field}"] = [resp.status_code, resp.json()]
            resp = httpx.post(url + "/v1/tts", json={**silk, field: value}, timeout=30)
            out[f"silk/bad/{field}"] = [resp.status_code, resp.json()]
    finally:
        proc.terminate()
        proc.wait(60)
    return out


async def _text_in(port: int) -> list:
    import websockets

    frames: list = []
    audio = b""
    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/audio/speech/stream") as ws:
        await ws.send(json.dumps({"type": "session.config", "voice": "Siya", "response_format": "pcm",
                                  "stream_audio": True, "seed": 21, "max_seconds": 1.0, "temperature": 0.6}))
        for delta in ("First sen", "tence here. Second", " one now! ", "And a third."):
            await ws.send(json.dumps({"type": "input.text", "text": delta}))
        await ws.send(json.dumps({"type": "input.done"}))
        while True:
            message = await asyncio.wait_for(ws.recv(), 120)
            if isinstance(message, bytes):
                audio += message
                continue
            event = json.loads(message)
            frames.append(event)
            if event["type"] == "session.done":
                await ws.send(json.dumps({"type": "session.config", "temperature": 9}))
            if event["type"] == "error":
                break
    return [frames, sha(audio)]


def cli(python: str, path: str, backend: str, tmp: Path) -> dict:
    out = {}
    wav = tmp / "cli.wav"
    base = [python, "-m", "rumik_app.synthesize", "--model", path, "--backend", backend, "--dtype", "float32",
            "--quiet", "--out", str(wav)]
    proc = subprocess.run([*base, "--text", SHORT, "--seed", "7", "--temperature", "0.7", "--top-k", "40",
                           "--max-seconds", "1.5", "--voice", "Zoya", "--pace", "slow"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    out["cli/wav"] = [proc.returncode, sha(wav.read_bytes()) if wav.exists() else None]
    for field, value in BAD_VALUES.items():
        proc = subprocess.run([*base, "--text", SHORT, f"--{field.replace('_', '-')}", str(value)], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        out[f"cli/bad/{field}"] = [proc.returncode, proc.stderr.strip().splitlines()[-1:]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--backend", choices=("engine", "vllm"), default="engine")
    parser.add_argument("--skip", nargs="*", default=(), choices=("library", "server", "cli"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "ckpt")
        subprocess.run([sys.executable, "-m", "rumik_app.tiny", path, "--hidden", "256", "--seed", "0"], cwd=ROOT,
                       check=True, capture_output=True)
        result = {}
        if "library" not in args.skip:
            result.update(library(path, args.backend))
        if "server" not in args.skip:
            result.update(server(sys.executable, path, args.backend))
        if "cli" not in args.skip:
            result.update(cli(sys.executable, path, args.backend, Path(tmp)))
    Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {args.out}: {len(result)} entries")


if __name__ == "__main__":
    main()
