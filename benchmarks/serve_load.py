"""Load test of the speech server: throughput and time to first audio per concurrency.

    python -m rumik_app.serve --model tiny --port 8000 &          # or any server speaking OpenAI's API
    python benchmarks/serve_load.py --url http://127.0.0.1:8000 --concurrency 1,4,16,64
    python benchmarks/serve_load.py --url http://gpu-box:8000 --concurrency 1,16,64 --max-seconds 8 --json out.json

    # both backends side by side: each server is started, measured and stopped in turn
    .venv/bin/python benchmarks/serve_load.py --spawn engine,vllm --checkpoint CKPT --concurrency 1,4,16,64

For each concurrency c, c clients each send `--rounds` requests back to back (closed loop),
streaming `pcm` (24 kHz s16le) over HTTP: every request has its own seed, the same text and
the same `max_seconds`. Per level it reports seconds of audio per wall second (throughput),
the p50/p95 time to first audio (request sent -> first audio bytes received) and request
latency, and errors (any non-200 or a broken stream). The table ends with the throughput
of each level relative to concurrency 1.

`--spawn engine,vllm` starts `python -m rumik_app.serve --backend B --model CHECKPOINT
--max-batch N` (with `--server-python`, default this interpreter: run it from .venv,
which has both backends) for each backend in turn, measures it, stops it with SIGTERM, and
prints one table with a row per (concurrency, backend) and each backend's throughput
relative to the first. `--server-arg` adds flags to every server (e.g.
`--server-arg=--tensor-parallel-size=2` with vllm only).

`--modes http,silk,text-in` measures the server's sockets beside HTTP streaming, in one run
on the same server, one table with a row per (concurrency, mode):
  silk     Rumik's hosted-API socket (/v1/tts/ws): each client mints one session and sends its
           requests on it one after another, as the livekit plugin's pool does; time to first
           audio is counted from the synthesis frame (the session is open already).
  text-in  WS /v1/audio/speech/stream: each request's text goes in word by word, one word
           every `--word-delay` s (an LLM's pace), then input.done; time to first audio is
           counted from the moment the first sentence's last word was sent, and `sentence s`
           is how long the first sentence took to arrive: first audio within one sentence of
           the text's arrival means TTFA < that.

  batch    POST /v1/audio/speech/batch on one connection: at concurrency c, the same c*rounds
           requests (the same seeds) go as `rounds` batches of c items, one after another; an
           item's time to first audio and latency are its batch's (the answer comes whole). The
           http mode runs beside it as the reference (added when not named), and the report
           gives batch throughput / http throughput per concurrency (`batch_vs_http`):
               python benchmarks/serve_load.py --url URL --modes batch --concurrency 64 --rounds 1

Goals: CPU, tiny checkpoint, engine backend: throughput at concurrency 16 >= 8x concurrency 1;
a batch of 64 items on one connection at least the throughput of 64 concurrent requests;
the Silk socket's TTFA no worse than HTTP's and the same throughput; text-in's first audio
within one sentence. GPU, real width at 36 layers: the vLLM backend >= 3x the engine backend
at concurrency 64.

Only the server's public API is used, so the same script measures the engine backend, the
vLLM backend or a GPU server; `--model` defaults to the first id of GET /v1/models.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

GOAL_RATIO = 8.0
GOAL_CONCURRENCY = 16
SAMPLE_RATE = 24_000
BYTES_PER_SAMPLE = 2
DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog. Then it takes a long nap in the warm sun."
MODES = ("http", "silk", "text-in", "batch")
BATCH_PATH = "/v1/audio/speech/batch"
GOAL_BATCH_RATIO = 1.0  # a batch of c items vs c concurrent requests: at least as fast
DEFAULT_WORD_DELAY_S = 0.05  # ~20 words/s: an LLM streaming its answer
FRAME_RATE_HZ, TOKENS_PER_FRAME = 12.5, 8  # Silk takes max_new_tokens: 100 tokens = 1 s
TIMEOUT_S = 600.0
SERVER_START_TIMEOUT_S = 900.0  # loading, compiling (CUDA) or starting vLLM's engine processes
SERVER_STOP_TIMEOUT_S = 120.0
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    ok: bool
    first_audio_s: float | None
    latency_s: float
    audio_s: float
    error: str = ""
    sentence_s: float | None = None  # text-in: how long the first sentence took to arrive


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="a running server's base URL, e.g. http://127.0.0.1:8000")
    target.add_argument("--spawn", help="comma-separated backends (engine,vllm): start a server on --checkpoint "
                                        "for each in turn and report them side by side")
    p.add_argument("--checkpoint", help="--spawn: the model the servers load (folder, hub id or 'tiny')")
    p.add_argument("--max-batch", type=int, default=16, help="--spawn: the servers' --max-batch")
    p.add_argument("--server-python", default=sys.executable,
                   help="--spawn: the interpreter that runs the servers (default: this one)")
    p.add_argument("--server-arg", action="append", default=[],
                   help="--spawn: one more flag for every server, e.g. --server-arg=--dtype=bf16 (repeatable)")
    p.add_argument("--vllm-server-arg", action="append", default=[],
                   help="--spawn: one more flag for the vllm server only (the engine's server refuses vLLM's "
                        "options), e.g. --vllm-server-arg=--gpu-memory-utilization=0.45 (repeatable)")
    p.add_argument("--concurrency", default="1,4,16,64", help="comma-separated client counts")
    p.add_argument("--rounds", type=int, default=2, help="requests per client per level")
    p.add_argument("--max-seconds", type=float, default=2.0, help="max_seconds of every request")
    p.add_argument("--text", default=DEFAULT_TEXT)
    p.add_argument("--voice", default="Ira")
    p.add_argument("--model", help="model id (default: the first of GET /v1/models)")
    p.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--seed", type=int, default=1000, help="request i uses seed + i")
    p.add_argument("--modes", default="http", help=f"comma-separated, of {', '.join(MODES)} (module docstring)")
    p.add_argument("--word-delay", type=float, default=DEFAULT_WORD_DELAY_S,
                   help="text-in: seconds between words as the text is sent")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args(argv)
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.mode_list or any(m not in MODES for m in args.mode_list):
        p.error(f"--modes takes {', '.join(MODES)} (comma-separated), not {args.modes!r}")
    if "batch" in args.mode_list and "http" not in args.mode_list:
        args.mode_list.insert(0, "http")  # the batch is measured against concurrent single requests
    if args.spawn and not args.checkpoint:
        p.error("--spawn needs --checkpoint (the model the servers load)")
    return args


def percentile(values: list[float], q: float) -> float:
    """q-th percentile (0-100) with linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def speech_body(args: argparse.Namespace, model: str, seed: int) -> dict:
    """One speech request: streamed `pcm`, this seed, the text and max_seconds of every request."""
    return {"model": model, "input": args.text, "voice": args.voice, "response_format": "pcm",
            "seed": seed, "max_seconds": args.max_seconds}


async def one_request(client: httpx.AsyncClient, args: argparse.Namespace, model: str, seed: int) -> Result:
    body = speech_body(args, model, seed)
    start = time.perf_counter()
    first, received = None, 0
    try:
        async with client.stream("POST", "/v1/audio/speech", json=body) as resp:
            if resp.status_code != 200:
                await resp.aread()
                error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                return Result(False, None, time.perf_counter() - start, 0.0, error)
            async for chunk in resp.aiter_raw():
                if chunk and first is None:
                    first = time.perf_counter() - start
                received += len(chunk)
    except httpx.HTTPError as exc:
        return Result(False, first, time.perf_counter() - start, 0.0, f"{type(exc).__name__}: {exc}")
    audio_s = received / BYTES_PER_SAMPLE / SAMPLE_RATE
    return Result(True, first, time.perf_counter() - start, audio_s)


async def batch_worker(client: httpx.AsyncClient, args: argparse.Namespace, model: str, seeds: list[int],
                       size: int) -> list[Result]:
    """`seeds` as batches of `size` items on one connection, one batch after another; each item's
    first audio and latency are its batch's (the answer comes whole)."""
    results = []
    for at in range(0, len(seeds), size):
        group = seeds[at:at + size]
        start = time.perf_counter()
        try:
            resp = await client.post(BATCH_PATH, json={"items": [speech_body(args, model, s) for s in group]})
            answers = resp.json().get("results") if resp.status_code == 200 else None
            error = "" if answers is not None else f"HTTP {resp.status_code}: {resp.text[:200]}"
        except (httpx.HTTPError, ValueError) as exc:
            answers, error = None, f"{type(exc).__name__}: {exc}"
        latency = time.perf_counter() - start
        if answers is None:
            results += [Result(False, None, latency, 0.0, error) for _ in group]
            continue
        for answer in answers:
            if "error" in answer:
                failure = answer["error"]
                results.append(Result(False, None, latency, 0.0,
                                      f"{failure.get('code')}: {str(failure.get('message'))[:200]}"))
            else:
                audio = len(base64.b64decode(answer["audio"])) / BYTES_PER_SAMPLE / answer["sample_rate"]
                results.append(Result(True, latency, latency, audio))
    return results


def _ws_url(args: argparse.Namespace, path: str) -> str:
    return args.url.replace("https://", "wss://").replace("http://", "ws://") + path


async def _audio_until(ws, start: float, end_type: str) -> tuple[float | None, int, str]:
    """Read a socket up to a frame of `end_type`: (first audio s after `start`, audio bytes, error)."""
    first, received = None, 0
    while True:
        message = await asyncio.wait_for(ws.recv(), TIMEOUT_S)
        if isinstance(message, bytes):
            first = first if first is not None else time.perf_counter() - start
            received += len(message)
            continue
        frame = json.loads(message)
        if frame.get("type") == "error" or (frame.get("type") == "audio.done" and frame.get("error")):
            return first, received, f"{frame.get('code')}: {str(frame.get('message'))[:200]}"
        if frame.get("type") == end_type:
            return first, received, ""


async def silk_worker(client: httpx.AsyncClient, args: argparse.Namespace, seeds) -> list[Result]:
    """One pooled Silk session; its requests one after another."""
    from websockets.asyncio.client import connect

    minted = (await client.post("/v1/tts/ws-connect", json={"text": "init", "model": "mulberry"})).raise_for_status()
    tokens = max(TOKENS_PER_FRAME, int(args.max_seconds * FRAME_RATE_HZ) * TOKENS_PER_FRAME)
    results = []
    async with connect(f"{minted.json()['ws_url']}?token={minted.json()['token']}", max_size=2**22) as ws:
        for seed in seeds:
            start = time.perf_counter()
            await ws.send(json.dumps({"text": args.text, "speaker": args.voice, "seed": seed,
                                      "max_new_tokens": tokens}))
            first, received, error = await _audio_until(ws, start, "done")
            results.append(Result(not error, first, time.perf_counter() - start,
                                  received / BYTES_PER_SAMPLE / SAMPLE_RATE, error))
    return results


def _first_sentence_words(text: str) -> int:
    """Words up to and including the first one that ends a sentence (the server cuts after it)."""
    words = text.split(" ")
    return next((i + 1 for i, w in enumerate(words) if w.rstrip("\"')]").endswith((".", "!", "?", "।"))),
                len(words))


async def text_in_worker(args: argparse.Namespace, headers: dict, seeds) -> list[Result]:
    """One text-in session; each request's text word by word, then input.done."""
    from websockets.asyncio.client import connect

    words, results = args.text.split(" "), []
    cut = _first_sentence_words(args.text)
    async with connect(_ws_url(args, "/v1/audio/speech/stream"), additional_headers=headers, max_size=2**22) as ws:
        for seed in seeds:
            await ws.send(json.dumps({"type": "session.config", "voice": args.voice, "response_format": "pcm",
                                      "stream_audio": True, "seed": seed, "max_seconds": args.max_seconds}))
            began = time.perf_counter()
            sentence_done = asyncio.get_running_loop().create_future()

            async def type_text(sentence_done: asyncio.Future) -> None:
                for i, word in enumerate(words):
                    await ws.send(json.dumps({"type": "input.text", "text": word + " "}))
                    if i + 1 == cut:
                        sentence_done.set_result(time.perf_counter())
                    await asyncio.sleep(args.word_delay)
                await ws.send(json.dumps({"type": "input.done"}))
            typing = asyncio.create_task(type_text(sentence_done))
            first, received, error = await _audio_until(ws, began, "session.done")
            await typing
            sent = sentence_done.result()
            ttfa = None if first is None else began + first - sent
            results.append(Result(not error, ttfa, time.perf_counter() - began,
                                  received / BYTES_PER_SAMPLE / SAMPLE_RATE, error, sentence_s=sent - began))
    return results


async def run_level(args: argparse.Namespace, model: str, concurrency: int, headers: dict,
                    mode: str = "http") -> dict:
    connections = 1 if mode == "batch" else concurrency  # a batch: one connection
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=TIMEOUT_S, limits=limits) as client:
        counter = iter(range(concurrency * args.rounds))

        async def worker() -> list[Result]:
            seeds = [args.seed + i for i in [next(counter) for _ in range(args.rounds)]]
            if mode == "silk":
                return await silk_worker(client, args, seeds)
            if mode == "text-in":
                return await text_in_worker(args, headers, seeds)
            return [await one_request(client, args, model, seed) for seed in seeds]

        start = time.perf_counter()
        if mode == "batch":  # the same seeds as the other modes, `rounds` batches of `concurrency` items
            seeds = [args.seed + i for i in range(concurrency * args.rounds)]
            workers = [batch_worker(client, args, model, seeds, concurrency)]
        else:
            workers = [worker() for _ in range(concurrency)]
        batches = await asyncio.gather(*workers, return_exceptions=True)
        wall = time.perf_counter() - start
    results = [r for batch in batches if not isinstance(batch, BaseException) for r in batch]
    results += [Result(False, None, wall, 0.0, f"{type(b).__name__}: {b}") for b in batches
                if isinstance(b, BaseException)]
    good = [r for r in results if r.ok]
    ttfa = [r.first_audio_s for r in good if r.first_audio_s is not None]
    latency = [r.latency_s for r in good]
    audio = sum(r.audio_s for r in good)
    sentence = [r.sentence_s for r in good if r.sentence_s is not None]
    return {"mode": mode, "concurrency": concurrency, "requests": len(results),
            "sentence_p50_s": percentile(sentence, 50) if sentence else None, "errors": len(results) - len(good),
            "error_examples": sorted({r.error for r in results if not r.ok})[:3], "wall_s": wall,
            "audio_s": audio, "audio_s_per_s": audio / wall if wall else 0.0,
            "ttfa_p50_s": percentile(ttfa, 50), "ttfa_p95_s": percentile(ttfa, 95),
            "latency_p50_s": percentile(latency, 50), "latency_p95_s": percentile(latency, 95)}


def table(levels: list[dict]) -> str:
    base = next((lv["audio_s_per_s"] for lv in levels if lv["concurrency"] == 1), None)
    lines = ["| concurrency | requests | errors | audio s / wall s | vs c=1 | TTFA p50 | TTFA p95 "
             "| latency p50 | latency p95 |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for lv in levels:
        ratio = f"{lv['audio_s_per_s'] / base:.1f}x" if base else "-"
        lines.append(f"| {lv['concurrency']} | {lv['requests']} | {lv['errors']} | {lv['audio_s_per_s']:.2f} "
                     f"| {ratio} | "
                     f"{lv['ttfa_p50_s']:.2f} s | {lv['ttfa_p95_s']:.2f} s | {lv['latency_p50_s']:.2f} s | "
                     f"{lv['latency_p95_s']:.2f} s |")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=TIMEOUT_S) as client:
        model = args.model or (await client.get("/v1/models")).raise_for_status().json()["data"][0]["id"]
        warm = await one_request(client, args, model, args.seed)  # first-request costs stay out of the table
        if not warm.ok:
            raise SystemExit(f"warm-up request failed: {warm.error}")
    levels = []
    for concurrency in [int(c) for c in args.concurrency.split(",") if c.strip()]:
        for mode in args.mode_list:
            level = await run_level(args, model, concurrency, headers, mode)
            print(f"concurrency {concurrency} {mode}: {level['audio_s_per_s']:.2f} audio s / s, "
                  f"TTFA p50 {level['ttfa_p50_s']:.2f} s, errors {level['errors']}", flush=True)
            levels.append(level)
    report = {"url": args.url, "model": model, "max_seconds": args.max_seconds, "rounds": args.rounds,
              "levels": [lv for lv in levels if lv["mode"] == args.mode_list[0]]}
    if len(args.mode_list) > 1 or args.mode_list != ["http"]:
        report["modes"] = {mode: {"levels": [lv for lv in levels if lv["mode"] == mode]} for mode in args.mode_list}
    by_c = {lv["concurrency"]: lv["audio_s_per_s"] for lv in levels if lv["mode"] == args.mode_list[0]}
    if "batch" in args.mode_list:
        report["batch_vs_http"] = batch_ratios(levels)
    if 1 in by_c and GOAL_CONCURRENCY in by_c and by_c[1] > 0:
        report["ratio_c16_vs_c1"] = by_c[GOAL_CONCURRENCY] / by_c[1]
    return report


def side_by_side(reports: dict[str, dict], what: str = "backend") -> str:
    """One row per (concurrency, backend or mode); `vs first` is throughput relative to the first."""
    names = list(reports)
    by_level = {name: {lv["concurrency"]: lv for lv in rep["levels"]} for name, rep in reports.items()}
    lines = [f"| concurrency | {what} | requests | errors | audio s / wall s | vs {names[0]} | TTFA p50 | TTFA p95 "
             "| latency p50 | latency p95 |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in sorted({c for levels in by_level.values() for c in levels}):
        base = by_level[names[0]].get(c)
        for name in names:
            lv = by_level[name].get(c)
            if lv is None:
                continue
            ratio = f"{lv['audio_s_per_s'] / base['audio_s_per_s']:.1f}x" if base and base["audio_s_per_s"] else "-"
            lines.append(f"| {c} | {name} | {lv['requests']} | {lv['errors']} | {lv['audio_s_per_s']:.2f} | {ratio} "
                         f"| {lv['ttfa_p50_s']:.2f} s | {lv['ttfa_p95_s']:.2f} s | {lv['latency_p50_s']:.2f} s "
                         f"| {lv['latency_p95_s']:.2f} s |")
    return "\n".join(lines)


def batch_ratios(levels: list[dict]) -> dict[int, float]:
    """Per concurrency c: throughput of c items in batches over that of c concurrent requests."""
    http = {lv["concurrency"]: lv["audio_s_per_s"] for lv in levels if lv["mode"] == "http"}
    return {lv["concurrency"]: lv["audio_s_per_s"] / http[lv["concurrency"]] for lv in levels
            if lv["mode"] == "batch" and http.get(lv["concurrency"])}


def batch_verdict(report: dict) -> str:
    """Whether a batch of c items matched c concurrent requests' throughput, per c."""
    modes = report.get("modes", {})
    lines = []
    for c, ratio in sorted(report.get("batch_vs_http", {}).items()):
        batch = next(lv for lv in modes["batch"]["levels"] if lv["concurrency"] == c)
        http = next(lv for lv in modes["http"]["levels"] if lv["concurrency"] == c)
        verdict = "meets" if ratio >= GOAL_BATCH_RATIO else "misses"
        lines.append(f"batch of {c} items on one connection: {batch['audio_s_per_s']:.2f} audio s / s; {c} concurrent "
                     f"requests: {http['audio_s_per_s']:.2f}; batch = {ratio:.2f}x concurrent ({verdict} the goal "
                     f"of >= {GOAL_BATCH_RATIO:g}x)")
    return "\n".join(lines)


def text_in_verdict(report: dict | None) -> str:
    """Whether text-in's first audio came within one sentence of the text's arrival."""
    if not report:
        return ""
    lines = []
    for lv in report["levels"]:
        sentence, ttfa = lv.get("sentence_p50_s"), lv["ttfa_p50_s"]
        if sentence is None:
            continue
        verdict = "within" if ttfa < sentence else "later than"
        lines.append(f"text-in, concurrency {lv['concurrency']}: first audio {ttfa:.2f} s after the first sentence "
                     f"arrived, which took {sentence:.2f} s to arrive: {verdict} one sentence")
    return "\n".join(lines)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(args: argparse.Namespace, backend: str) -> tuple[subprocess.Popen, str, Path]:
    """`python -m rumik_app.serve --backend BACKEND` on a free port; (process, url, log) once healthy."""
    port = _free_port()
    cmd = [args.server_python, "-m", "rumik_app.serve", "--backend", backend, "--model", args.checkpoint,
           "--port", str(port), "--max-batch", str(args.max_batch), "--max-queue", "1024", "--log-level", "warning",
           *args.server_arg, *(args.vllm_server_arg if backend == "vllm" else [])]
    log = Path(tempfile.mkstemp(prefix=f"serve-{backend}-", suffix=".log")[1])
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the {backend} server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url, log
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    stop_server(proc)
    raise SystemExit(f"the {backend} server was not healthy after {SERVER_START_TIMEOUT_S:.0f} s (log: {log})")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM (the server drains and shuts its backend down), then kill if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def spawn_and_measure(args: argparse.Namespace) -> dict:
    reports = {}
    for backend in [b.strip() for b in args.spawn.split(",") if b.strip()]:
        print(f"== {backend}: starting the server on {args.checkpoint}", flush=True)
        proc, url, log = start_server(args, backend)
        try:
            reports[backend] = asyncio.run(run(argparse.Namespace(**{**vars(args), "url": url})))
        finally:
            stop_server(proc)
        log.unlink(missing_ok=True)
        print(table(reports[backend]["levels"]), flush=True)
    return {"checkpoint": args.checkpoint, "max_batch": args.max_batch, "server_args": args.server_arg,
            "vllm_server_args": args.vllm_server_arg, "backends": reports}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.spawn:
        report = spawn_and_measure(args)
        print(side_by_side(report["backends"]))
    else:
        report = asyncio.run(run(args))
        if "modes" in report:
            print(side_by_side(report["modes"], what="mode"))
            print(text_in_verdict(report["modes"].get("text-in")))
            if verdict := batch_verdict(report):
                print(verdict)
        else:
            print(table(report["levels"]))
        if "ratio_c16_vs_c1" in report:
            ratio = report["ratio_c16_vs_c1"]
            verdict = "meets" if ratio >= GOAL_RATIO else "misses"
            print(f"throughput at concurrency {GOAL_CONCURRENCY} = {ratio:.1f}x concurrency 1 ({verdict} the goal "
                  f"of >= {GOAL_RATIO:g}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
