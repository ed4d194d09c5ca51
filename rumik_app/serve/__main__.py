"""Run the speech server.

    python -m rumik_app.serve --model rumik-ai/rumik-oss-1                  # http://127.0.0.1:8000
    python -m rumik_app.serve --model /models/rumik-oss-1 --host 0.0.0.0 --max-batch 32 --api-key "$KEY"
    python -m rumik_app.serve --model tiny --port 8001                      # random weights: noise, no download
    python -m rumik_app.serve --model /models/rumik-oss-1 --voices voices/ --admin-key "$ADMIN"   # + library voices
    rumik serve --backend vllm --model rumik-ai/rumik-oss-1 \
        --max-batch 64 --tensor-parallel-size 2                             # vLLM's engine (pip install -e .[vllm])

Loads the model, warms it up (the engine backend compiles its decode step with --compile,
default on CUDA; vLLM runs a first request), then serves until SIGTERM/SIGINT. On SIGTERM
it stops accepting connections, answers requests that have no audio yet with 503
(`Retry-After`), lets the ones already streaming finish (up to --shutdown-timeout seconds,
after which they are cut), shuts the backend down (vLLM's engine processes too) and exits.
The API key can also come from the environment variable RUMIK_API_KEY, the admin key
(POST /v1/admin/unload, POST and DELETE /v1/voices; a key of its own) from RUMIK_ADMIN_KEY.
--voices DIR serves a voice library's voices too, and with --adapt-voices --data-dir DIR the
server trains new ones from uploaded recordings (POST /v1/voices/adaptations; docs/voices.md).

Every connection has deadlines (headers, body, idle keep-alive) and one client address a
share of them (`rumik_app.serve.connections`), so idle or slow sockets cannot take the server
offline. X-Forwarded-For is trusted only from the proxies named by --forwarded-allow-ips.

If vLLM's engine core dies (--backend vllm), requests without audio yet get 503 with
`Retry-After`, /health says "failed", and the server shuts down the same way and exits with
status 3, so a supervisor (systemd `Restart=on-failure`, Kubernetes, a `while` loop) starts
it again: a dead engine core does not come back inside its process.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from rumik_app.align import DEFAULT_ALIGNERS
from rumik_app.cli_args import add_engine_arguments, add_voices_argument, engine_options
from rumik_app.engine.serving import DEFAULT_MAX_BATCH, DEFAULT_MAX_PROMPT_TOKENS, DEFAULT_MAX_QUEUE
from rumik_app.errors import CheckpointError
from rumik_app.request import (
    DEFAULT_MAX_SECONDS,
    DEFAULT_MODEL,
    TINY_MAX_SECONDS,
    check_max_seconds,
    default_max_seconds,
)
from rumik_app.serve.protocol import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEP_ALIVE_S,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_CLIENT,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    MAX_SOCKET_MESSAGE_BYTES,
)
from rumik_app.voices.makers import add_adaptation_arguments, maker_from_args

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
API_KEY_ENV = "RUMIK_API_KEY"
ADMIN_KEY_ENV = "RUMIK_ADMIN_KEY"
MIN_KEY_CHARS = 16  # keys read from --api-keys-file
CONNECTION_HEADROOM = 32
ENGINE_DIED_STATUS = 3  # exit status after vLLM's engine core died (2 stays "bad arguments or model")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rumik serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="hub id, local folder, or 'tiny'")
    add_engine_arguments(p)  # --device --dtype --compile --backend engine|vllm, --tensor-parallel-size, ...
    add_voices_argument(p)  # --voices DIR: a voice library (GET/POST /v1/voices, DELETE /v1/voices/NAME)
    p.add_argument("--host", default=DEFAULT_HOST, help="address to bind (0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH,
                   help="requests decoded together at most (vllm: its max_num_seqs)")
    p.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE,
                   help="requests waiting for a batch row before new ones get 503 + Retry-After "
                        "(vllm: unfinished vLLM requests beyond --max-batch)")
    p.add_argument("--max-prompt-tokens", type=int, default=DEFAULT_MAX_PROMPT_TOKENS,
                   help="engine: prompt tokens per text chunk; sizes the KV cache (max-batch x (this + 3072)); "
                        "vllm sizes its paged cache itself")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="length cap per utterance chunk when a request gives none (default "
                        f"{DEFAULT_MAX_SECONDS:g}; {TINY_MAX_SECONDS:g} for --model tiny)")
    p.add_argument("--idle-unload", type=float, metavar="MINUTES",
                   help="engine backend: unload the model after this many minutes without a request (frees the "
                        "GPU; the next request reloads it, logged with the time it took); /health says 'loaded'")
    p.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                   help="WebSocket sessions (Rumik's /v1/tts/ws, text-in /v1/audio/speech/stream) open at once, "
                        "idle ones included; beyond that an upgrade gets 503 + Retry-After")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"require 'Authorization: Bearer KEY' on /v1 routes (default: ${API_KEY_ENV}, else open)")
    p.add_argument("--api-keys-file", metavar="FILE",
                   help="more API keys, one per line (# comments), beside --api-key: each key owns its own lexicons")
    p.add_argument("--data-dir", metavar="DIR",
                   help="where the server keeps what clients store, per API key: lexicons, and long jobs "
                        "(/v1/audio/jobs, resumed after a restart; off without it); default: in memory")
    p.add_argument("--admin-key", default=os.environ.get(ADMIN_KEY_ENV),
                   help=f"the key for /v1/admin/ routes, separate from the API keys (default: ${ADMIN_KEY_ENV}, else "
                        "those routes are closed)")
    add_connection_arguments(p)
    p.add_argument("--voice-map", help="other names for the voices, e.g. 'alloy=Ira,nova=Aisha', for clients that "
                                      "only send OpenAI's voice names (default: none; unknown names get 400)")
    p.add_argument("--served-model-name", help="model id in /v1/models (default: the last part of --model)")
    p.add_argument("--shutdown-timeout", type=float, default=DEFAULT_SHUTDOWN_TIMEOUT_S,
                   help="seconds streaming requests may take to finish after SIGTERM")
    p.add_argument("--aligner", action="append", metavar="NAME[:PATH]",
                   help="word-timestamp aligner, repeatable, first match per language wins: pocketsphinx (English, "
                        "the default), indicconformer:PATH (22 Indian languages), ctc:PATH (a local CTC model); "
                        "'none' turns timestamps off")
    add_adaptation_arguments(p)  # --adapt-voices --adapt-config --adapt-set: POST /v1/voices/adaptations
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    args = p.parse_args(argv)
    if args.adapt_voices and not (args.voices and args.data_dir):
        p.error("--adapt-voices needs --voices DIR (where new voices go) and --data-dir DIR (where the jobs are kept)")
    if args.max_batch < 1 or args.max_queue < 0 or args.max_prompt_tokens < 1 or args.max_sessions < 0:
        p.error("--max-batch and --max-prompt-tokens must be >= 1, --max-queue and --max-sessions >= 0")
    if args.api_key is not None and not args.api_key.strip():
        p.error(f"the API key is empty (--api-key or ${API_KEY_ENV}); an empty key would let every request in. "
                f"Set a long random one, or unset {API_KEY_ENV} to run without a key.")
    args.api_keys = api_keys(p, args)
    if args.admin_key is not None and (not args.admin_key.strip() or args.admin_key in (args.api_keys or ())):
        p.error(f"the admin key (--admin-key or ${ADMIN_KEY_ENV}) must be non-empty and differ from the API key: "
                "every API client would otherwise be an admin.")
    check_connection_arguments(p, args)
    if args.idle_unload is not None and not args.idle_unload > 0:
        p.error("--idle-unload takes minutes > 0 (e.g. --idle-unload 15)")
    if args.idle_unload is not None and args.backend == "vllm":
        from rumik_app.serve.adapters import VLLM_NO_UNLOAD

        p.error(VLLM_NO_UNLOAD)
    if args.max_seconds is not None:
        try:
            check_max_seconds(args.max_seconds)
        except ValueError as exc:
            p.error(f"--max-seconds: {exc}")
    args.engine_options = engine_options(p, args)  # {"backend": ..., device/dtype/compile and vLLM's, when given}
    args.engine_options.pop("backend")
    return args


def add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """Deadlines per connection and shares per client address (rumik_app.serve.connections)."""
    p.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT_S, metavar="SECONDS",
                   help="a request's line and headers must arrive this soon after connecting (or after the last "
                        "response), or the connection is closed")
    p.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT_S, metavar="SECONDS",
                   help="a request's whole body must arrive this soon after its headers (408 otherwise)")
    p.add_argument("--keep-alive-timeout", type=float, default=DEFAULT_KEEP_ALIVE_S, metavar="SECONDS",
                   help="an idle kept-alive connection is closed after this long")
    p.add_argument("--max-connections-per-client", type=int, default=DEFAULT_MAX_CONNECTIONS_PER_CLIENT, metavar="N",
                   help="HTTP connections one client address may hold (0: no limit); a new one closes the "
                        "address's oldest idle one. Proxies named in --forwarded-allow-ips are exempt")
    p.add_argument("--max-sessions-per-client", type=int, default=DEFAULT_MAX_SESSIONS_PER_CLIENT, metavar="N",
                   help="WebSocket sessions one client address may hold open (0: no limit beyond --max-sessions)")
    p.add_argument("--forwarded-allow-ips", default=None, metavar="ADDRESSES",
                   help="comma-separated proxy addresses or networks (10.0.0.0/8) whose X-Forwarded-For names the "
                        "client; default none: the peer's own address counts, whoever sends the header")


def check_connection_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    timeouts = (args.header_timeout, args.body_timeout, args.keep_alive_timeout)
    if not all(0 < value <= 3600 for value in timeouts):
        p.error("--header-timeout, --body-timeout and --keep-alive-timeout take seconds above 0 and at most 3600")
    if args.max_connections_per_client < 0 or args.max_sessions_per_client < 0:
        p.error("--max-connections-per-client and --max-sessions-per-client take 0 (no limit) or more")


def api_keys(p: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, ...] | None:
    """--api-key and the keys of --api-keys-file (None: no key, an open server)."""
    keys = [args.api_key] if args.api_key is not None else []
    if args.api_keys_file:
        try:
            lines = Path(args.api_keys_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            p.error(f"--api-keys-file: cannot read {args.api_keys_file}: {exc}")
        listed = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        if not listed or any(len(key) < MIN_KEY_CHARS for key in listed):
            p.error(f"--api-keys-file {args.api_keys_file}: one key per line, each at least {MIN_KEY_CHARS} "
                    "characters (use long random ones).")
        keys += listed
    return tuple(keys) or None


def proxies(args: argparse.Namespace) -> tuple[str, ...]:
    """The trusted proxies of --forwarded-allow-ips, as entries."""
    return tuple(entry.strip() for entry in (args.forwarded_allow_ips or "").split(",") if entry.strip())


def aligner_specs(given: list[str] | None) -> tuple[str, ...]:
    """--aligner: the default set when not given, none for "none"."""
    if not given:
        return DEFAULT_ALIGNERS
    return () if given == ["none"] else tuple(given)


def served_name(model: str) -> str:
    """`rumik-ai/rumik-oss-1` -> `rumik-oss-1`; `/models/rumik-oss-1/` -> `rumik-oss-1`."""
    return Path(model.rstrip("/\\")).name or model


def build_server(args: argparse.Namespace):
    """Load the adapter and wrap the app in a uvicorn server that drains on SIGTERM."""
    import uvicorn

    from rumik_app.serve.adapters import load_adapter
    from rumik_app.serve.app import SpeechServer, create_app, server_aligners
    from rumik_app.serve.connections import ConnectionPolicy, guarded_protocol
    from rumik_app.serve.openai.schema import parse_voice_map
    from rumik_app.voices.library import use_library

    aligners = server_aligners(aligner_specs(args.aligner))  # a bad --aligner is said before the model loads
    sizes = {"max_prompt_tokens": args.max_prompt_tokens} if args.backend == "engine" else {}
    if args.idle_unload is not None:
        sizes["idle_unload_s"] = args.idle_unload * 60
    adapter = load_adapter(args.backend, args.model, max_batch=args.max_batch, max_queue=args.max_queue, **sizes,
                           **args.engine_options)
    use_library(adapter.engine, args.voices, args.max_adapters, args.adapter_rank)  # before --voice-map, which
    # may name library voices
    name = args.served_model_name or served_name(args.model)
    voice_map = parse_voice_map(args.voice_map, adapter.voices)
    app = create_app(adapter, model_name=name, aliases=(args.model,), api_key=args.api_keys, data_dir=args.data_dir,
                     shutdown_timeout=args.shutdown_timeout, voice_map=voice_map, max_sessions=args.max_sessions,
                     max_seconds=args.max_seconds or default_max_seconds(args.model), admin_key=args.admin_key,
                     body_timeout=args.body_timeout, max_sessions_per_client=args.max_sessions_per_client,
                     aligners=aligners, voice_maker=maker_from_args(args, args.data_dir))
    # HTTP connections beyond what the server can hold get 503 from uvicorn itself: every
    # request that can decode or wait, plus room for /health, /metrics and the ones being
    # refused. Idle ones make room (connections.py). (uvicorn does not count WebSockets here;
    # --max-sessions bounds those.)
    concurrency = args.max_batch + args.max_queue + CONNECTION_HEADROOM
    policy = ConnectionPolicy(header_timeout_s=args.header_timeout, max_per_client=args.max_connections_per_client,
                              max_connections=concurrency, trusted=proxies(args))
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=args.shutdown_timeout, limit_concurrency=concurrency,
                            ws_max_size=MAX_SOCKET_MESSAGE_BYTES, http=guarded_protocol(policy),
                            timeout_keep_alive=args.keep_alive_timeout, proxy_headers=bool(proxies(args)),
                            forwarded_allow_ips=list(proxies(args)))
    server = SpeechServer(config, adapter)
    if hasattr(adapter, "on_engine_death"):  # vLLM: a dead engine core shuts the server down (main exits 3)
        adapter.on_engine_death = lambda: setattr(server, "should_exit", True)
    return server


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.backend == "vllm":  # before vLLM is imported: its log level follows --log-level
        os.environ.setdefault("VLLM_LOGGING_LEVEL", args.log_level.upper())
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("rumik_app").setLevel(args.log_level.upper())
    try:
        server = build_server(args)
    except (CheckpointError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server.run()
    if getattr(server.adapter, "engine_died", False):
        print(f"error: vLLM's engine core died (see the log above); exiting with status {ENGINE_DIED_STATUS} so a "
              "supervisor restarts the server", file=sys.stderr)
        return ENGINE_DIED_STATUS
    return 0


if __name__ == "__main__":
    sys.exit(main())
