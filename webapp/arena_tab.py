"""The Arena tab (`app.py --arena-system SPEC ...`, `rumik arena serve`): two anonymous systems on a
visitor's text, a vote, then the names; and the Bradley–Terry leaderboard (docs/arena.md).

    handlers = ArenaHandlers(Arena(systems, layout.root / "arena.sqlite3", served.write_wav), served, admin)
    build_arena_tab(handlers, admin)                  # inside gr.Blocks and a gr.Tab

The visitor types a prompt (or takes one from the prompt set: "Another prompt" goes to the
least-played language), chooses its language and asks for a battle; the two clips come from the
arena (evaluation.arena.battles: the pair sampler, loudness-matched, padded to one length, random
file names). The vote buttons wake only when both clips have played to their end (the players'
end events); the names appear after the vote. API: `/arena_battle` (text, language) -> battle id
and the two clips; `/arena_vote` (battle id, vote, played_a, played_b) -> the reveal;
`/arena_leaderboard` -> the report and the two pictures; `/arena_export` (admin password when the
app has one) -> the vote export (JSONL, CSV), the leaderboard files and the pictures. A session's
budget, screening and one vote per battle are the arena's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import gradio as gr
import numpy as np

from evaluation.arena.battles import MAX_PROMPT_CHARS, Arena, ArenaError
from evaluation.arena.sampling import next_language
from webapp.access import AdminGate
from webapp.common import ui_error, user_errors
from webapp.examples import LANGUAGE_CHOICES, LANGUAGE_EXAMPLES
from webapp.guard import address_key, client_address
from webapp.storage import ServedFolder

LEADERBOARD_ROUNDS = 300  # bootstrap rounds on the page (the export's file: 1,000)
CHOICES = (("A is better", "a"), ("B is better", "b"), ("Tie", "tie"), ("Both are bad", "both_bad"))
INTRO = ("Type a sentence (or take one), listen to **both** clips to the end, then vote. The systems' names "
         "appear after your vote.")


class ArenaHandlers:
    """The tab's functions; each raises gr.Error with one readable message."""

    def __init__(self, arena: Arena, served: ServedFolder, admin: AdminGate, prompts: dict[str, str] | None = None):
        self.arena, self.served, self.admin = arena, served, admin
        self.prompts = dict(prompts or LANGUAGE_EXAMPLES)  # {language: text}
        self.rng = np.random.default_rng()

    def another_prompt(self) -> tuple[str, str]:
        """(text, language) of the prompt set's least-played language."""
        played: dict[str, int] = {}
        for vote in self.arena.votes():
            played[vote.language] = played.get(vote.language, 0) + 1
        language = next_language(played, sorted(self.prompts), self.rng)
        return self.prompts[language], language

    def battle(self, text: str, language: str, request: gr.Request = None) -> tuple[str, str, str, str]:
        """(battle id, clip A, clip B, the page's note) for `text`."""
        with user_errors("Starting the battle"):
            try:
                made = self.arena.new_battle(text, language, _session(request), _address())
            except ArenaError as exc:
                raise ui_error(str(exc)) from None
        return made.id, str(made.clip_a), str(made.clip_b), f"Battle ready: {made.seconds:.1f} s each. " + INTRO

    def vote(self, battle_id: str, choice: str, played_a: bool, played_b: bool, request: gr.Request = None) -> str:
        """The reveal (Markdown) after storing the vote. choice: a, b, tie or both_bad; played_a/_b: whether
        each clip was played to its end on the page."""
        with user_errors("Voting"):
            if not battle_id:
                raise ui_error("Start a battle first.")
            try:
                played = (bool(played_a), bool(played_b))
                reveal = self.arena.vote(battle_id, choice, _session(request), _address(), played)
            except ArenaError as exc:
                raise ui_error(str(exc)) from None
        return (f"**A** was **{reveal['system_a']}**, **B** was **{reveal['system_b']}**. Your vote: "
                f"{dict((code, label) for label, code in CHOICES)[reveal['vote']]}. Start another battle!")

    def voter(self, choice: str):
        """The page's vote button for `choice` (a function Gradio passes the request to)."""
        def vote(battle_id: str, played_a: bool, played_b: bool, request: gr.Request = None) -> str:
            return self.vote(battle_id, choice, played_a, played_b, request)
        return vote

    def leaderboard(self) -> tuple[str, str | None, str | None]:
        """(the report: counts and the table overall and per language, the win-rate picture, the battle-count
        picture)."""
        with user_errors("Reading the leaderboard"), tempfile.TemporaryDirectory() as folder:
            self.arena.export(Path(folder), rounds=LEADERBOARD_ROUNDS)
            text = (Path(folder) / "leaderboard.md").read_text(encoding="utf-8")
            failures = dict(self.arena.failures)
            if failures:
                text = f"Failed syntheses (skipped, not losses): {failures}.\n\n" + text
            if not self.arena.votes():
                return text + "\nNo votes yet.", None, None
            pictures = [str(self.served.copy(Path(folder) / name)) for name in ("win_rate.png", "battles.png")]
        return text, *pictures

    def export(self, admin_password: str = "", request: gr.Request = None) -> list[str]:
        """The vote export (JSONL, CSV), the leaderboard (Markdown, CSV, JSON) and its pictures, for download."""
        with user_errors("Exporting the arena"):
            self.admin.require(admin_password, "Exporting the arena's votes", client_address() or None)
            with tempfile.TemporaryDirectory() as folder:
                return [str(path) for path in self.served.publish(self.arena.export(Path(folder)))]


def arena_database(data_dir: str | os.PathLike) -> Path:
    """Where an app's arena keeps its battles and votes."""
    from webapp.storage import DataLayout

    return DataLayout(data_dir).root / "arena.sqlite3"


def load_arena(specs: Sequence[str], data_dir: str | os.PathLike, served, **arena_options):
    """An Arena over the systems `specs` names (evaluation.systems.load_system), its clips in `served`."""
    from evaluation.arena.battles import Arena, ArenaError
    from evaluation.systems import load_system

    systems = {}
    for spec in specs:
        system = load_system(spec)
        if system.name in systems:
            raise ArenaError(f"Two --system specs name {system.name!r}; give each system once.")
        systems[system.name] = system  # a remote system's name never shows its key (evaluation.systems.remote)
    return Arena(systems, arena_database(data_dir), served.write_wav, **arena_options)


def _address() -> str | None:
    """The client's address as the app counts it (an IPv6 address by its /64, webapp.guard)."""
    return address_key(client_address()) or None


def _session(request) -> str:
    return getattr(request, "session_hash", None) or "api"


def build_arena_tab(handlers: ArenaHandlers) -> None:
    """The tab's widgets and events (inside gr.Blocks and a gr.Tab)."""
    gr.Markdown(INTRO, elem_id="arena-note")
    with gr.Row():
        text = gr.Textbox(label=f"Your text (up to {MAX_PROMPT_CHARS} characters)", max_length=MAX_PROMPT_CHARS,
                          lines=2, elem_id="arena-text", scale=3)
        language = gr.Dropdown(LANGUAGE_CHOICES, value="en", label="Language", elem_id="arena-language", scale=1)
    with gr.Row():
        another = gr.Button("Another prompt", elem_id="arena-prompt")
        start = gr.Button("New battle", variant="primary", elem_id="arena-start")
    battle = gr.Textbox(visible=False)
    played_a, played_b = gr.State(False), gr.State(False)
    with gr.Row():
        clip_a = gr.Audio(label="A", type="filepath", interactive=False, elem_id="arena-a")
        clip_b = gr.Audio(label="B", type="filepath", interactive=False, elem_id="arena-b")
    with gr.Row():
        buttons = [gr.Button(label, interactive=False, elem_id=f"arena-vote-{code}") for label, code in CHOICES]
    note = gr.Markdown(elem_id="arena-reveal")
    with gr.Accordion("Leaderboard", open=False):
        refresh = gr.Button("Refresh the leaderboard", elem_id="arena-refresh")
        board = gr.Markdown(elem_id="arena-board")
        with gr.Row():
            win_rate = gr.Image(label="Win rate", type="filepath", elem_id="arena-win-rate")
            counts = gr.Image(label="Battles", type="filepath", elem_id="arena-battles")
        with gr.Row():
            password = gr.Textbox(label="Admin password", type="password", visible=handlers.admin.enabled)
            export = gr.Button("Export the votes and the leaderboard", elem_id="arena-export")
        files = gr.File(label="Export", file_count="multiple", interactive=False)

    locked = [gr.update(interactive=False)] * len(buttons)
    another.click(handlers.another_prompt, None, [text, language], api_name="arena_prompt")
    start.click(handlers.battle, [text, language], [battle, clip_a, clip_b, note], api_name="arena_battle",
                concurrency_id="arena", concurrency_limit=2).then(
        lambda: (False, False, *locked), None, [played_a, played_b, *buttons], api_visibility="private")
    for clip, flag, other in ((clip_a, played_a, played_b), (clip_b, played_b, played_a)):
        clip.stop(lambda other_played: (True, *[gr.update(interactive=bool(other_played))] * len(buttons)),
                  other, [flag, *buttons], api_visibility="private")
    for button, (_, code) in zip(buttons, CHOICES, strict=True):
        button.click(handlers.voter(code), [battle, played_a, played_b], note, api_visibility="private").then(
            lambda: locked, None, buttons, api_visibility="private")
    gr.api(handlers.vote, api_name="arena_vote")
    refresh.click(handlers.leaderboard, None, [board, win_rate, counts], api_name="arena_leaderboard")
    export.click(handlers.export, password, files, api_name="arena_export")
