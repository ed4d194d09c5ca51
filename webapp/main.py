"""rumik-oss-1 demo: synthesise, compare and rate, evaluate (Gradio; docs/ARCHITECTURE.md §1, §3, §8).

    rumik app                                       # rumik-ai/rumik-oss-1 from the HF cache / hub
    rumik app --model /models/rumik-oss-1           # a local checkpoint folder
    rumik app --model tiny --port 7861              # random weights: checks the pipeline, sounds like noise
    rumik app --host 0.0.0.0 --share                # reachable from other machines / a public link
    RUMIK_ADMIN_PASSWORD=... rumik app              # results and exports for the admin only
    rumik app --auth-file logins.txt                # a private deployment: USER:PASS lines, Gradio's login
    rumik app --host 0.0.0.0 --forwarded-allow-ips 10.0.0.5   # behind your reverse proxy at 10.0.0.5
    rumik app --backend vllm                        # rumik-oss-1 on vLLM's engine (pip install rumik-oss[vllm])
    rumik app --voices voices/                      # library voices too, in the Voice menu (docs/voices.md)
    rumik app --voices voices/ --adapt-voices       # + the "Your voices" tab: make a voice from recordings
    rumik app --arena-system espeak --arena-system rumik   # + the Arena tab: blind votes, a leaderboard

`python app.py` (the Hugging Face Space's entry point) and `python -m webapp` run the same.

Tabs: Synthesise (streamed audio, every prompt control, the exact prompt string), Compare &
rate (blind A/B ratings stored in SQLite, IndicEmo/NoVA exports and results), Evaluate
(WER/CER/GCER and NoVA verdicts for uploaded clips; optional DNSMOS quality and speaker
similarity to a reference voice, `--speaker-encoder`), and with `--adapt-voices` Your voices (make
a library voice from uploaded recordings, `webapp.voices_tab`). Systems: rumik-oss-1 (`--model`),
the espeak-ng classical baseline, and tiny. If the model cannot be loaded the app still
starts, with a banner giving the reason and the fix. Every action is an API endpoint;
`/synthesize` returns a 24 kHz WAV (see the "Use via API" link at the bottom of the page).

Files: the data dir (ratings database, rated clips, exports) is never served; visitors get
copies under random names from a separate served folder (`webapp.storage` has the layout).
Results and exports need the admin password when one is set (`webapp.access`).

Visitors (`webapp.guard`): each browser session and each client address may have only a few
jobs waiting or running in the queue (`MAX_JOBS_PER_SESSION`, `MAX_JOBS_PER_ADDRESS`), so
nobody fills the queue for everyone else. A client's
address is the connection's, unless it comes from a proxy named by --forwarded-allow-ips: then
the rightmost X-Forwarded-For entry that is not such a proxy. By default no proxy is believed
(uvicorn's own default believes 127.0.0.1), so behind a reverse proxy name it, or every visitor
shares the proxy's address (its queue share and its sign-in counts). On a Hugging Face Space
(SPACE_ID set) the platform's proxies are believed: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16,
100.64.0.0/10 and fc00::/7 (`webapp.guard.SPACE_PROXY_NETWORKS`).

This module is the Gradio layer only; the work is in `webapp/`, `rumik_app/` and `evaluation/`.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from webapp import zerogpu

# On a ZeroGPU Space `spaces` must be imported before anything touches CUDA, so it is imported here, ahead of
# the project imports below (hence their `noqa: E402`); elsewhere this does nothing.
zerogpu.import_spaces()

# Nothing below imports torch, transformers or gradio, so `--help` is instant (`rumik app --help`):
# Gradio, and the rate tab that needs it to load, are imported where the page is built (`build_demo`, `_theme`).
from rumik_app.align import AlignerSet, AlignmentError  # noqa: E402
from rumik_app.cli_args import add_engine_arguments, add_voices_argument, engine_options  # noqa: E402
from rumik_app.errors import RumikError, report_user_error  # noqa: E402
from rumik_app.request import DEFAULT_MODEL  # noqa: E402
from rumik_app.voices.makers import VoiceMaker, add_adaptation_arguments, maker_from_args  # noqa: E402
from webapp.access import ADMIN_PASSWORD_ENV, AUTH_ENV, AdminGate, GuessThrottle, LoginCheck, LoginError, read_logins  # noqa: E402
from webapp.audio_judges import DEFAULT_SPEAKER_ENCODER, AudioJudges  # noqa: E402
from webapp.evaluate_tab import EvaluateHandlers, build_evaluate_tab  # noqa: E402
from webapp.guard import ProxyConfigError, QueueFairness, VisitorGuard, launch_app, trusted_proxies  # noqa: E402
from webapp.ratings import RatingStore  # noqa: E402
from webapp.scoring import DEFAULT_ASR_MODEL, JudgeCatalog  # noqa: E402
from webapp.storage import DEFAULT_DATA_DIR, DataLayout, ServedFolder, UnsafeLayoutError, check_not_served, served_roots  # noqa: E402
from webapp.synth_tab import SynthHandlers, build_synth_tab  # noqa: E402
from webapp.systems import SYSTEM_RUMIK, SystemRegistry  # noqa: E402
from webapp.timings import HIGHLIGHT_JS, TRANSCRIPT_CSS  # noqa: E402
from webapp.uploads import MAX_CLIP_MB  # noqa: E402
from webapp.voices_tab import VoiceTabHandlers, build_voices_tab  # noqa: E402

if TYPE_CHECKING:
    import gradio as gr

log = logging.getLogger("app")

TITLE = "rumik-oss-1: expressive Indic text-to-speech"
DEFAULT_PORT = 7860
DEFAULT_CONCURRENCY = 4  # light events (preview, submit, results)
QUEUE_MAX_SIZE = 64  # jobs waiting for everyone together; one visitor's share: webapp.guard.MAX_JOBS_PER_*
MAX_UPLOAD = f"{MAX_CLIP_MB}mb"  # one upload: the Evaluate tab's clip limit (Gradio refuses more, unread)
# Gradio keeps a copy of every file it hands out (GRADIO_TEMP_DIR); sweep hourly, drop after a day.
CACHE_SWEEP_S, CACHE_MAX_AGE_S = 3600, 86400
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
CSS = """
#prompt-preview textarea { font-family: ui-monospace, monospace; }
#model-banner:has(h3, p) {
  background: #fff4e5; border-left: 4px solid #f59e0b; padding: 0.6em 1em; border-radius: 6px;
}
""" + TRANSCRIPT_CSS
# System fonts only: the page must look right offline, and the OS Indic fonts (fonts-indic,
# Noto) cover every script the model reads.
THEME_FONTS = ["ui-sans-serif", "system-ui", "Noto Sans", "sans-serif"]
INTRO = (
    f"# {TITLE}\n"
    "22 Indian languages and English, four voices, tone / accent / pace, and inline `<laugh>`, `<chuckle>`, "
    "`<sigh>`. Open model: [rumik-ai/rumik-oss-1](https://huggingface.co/rumik-ai/rumik-oss-1)."
)


def build_demo(model: str = DEFAULT_MODEL, data_dir: str | os.PathLike = DEFAULT_DATA_DIR, preload: bool = True,
               admin: AdminGate | None = None, served: ServedFolder | None = None,
               engine_options: dict | None = None, asr_models: tuple[str, ...] = (DEFAULT_ASR_MODEL,),
               speaker_encoder: str = DEFAULT_SPEAKER_ENCODER, voices: str | os.PathLike | None = None,
               aligners: Sequence[str] | None = None, voice_maker: VoiceMaker | None = None,
               arena_systems: Sequence[str] = ()) -> gr.Blocks:
    """The whole app. `preload` loads `model` now (compiling its decode step when `compile`,
    default on for CUDA) so the banner can say whether it worked and serving starts warm.

    `admin` guards results and exports (default: $RUMIK_ADMIN_PASSWORD if set, else open);
    `served` is the folder visitors' files are served from (default: a fresh temp folder);
    `engine_options`: `load_engine`'s (device, dtype, compile, backend "engine" | "vllm", vLLM's
    options), as `rumik_app.cli_args.engine_kwargs` reads them from the flags; `asr_models`: the
    Hugging Face ASR judges visitors may pick in the Evaluate tab (hub ids or folders);
    `speaker_encoder`: the Evaluate tab's speaker-similarity model (`evaluation.speaker` spec);
    `voices`: a voice library folder whose voices rumik-oss-1 speaks too (docs/voices.md);
    `aligners`: the *Word timestamps* aligners' specs (`rumik_app.align.load_aligner`; None: each
    engine's default, pocketsphinx for English), loaded now; `voice_maker`: what trains new voices
    into `voices` (rumik_app.voices.makers; the "Your voices" tab, started here), None: no tab;
    `arena_systems`: the Arena tab's system specs (at least two; none: no tab, webapp.arena_tab).
    Raises UnsafeLayoutError if the data dir lies in a folder Gradio serves, AlignmentError if an
    aligner cannot load.
    """
    import gradio as gr

    from webapp.rate_tab import RateHandlers, build_rate_tab

    layout, served = DataLayout(data_dir), served or ServedFolder()
    check_not_served(layout, served_roots(served))
    admin = admin if admin is not None else AdminGate.from_sources()
    registry = SystemRegistry(model=model, voices=voices, **(engine_options or {}))
    if preload:
        registry.preload(SYSTEM_RUMIK)
    store = RatingStore(layout.database)
    synth = SynthHandlers(registry, served, AlignerSet.load(aligners, strict=True) if aligners else None)
    rate = RateHandlers(registry, synth, store, layout, admin)
    default, choices = registry.default_choice(), registry.choices()

    with gr.Blocks(title=TITLE, delete_cache=(CACHE_SWEEP_S, CACHE_MAX_AGE_S)) as demo:
        gr.Markdown(INTRO)
        banner = gr.Markdown(registry.banner_markdown(), elem_id="model-banner")
        with gr.Tab("Synthesise", id="synthesise"):
            build_synth_tab(synth, default, choices)
        with gr.Tab("Compare & rate", id="rate"):
            build_rate_tab(rate, default, choices)
        with gr.Tab("Evaluate", id="evaluate"):
            build_evaluate_tab(EvaluateHandlers(JudgeCatalog(asr_models), AudioJudges(registry, speaker_encoder)))
        if arena_systems:
            from webapp.arena_tab import ArenaHandlers, build_arena_tab, load_arena

            with gr.Tab("Arena", id="arena"):
                build_arena_tab(ArenaHandlers(load_arena(arena_systems, data_dir, served), served, admin))
        if voice_maker is not None and voices is not None:
            with gr.Tab("Your voices", id="voices"):
                build_voices_tab(VoiceTabHandlers(voice_maker.start(), Path(voices), admin), demo)
        demo.load(registry.banner_markdown, outputs=banner, api_name="model_status", queue=False,
                  show_progress="hidden")
    # For tests and embedding scripts (and `launch`):
    demo.registry, demo.rating_store, demo.admin = registry, store, admin
    demo.data_layout, demo.served_folder, demo.voice_maker = layout, served, voice_maker
    return demo


def launch(demo: gr.Blocks, host: str, port: int, share: bool = False, prevent_thread_lock: bool = False,
           logins: list[tuple[str, str]] | None = None, allowed_hosts: tuple[str, ...] = (),
           forwarded_allow_ips: str | None = None, throttle: GuessThrottle | None = None):
    """Queue (with concurrency limits and per-visitor shares) and serve the app; `logins` turn
    on Gradio's login page, their guessing slowed by `throttle` (default: a `GuessThrottle`;
    the check is `demo.login_check`).

    In front of Gradio, `webapp.guard.VisitorGuard` refuses URL fetches, large bodies, foreign
    Host headers and origins (`allowed_hosts` adds names to this machine's own), and
    `webapp.guard.QueueFairness` gives each session and client address a share of the queue;
    no route runs a queued function outside the queue (`api_open=False`). X-Forwarded-For is
    believed from `forwarded_allow_ips` only (comma-separated addresses and networks; None:
    nobody, or on a Space its proxies, `webapp.guard.trusted_proxies`).

    Gradio serves only the app's served folder (`allowed_paths`) and its own cache; the data
    dir's private files are checked against those folders again and also passed as
    `blocked_paths`, which Gradio refuses whatever else allows them. With an admin password,
    Gradio's run history is off: it would keep the typed password and export links in the
    browser's storage (a shared rating machine).
    """
    layout, admin = demo.data_layout, demo.admin
    check_not_served(layout, served_roots(demo.served_folder))
    demo.queue(default_concurrency_limit=DEFAULT_CONCURRENCY, max_size=QUEUE_MAX_SIZE, api_open=False)
    QueueFairness().install(demo)
    demo.login_check = LoginCheck(logins, throttle) if logins else None
    proxies = trusted_proxies(None) if forwarded_allow_ips is None else forwarded_allow_ips
    return launch_app(demo, proxies, server_name=host, server_port=port, share=share,
                      prevent_thread_lock=prevent_thread_lock,
                      allowed_paths=[str(demo.served_folder.root)],
                      blocked_paths=[str(p) for p in layout.private_paths()],
                      auth=demo.login_check.acheck if logins else None,
                      auth_message="Sign in to use this rumik-oss-1 app.",
                      run_history=False if admin.enabled else None,
                      max_file_size=MAX_UPLOAD, ssr_mode=False, theme=_theme(), css=CSS, js=HIGHLIGHT_JS,
                      quiet=prevent_thread_lock, app_kwargs=VisitorGuard.options(host, allowed_hosts, share))


def _theme() -> gr.themes.Base:
    import gradio as gr

    return gr.themes.Default(font=[gr.themes.Font(f) for f in THEME_FONTS],
                             font_mono=[gr.themes.Font("ui-monospace"), gr.themes.Font("monospace")])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=os.environ.get("RUMIK_MODEL", DEFAULT_MODEL),
                   help="rumik-oss-1 checkpoint: hub id, local folder, or 'tiny' (default: %(default)s)")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="address to listen on; 0.0.0.0 for other machines (default: %(default)s)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", DEFAULT_PORT)))
    p.add_argument("--share", action="store_true", help="also create a public gradio.live link")
    p.add_argument("--data-dir", default=os.environ.get("RUMIK_APP_DATA", DEFAULT_DATA_DIR),
                   help="ratings database, rated clips and exports; never served (default: %(default)s)")
    # Secrets: no %(default)s in these helps, so --help never prints one taken from the environment.
    p.add_argument("--admin-password", default=None,
                   help=f"password for results and exports (default: ${ADMIN_PASSWORD_ENV}; unset = open to all). "
                        "Prefer the environment variable: command lines are visible to other users of the machine")
    p.add_argument("--auth", action="append", default=[], metavar="USER:PASS",
                   help="require this login for the whole app (repeatable; Gradio's login page)")
    p.add_argument("--auth-file", default=None, metavar="FILE",
                   help=f"logins, one USER:PASS a line (# comments); also read from ${AUTH_ENV}")
    p.add_argument("--asr-model", action="append", default=None, metavar="ID_OR_FOLDER",
                   help=f"a Hugging Face ASR judge visitors may choose in the Evaluate tab (repeatable; default "
                        f"{DEFAULT_ASR_MODEL}; pasted transcripts and pocketsphinx are always offered)")
    p.add_argument("--speaker-encoder", default=DEFAULT_SPEAKER_ENCODER, metavar="SPEC",
                   help="the Evaluate tab's speaker-similarity model: resemblyzer (default, offline) or "
                        "hf:MODEL_ID_OR_PATH (a WavLM x-vector, safetensors); visitors cannot choose another")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name this app is reached by besides this machine's own (repeatable; *.example.org "
                        "for a domain); requests naming any other host are refused (DNS rebinding)")
    p.add_argument("--forwarded-allow-ips", default=None, metavar="ADDRESSES",
                   help="your reverse proxies (comma-separated addresses or networks, e.g. 10.0.0.5,172.16.0.0/12): "
                        "their X-Forwarded-For names the client. Default: nobody's, so no client picks its own "
                        "address; on a Hugging Face Space the platform's private ranges")
    p.add_argument("--idle-unload", type=float, metavar="MINUTES",
                   help="unload the model after this many minutes without a visitor (frees the GPU; the next "
                        "synthesis reloads it); in-process engine only, not on ZeroGPU (it frees the GPU itself)")
    p.add_argument("--aligner", action="append", default=None, metavar="NAME[:PATH]",
                   help="word aligner for the Word timestamps box, repeatable, first match per language wins: "
                        "pocketsphinx (English, the default), indicconformer:FOLDER (Indian languages), "
                        "ctc:FOLDER (a local CTC model)")
    add_engine_arguments(p)  # --device --dtype --compile; --backend vllm: rumik-oss-1 on vLLM
    add_voices_argument(p)  # --voices DIR: library voices in the Voice menu
    add_adaptation_arguments(p)  # --adapt-voices ...: the "Your voices" tab
    p.add_argument("--arena-system", action="append", default=[], metavar="SPEC",
                   help="a system in the Arena tab, at least two (e.g. --arena-system espeak --arena-system rumik; "
                        "evaluation.systems specs, openai:URL too; docs/arena.md)")
    args = p.parse_args(argv)
    args.engine_options = zerogpu.engine_options(engine_options(p, args))
    try:
        args.forwarded_allow_ips = trusted_proxies(args.forwarded_allow_ips)
    except ProxyConfigError as exc:
        p.error(str(exc))
    if args.idle_unload is not None and not args.idle_unload > 0:
        p.error("--idle-unload takes minutes > 0 (e.g. --idle-unload 15)")
    if args.idle_unload is not None and args.engine_options.get("backend") == "vllm":
        p.error("--idle-unload applies to the in-process engine; the vLLM backend keeps its memory until it stops")
    return args


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        logins = read_logins(args.auth, args.auth_file)
        admin = AdminGate.from_sources(args.admin_password)
        demo = build_demo(args.model, args.data_dir, admin=admin, engine_options=args.engine_options,
                          asr_models=tuple(args.asr_model or (DEFAULT_ASR_MODEL,)),
                          speaker_encoder=args.speaker_encoder, voices=args.voices, aligners=args.aligner,
                          voice_maker=maker_from_args(args, DataLayout(args.data_dir).root),
                          arena_systems=args.arena_system)
    except (LoginError, UnsafeLayoutError, AlignmentError, RumikError) as exc:
        raise SystemExit(report_user_error(exc)) from None  # one `error: ...` line, exit status 2
    status = demo.registry.status(SYSTEM_RUMIK)
    print(f"rumik-oss-1 ({args.model}): {status.state}" + (f" - {status.message}" if status.message else ""),
          flush=True)
    print(f"data dir {demo.data_layout.root} (not served); results and exports: "
          + ("admin password required" if admin.enabled else "open to every visitor")
          + (f"; {len(logins)} login(s) required" if logins else "")
          + f"; X-Forwarded-For believed from {args.forwarded_allow_ips or 'no proxy'}", flush=True)
    if not admin.enabled and (args.share or args.host not in LOCAL_HOSTS):
        log.warning("the app is reachable from other machines and every visitor can see results and export all "
                    "ratings; set %s (or --admin-password) to keep them for the admin", ADMIN_PASSWORD_ENV)
    if args.idle_unload is not None and not zerogpu.on_zero_gpu():
        demo.registry.start_idle_unload(args.idle_unload)
    launch(demo, args.host, args.port, args.share, logins=logins, allowed_hosts=tuple(args.allowed_host),
           forwarded_allow_ips=args.forwarded_allow_ips)


if __name__ == "__main__":
    main()
