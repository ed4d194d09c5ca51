"""Voice adaptation as a server job against the same run called directly, and speech served meanwhile.

    python benchmarks/voice_jobs.py                          # the smoke's base, 1.5 min of espeak-ng, 20 steps
    python benchmarks/voice_jobs.py --steps 60 --requests 20 --json out.json
    python benchmarks/voice_jobs.py --quick                  # 2 adaptations instead of 4: rougher figures

One process: espeak-ng recordings and a consent clip (training.voice.smoke), then
1. speech alone: `--requests` streamed /v1/audio/speech requests (1 s each) to a speech server of
   the smoke's base, one after another: time to first audio (TTFA);
2. direct: `create_voice` called as `rumik voice create` calls it: wall time, the mean of one run
   before the job and one after (so warm caches favour neither);
3. job: the same adaptation POSTed to /v1/voices/adaptations of that server (a zip of the
   recordings, multipart) and followed over server-sent events until `done`: wall time from the
   POST to the last event. The job's overhead is job / direct - 1 (goal: at most 5 %);
4. job + speech: a third adaptation while the requests of 1. run again: TTFA during an adaptation.
The server runs in this process (uvicorn on a thread), as `rumik serve --adapt-voices` does.
On 2 CPU cores an adaptation takes the cores the decoder would use, so 4. shows what a CPU host
costs its listeners; a GPU host trains on the GPU (not measured here).
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import httpx
import numpy as np

from evaluation.report import markdown_table
from training.voice import smoke
from training.voice.create import create_voice, smoke_config

KEY, ADMIN = "bench-api-key-0123456789", "bench-admin-key-0123456789"
SPEECH = {"model": "smoke", "input": "Hello there, how are you today?", "voice": "Ira", "response_format": "pcm",
          "stream_format": "audio", "max_seconds": 1.0, "seed": 1}


def settings(steps: int) -> list[str]:
    return ["data.min_minutes=0.3", "replay.clips=4", "replay.heldout=1", f"train.steps={steps}", "train.batch=2",
            "train.micro_batch=2", "train.warmup_steps=1", f"train.eval_every={steps}", "train.checkpoint_every=0"]


class Server:
    """A speech server of `model` with a voice library and adaptations, on a thread."""

    def __init__(self, model: str, root: Path, overrides: list[str]):
        import uvicorn

        from rumik_app.engine.local import TTSEngine
        from rumik_app.engine.scheduler import BatchScheduler
        from rumik_app.serve.adapters import SchedulerAdapter
        from rumik_app.serve.app import SpeechServer, create_app
        from rumik_app.voices.library import use_library
        from rumik_app.voices.makers import load_voice_maker

        engine = TTSEngine.from_pretrained(model, device="cpu")
        use_library(engine, root / "voices")
        maker = load_voice_maker("lora", root=root / "data" / "voice-adaptations", voices_dir=root / "voices",
                                 model=model, settings=overrides, config=root / "smoke_settings.json")
        adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=2, max_queue=8, max_prompt_tokens=256))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        app = create_app(adapter, model_name="smoke", api_key=KEY, admin_key=ADMIN, data_dir=root / "data",
                         voice_maker=maker)
        self.server = SpeechServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"), adapter)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "Server":
        self.thread.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the server did not start")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def ttfa(url: str, requests: int, stop: threading.Event | None = None) -> list[float]:
    """Seconds to the first audio byte of `requests` streamed requests, one after another (until `stop`)."""
    times = []
    for _ in range(requests):
        if stop is not None and stop.is_set():
            break
        start = time.perf_counter()
        with httpx.stream("POST", url + "/v1/audio/speech", json=SPEECH, timeout=120,
                          headers={"Authorization": f"Bearer {KEY}"}) as answer:
            answer.raise_for_status()
            first = None
            for _chunk in answer.iter_bytes():
                first = first or time.perf_counter() - start  # then read the rest, as a player would
            times.append(first)
    return times


def adapt_through(url: str, name: str, recordings: Path, consent: Path) -> float:
    """Seconds from the POST to the job's `done` event."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(recordings.iterdir()):
            archive.write(path, path.name)
    start = time.perf_counter()
    posted = httpx.post(url + "/v1/voices/adaptations", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120,
                        files=[("recordings", ("r.zip", buffer.getvalue(), "application/zip")),
                               ("consent", ("consent.wav", consent.read_bytes(), "audio/wav"))],
                        data={"name": name, "statement": smoke.STATEMENT})
    posted.raise_for_status()
    with httpx.stream("GET", url + f"/v1/voices/adaptations/{posted.json()['id']}", timeout=httpx.Timeout(30, read=600),
                      headers={"Authorization": f"Bearer {ADMIN}", "Accept": "text/event-stream"}) as stream:
        for line in stream.iter_lines():
            if line.startswith("event: ") and line != "event: progress":
                if line != "event: done":
                    raise RuntimeError(f"the job ended with {line}")
                return time.perf_counter() - start
    raise RuntimeError("the event stream ended without the job's end")


def direct_run(recordings: Path, consent: Path, cfg, folder: Path) -> float:
    """Seconds of `create_voice` as `rumik voice create` calls it."""
    start = time.perf_counter()
    create_voice("Direct", recordings, consent, smoke.STATEMENT, folder / "voices", cfg, folder / "work")
    return time.perf_counter() - start


def measure(root: Path, minutes: float, steps: int, requests: int, quick: bool = False) -> dict:
    recordings = smoke.make_recordings(root / "recordings", minutes=minutes)
    consent = smoke.make_consent(root / "consent.wav")
    overrides = settings(steps)
    cfg = smoke_config(overrides, None, root)
    with Server(cfg.model, root, overrides) as server:
        ttfa(server.url, 2)  # warm
        alone = ttfa(server.url, requests)
        first = direct_run(recordings, consent, cfg, root / "direct-1")
        stop, during = threading.Event(), []
        talker = threading.Thread(target=lambda: during.extend(ttfa(server.url, 10_000, stop)), daemon=True)
        if quick:  # one job with the requests alongside: the figures are rougher, the run half as long
            talker.start()
        job = adapt_through(server.url, "Job", recordings, consent)
        if quick:
            direct = first
        else:
            direct = (first + direct_run(recordings, consent, cfg, root / "direct-2")) / 2  # before and after
            talker.start()
            adapt_through(server.url, "Busy", recordings, consent)
        stop.set()
        talker.join(120)
    return {"minutes": minutes, "steps": steps, "direct_s": round(direct, 2), "job_s": round(job, 2),
            "overhead": round(job / direct - 1, 4), "ttfa_p50_alone_s": round(float(np.median(alone)), 3),
            "ttfa_p50_during_s": round(float(np.median(during)), 3) if during else None,
            "requests_during": len(during)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=1.5, help="espeak-ng recordings to make")
    p.add_argument("--steps", type=int, default=20, help="training steps of each adaptation")
    p.add_argument("--requests", type=int, default=10, help="speech requests for the TTFA alone")
    p.add_argument("--quick", action="store_true",
                   help="one direct run and one job with the requests alongside (2 adaptations instead of 4)")
    p.add_argument("--json", type=Path, help="write the figures here too")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="voice-jobs-") as folder:
        result = measure(Path(folder), args.minutes, args.steps, args.requests, args.quick)
    print(markdown_table(["", "seconds"], [["adaptation called directly (mean of 2)", f"{result['direct_s']:.1f}"],
                                           ["the same as a server job", f"{result['job_s']:.1f}"],
                                           ["TTFA p50, speech alone", f"{result['ttfa_p50_alone_s']:.3f}"],
                                           ["TTFA p50, during an adaptation", str(result["ttfa_p50_during_s"])]]))
    print(f"job overhead: {result['overhead']:+.1%} (goal: at most +5%); {result['requests_during']} requests "
          "served during the third adaptation")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
