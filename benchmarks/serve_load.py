"""Load test of a running speech server: throughput and time to first audio per concurrency.

    python -m rumik_app.serve --model tiny --port 8000 &          # or any server speaking OpenAI's API
    python benchmarks/serve_load.py --url http://127.0.0.1:8000 --concurrency 1,4,16,64
    python benchmarks/serve_load.py --url http://gpu-box:8000 --concurrency 1,16,64 --max-seconds 8 --json out.json

For each concurrency c, c clients each send `--rounds` requests back to back (closed loop),
streaming `pcm` (24 kHz s16le) over HTTP: every request has its own seed, the same text and
the same `max_seconds`. Per level it reports seconds of audio per wall second (throughput),
the p50/p95 time to first audio (request sent -> first audio bytes received) and request
latency, and errors (any non-200 or a broken stream). The table ends with the throughput
of each level relative to concurrency 1.

Goal (CPU, tiny checkpoint, engine backend): throughput at concurrency 16 >= 8x concurrency 1.

Only HTTP is used, so the same script measures the engine backend, the vLLM backend
(issue 11) or a GPU server; `--model` defaults to the first id of GET /v1/models.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass

import httpx

GOAL_RATIO = 8.0
GOAL_CONCURRENCY = 16
SAMPLE_RATE = 24_000
BYTES_PER_SAMPLE = 2
DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog, and then it takes a long nap in the sun."
TIMEOUT_S = 600.0


@dataclass
class Result:
    ok: bool
    first_audio_s: float | None
    latency_s: float
    audio_s: float
    error: str = ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--concurrency", default="1,4,16,64", help="comma-separated client counts")
    p.add_argument("--rounds", type=int, default=2, help="requests per client per level")
    p.add_argument("--max-seconds", type=float, default=2.0, help="max_seconds of every request")
    p.add_argument("--text", default=DEFAULT_TEXT)
    p.add_argument("--voice", default="Ira")
    p.add_argument("--model", help="model id (default: the first of GET /v1/models)")
    p.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--seed", type=int, default=1000, help="request i uses seed + i")
    p.add_argument("--json", help="also write the results to this file")
    return p.parse_args(argv)


def percentile(values: list[float], q: float) -> float:
    """q-th percentile (0-100) with linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


async def one_request(client: httpx.AsyncClient, args: argparse.Namespace, model: str, seed: int) -> Result:
    body = {"model": model, "input": args.text, "voice": args.voice, "response_format": "pcm",
            "seed": seed, "max_seconds": args.max_seconds}
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


async def run_level(args: argparse.Namespace, model: str, concurrency: int, headers: dict) -> dict:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=TIMEOUT_S, limits=limits) as client:
        counter = iter(range(concurrency * args.rounds))

        async def worker() -> list[Result]:
            return [await one_request(client, args, model, args.seed + i) for i in counter]

        start = time.perf_counter()
        results = [r for batch in await asyncio.gather(*(worker() for _ in range(concurrency))) for r in batch]
        wall = time.perf_counter() - start
    good = [r for r in results if r.ok]
    ttfa = [r.first_audio_s for r in good if r.first_audio_s is not None]
    latency = [r.latency_s for r in good]
    audio = sum(r.audio_s for r in good)
    return {"concurrency": concurrency, "requests": len(results), "errors": len(results) - len(good),
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
        level = await run_level(args, model, concurrency, headers)
        print(f"concurrency {concurrency}: {level['audio_s_per_s']:.2f} audio s / s, "
              f"TTFA p50 {level['ttfa_p50_s']:.2f} s, errors {level['errors']}", flush=True)
        levels.append(level)
    report = {"url": args.url, "model": model, "max_seconds": args.max_seconds, "rounds": args.rounds, "levels": levels}
    by_c = {lv["concurrency"]: lv["audio_s_per_s"] for lv in levels}
    if 1 in by_c and GOAL_CONCURRENCY in by_c and by_c[1] > 0:
        report["ratio_c16_vs_c1"] = by_c[GOAL_CONCURRENCY] / by_c[1]
    return report


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    report = asyncio.run(run(args))
    print(table(report["levels"]))
    if "ratio_c16_vs_c1" in report:
        ratio = report["ratio_c16_vs_c1"]
        verdict = "meets" if ratio >= GOAL_RATIO else "misses"
        print(f"throughput at concurrency {GOAL_CONCURRENCY} = {ratio:.1f}x concurrency 1 ({verdict} the goal of "
              f">= {GOAL_RATIO:g}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
