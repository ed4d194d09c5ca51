"""`rumik arena serve`: the arena alone, as its own Gradio app (docs/arena.md).

    rumik arena serve --system espeak --system tiny                       # http://127.0.0.1:7862
    rumik arena serve --system rumik --system "openai:http://kokoro:8880/v1;model=kokoro;voice=af_heart" \\
        --host 0.0.0.0 --data-dir arena-data/

No login; the leaderboard is public, and the export of the votes takes the admin password when one
is set (RUMIK_ADMIN_PASSWORD). The same page as the app's Arena tab (webapp.arena_tab), behind the same front door
(`webapp.main.launch`: the visitor guard, queue shares, the served folder); the votes live in
DATA_DIR/arena.sqlite3; `Arena.votes()` gives them as the vote export's rows
(evaluation.arena.votes), which `rumik arena leaderboard` reads.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from webapp.storage import DEFAULT_DATA_DIR

DEFAULT_PORT = 7862
TITLE = "rumik arena: which voice is better?"


def build_arena_app(specs: Sequence[str], data_dir: str | os.PathLike = DEFAULT_DATA_DIR, served=None,
                    **arena_options):
    """The arena as a whole app (a gr.Blocks with what `webapp.main.launch` needs)."""
    import gradio as gr

    from webapp.access import AdminGate
    from webapp.arena_tab import ArenaHandlers, build_arena_tab, load_arena
    from webapp.storage import DataLayout, ServedFolder, check_not_served, served_roots

    layout, served = DataLayout(data_dir), served or ServedFolder()
    check_not_served(layout, served_roots(served))
    arena, admin = load_arena(specs, data_dir, served, **arena_options), AdminGate.from_sources()
    with gr.Blocks(title=TITLE) as demo:
        gr.Markdown(f"# {TITLE}")
        build_arena_tab(ArenaHandlers(arena, served, admin))
    demo.data_layout, demo.served_folder, demo.admin, demo.arena = layout, served, admin, arena
    return demo


def main(argv: Sequence[str] | None = None) -> None:
    from rumik_app.errors import RumikError, report_user_error
    from webapp.main import launch

    p = argparse.ArgumentParser(prog="rumik arena serve", description=__doc__.split("\n")[0])
    p.add_argument("--system", action="append", required=True, metavar="SPEC",
                   help="a system in the arena, at least two (evaluation.systems specs: rumik, tiny, espeak, "
                        "folder:DIR, openai:URL;model=M;voice=V;key_env=VAR)")
    p.add_argument("--data-dir", default=os.environ.get("RUMIK_APP_DATA", DEFAULT_DATA_DIR))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--forwarded-allow-ips", default=None, metavar="ADDRESSES")
    args = p.parse_args(argv)
    try:
        demo = build_arena_app(args.system, args.data_dir)
    except RumikError as exc:
        raise SystemExit(report_user_error(exc)) from None
    launch(demo, args.host, args.port, forwarded_allow_ips=args.forwarded_allow_ips)
