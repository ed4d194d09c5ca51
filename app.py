"""rumik-oss-1 demo: synthesise, compare and rate, evaluate (Gradio; DESIGN §1, §3, §8).

    python app.py                                   # rumik-ai/rumik-oss-1 from the HF cache / hub
    python app.py --model /models/rumik-oss-1       # a local checkpoint folder
    python app.py --model tiny --port 7861          # random weights: checks the pipeline, sounds like noise
    python app.py --host 0.0.0.0 --share            # reachable from other machines / a public link
    .venv-vllm/bin/python app.py --backend vllm     # rumik-oss-1 on vLLM's engine (./setup.sh --vllm)

Tabs: Synthesise (streamed audio, every prompt control, the exact prompt string), Compare &
rate (blind A/B ratings stored in SQLite, IndicEmo/NoVA exports and results), Evaluate
(WER/CER/GCER and NoVA verdicts for uploaded clips). Systems: rumik-oss-1 (`--model`),
the espeak-ng classical baseline, and tiny. If the model cannot be loaded the app still
starts, with a banner giving the reason and the fix. Every action is an API endpoint;
`/synthesize` returns a 24 kHz WAV (see the "Use via API" link at the bottom of the page).

This file is the Gradio layer only; the work is in `webapp/`, `rumik_app/` and `evaluation/`.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import gradio as gr

from rumik_app.backend_args import add_backend_arguments, backend_kwargs
from rumik_app.checkpoint import DEFAULT_MODEL
from webapp.common import ClipFolder
from webapp.evaluate_tab import build_evaluate_tab
from webapp.rate_tab import RateHandlers, build_rate_tab
from webapp.ratings import RatingStore
from webapp.synth_tab import SynthHandlers, build_synth_tab
from webapp.systems import SYSTEM_RUMIK, SystemRegistry

TITLE = "rumik-oss-1: expressive Indic text-to-speech"
DEFAULT_PORT = 7860
DEFAULT_DATA_DIR = "outputs/app"
DEFAULT_CONCURRENCY = 4  # light events (preview, submit, results)
QUEUE_MAX_SIZE = 64
MAX_UPLOAD = "200mb"  # hard cap on one upload; the Evaluate tab reports smaller limits per file
CSS = """
#prompt-preview textarea { font-family: ui-monospace, monospace; }
#model-banner:has(h3, p) { background: #fff4e5; border-left: 4px solid #f59e0b; padding: 0.6em 1em; border-radius: 6px; }
"""
# System fonts only: the page must look right offline, and the OS Indic fonts (fonts-indic,
# Noto) cover every script the model reads.
THEME_FONTS = ["ui-sans-serif", "system-ui", "Noto Sans", "sans-serif"]
INTRO = (
    f"# {TITLE}\n"
    "22 Indian languages and English, four voices, tone / accent / pace, and inline `<laugh>`, `<chuckle>`, "
    "`<sigh>`. Open model: [rumik-ai/rumik-oss-1](https://huggingface.co/rumik-ai/rumik-oss-1)."
)


def build_demo(model: str = DEFAULT_MODEL, device: str | None = None, dtype: str | None = None,
               data_dir: str | os.PathLike = DEFAULT_DATA_DIR, preload: bool = True,
               backend_args: dict | None = None) -> gr.Blocks:
    """The whole app. `preload` loads `model` now so the banner can say whether it worked.
    backend_args: `TTSEngine.from_pretrained`'s backend ("engine" | "vllm") and vLLM options."""
    registry = SystemRegistry(model=model, device=device, dtype=dtype, backend_args=backend_args)
    if preload:
        registry.preload(SYSTEM_RUMIK)
    data = Path(data_dir)
    store = RatingStore(data / "ratings.sqlite")
    synth = SynthHandlers(registry, ClipFolder())
    rate = RateHandlers(registry, synth, store, data)
    default, choices = registry.default_choice(), registry.choices()

    with gr.Blocks(title=TITLE) as demo:
        gr.Markdown(INTRO)
        banner = gr.Markdown(registry.banner_markdown(), elem_id="model-banner")
        with gr.Tab("Synthesise", id="synthesise"):
            build_synth_tab(synth, default, choices)
        with gr.Tab("Compare & rate", id="rate"):
            build_rate_tab(rate, default, choices)
        with gr.Tab("Evaluate", id="evaluate"):
            build_evaluate_tab()
        demo.load(registry.banner_markdown, outputs=banner, api_name="model_status", queue=False,
                  show_progress="hidden")
    demo.registry, demo.rating_store = registry, store  # for tests and embedding scripts
    return demo


def launch(demo: gr.Blocks, host: str, port: int, share: bool = False, data_dir: str | os.PathLike = DEFAULT_DATA_DIR,
           prevent_thread_lock: bool = False):
    """Queue (with concurrency limits) and serve the app."""
    demo.queue(default_concurrency_limit=DEFAULT_CONCURRENCY, max_size=QUEUE_MAX_SIZE)
    return demo.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=prevent_thread_lock,
                       allowed_paths=[str(Path(data_dir).resolve())], max_file_size=MAX_UPLOAD, ssr_mode=False,
                       theme=_theme(), css=CSS,
                       quiet=prevent_thread_lock)


def _theme() -> gr.themes.Base:
    return gr.themes.Default(font=[gr.themes.Font(f) for f in THEME_FONTS],
                             font_mono=[gr.themes.Font("ui-monospace"), gr.themes.Font("monospace")])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=os.environ.get("RUMIK_MODEL", DEFAULT_MODEL),
                   help="rumik-oss-1 checkpoint: hub id, local folder, or 'tiny' (default: %(default)s)")
    p.add_argument("--device", default=None, help="cuda | cpu | cuda:1 ... (default: CUDA if available)")
    p.add_argument("--dtype", default=None, help="bf16 | fp16 | fp32 (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="address to listen on; 0.0.0.0 for other machines (default: %(default)s)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", DEFAULT_PORT)))
    p.add_argument("--share", action="store_true", help="also create a public gradio.live link")
    p.add_argument("--data-dir", default=os.environ.get("RUMIK_APP_DATA", DEFAULT_DATA_DIR),
                   help="ratings database, rated clips and exports (default: %(default)s)")
    add_backend_arguments(p)  # --backend vllm: rumik-oss-1 on vLLM (run from .venv-vllm)
    args = p.parse_args(argv)
    try:
        args.backend_kwargs = backend_kwargs(args)
    except ValueError as exc:
        p.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    demo = build_demo(args.model, args.device, args.dtype, args.data_dir, backend_args=args.backend_kwargs)
    status = demo.registry.status(SYSTEM_RUMIK)
    print(f"rumik-oss-1 ({args.model}): {status.state}" + (f" - {status.message}" if status.message else ""), flush=True)
    launch(demo, args.host, args.port, args.share, args.data_dir)


if __name__ == "__main__":
    main()
