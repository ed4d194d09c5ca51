"""Command-line synthesis: text in, 24 kHz mono WAV out.

    python -m rumik_app.synthesize --model rumik-ai/rumik-oss-1 --text "नमस्ते <laugh> दोस्तों!" \
        --voice Ira --tone happy --accent Hindi --pace steady --seed 7 --out hello.wav
    python -m rumik_app.synthesize --model tiny --text "Hello." --stream --out /tmp/noise.wav
    python -m rumik_app.synthesize --model tiny --text "₹2,50,000 on 15/08/2026" --no-normalize --out x.wav
    .venv-vllm/bin/python -m rumik_app.synthesize --backend vllm --model PATH --text "..." --out x.wav

Numbers, money, dates and times are read as words (`rumik_app.normalize`; the spoken text is
printed when it differs); `--no-normalize` sends the text as typed. Prints the duration,
tokens/s and the real-time factor (seconds of audio per second of compute; above 1 is
faster than real time). `--stream` synthesises through the streaming
path and also reports the time to first audio.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

from rumik_app.audio import Audio
from rumik_app.backend_args import add_backend_arguments, backend_kwargs, quiet_vllm_logs
from rumik_app.errors import RumikError, report_user_error
from rumik_app.request import (
    DEFAULT_MODEL, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P, SynthesisRequest, resolve_seed,
)

DEFAULT_MAX_SECONDS = 20.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="hub id, local folder, or 'tiny'")
    p.add_argument("--text", required=True, help="text to speak; inline <laugh> <chuckle> <sigh> allowed")
    p.add_argument("--voice", default="Ira")
    p.add_argument("--tone", help="happy | sad | angry | excited | professional")
    p.add_argument("--accent", help="Hindi | Telugu | Tamil | Kannada | Bengali | Punjabi | Indian English")
    p.add_argument("--pace", help="slow | steady | fast")
    p.add_argument("--description", help="free-form description instead of tone/accent/pace")
    p.add_argument("--language", help="optional language code: speaking-rate estimates (long text) and the "
                   "language numbers are read in (default: per clause from the script)")
    p.add_argument("--no-normalize", action="store_true",
                   help="send the text as typed (default: numbers, money, dates, times become words)")
    p.add_argument("--seed", type=int, help="reproducible sampling; omitted = random (printed)")
    p.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE)
    p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K)
    p.add_argument("--top-p", type=float, default=DEFAULT_TOP_P)
    p.add_argument("--max-seconds", type=float, default=DEFAULT_MAX_SECONDS,
                   help="cap per utterance (per chunk for long text), at most ~30")
    p.add_argument("--stream", action="store_true", help="use the streaming path; report time to first audio")
    p.add_argument("--device", help="cuda | cpu | cuda:1 ... (default: auto)")
    p.add_argument("--dtype", help="bf16 | fp16 | fp32 (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="compile the decode step at load (CUDA graphs on CUDA; default: on for CUDA, off for CPU)")
    p.add_argument("--out", required=True, help="output .wav path")
    add_backend_arguments(p)
    args = p.parse_args(argv)
    try:
        args.backend_kwargs = backend_kwargs(args)
    except ValueError as exc:
        p.error(str(exc))
    return args


def run(args: argparse.Namespace) -> Audio:
    from rumik_app.engine import TTSEngine
    from rumik_app.prompt import validate_text

    validate_text(args.text)  # fail fast, before loading a 7 GB model
    if args.backend == "vllm":
        quiet_vllm_logs()
    engine = TTSEngine.from_pretrained(args.model, device=args.device, dtype=args.dtype, compile=args.compile,
                                       **args.backend_kwargs)
    req = SynthesisRequest(
        text=args.text, voice=args.voice, tone=args.tone, accent=args.accent, pace=args.pace,
        description=args.description, seed=resolve_seed(args.seed), temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, max_new_tokens=engine.max_new_tokens_for(args.max_seconds),
        language=args.language, normalize=not args.no_normalize,
    )
    engine.prompt_text(req)  # voice and description against this checkpoint's speakers
    spoken = req.spoken_text()
    if spoken != validate_text(args.text):
        print(f"reading: {spoken}")
    start = time.perf_counter()
    if args.stream:
        pieces, first, stats = [], None, {}
        for piece in engine.stream(req, stats=stats):
            first = first if first is not None else time.perf_counter() - start
            pieces.append(piece)
        elapsed = time.perf_counter() - start
        audio = Audio(np.concatenate(pieces) if pieces else np.zeros(0, np.float32), engine.sample_rate, req.seed)
        audio.info = {"seconds": elapsed, "first_audio_s": first, "tokens": stats["tokens"]}
    else:
        audio = engine.synthesize(req)
        elapsed = audio.info["seconds"]
    audio.save(args.out)
    tokens = audio.info["tokens"]
    print(f"wrote {args.out}: {audio.duration:.2f} s at {audio.sample_rate} Hz, seed {req.seed}")
    print(f"{tokens} tokens in {elapsed:.2f} s = {tokens / max(elapsed, 1e-9):.1f} tokens/s, "
          f"real-time factor {audio.duration / max(elapsed, 1e-9):.2f}x"
          + (f", first audio after {audio.info['first_audio_s']:.2f} s" if args.stream and audio.info.get("first_audio_s") else ""))
    return audio


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("rumik_app").setLevel(logging.INFO)  # e.g. "decode step compiled ... in 41.2 s"
    try:
        run(args)
    except (RumikError, OSError) as exc:  # a bad model, text or --out path: one line, exit 2
        return report_user_error(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
