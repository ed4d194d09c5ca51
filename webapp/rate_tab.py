"""The Compare & rate tab of `app.py`: blind A/B clips, 1-5 expression scores, tag placement.

Library module (run the app with `python app.py`). A rater picks or types a prompt, sets
up A and B (two systems, or one system with two seeds or settings), generates the pair,
hears it under shuffled blind labels, scores each clip 1-5 for expression (docs/ARCHITECTURE.md §8
rubric), gives a preference and, for a prompt with one inline tag, says which sound was
heard and before which word. `webapp.ratings` stores it; the results view aggregates with
`evaluation.indicemo` and `evaluation.nova`. Results and exports need the admin password
when one is configured (`webapp.access`); files go where `webapp.storage` says. A generated
pair waits in the data dir's pending/ (`PendingClips`: bounded per client, keyed by
`webapp.guard.address_key` so an IPv6 client counts as its /64, and overall; the oldest
unrated pairs go first, their trials with them) and its clips move to clips/<trial id>/ when
it is rated; rating a pair that was pruned gets PAIR_EXPIRED.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from evaluation import indicemo, nova
from rumik_app.files import sha256_file
from rumik_app.prompt import TONES, validate_text
from webapp.access import AdminGate
from webapp.common import (
    APP_MAX_TEXT_CHARS,
    LABEL_PATTERN,
    MAX_COMMENT_CHARS,
    MAX_PASSWORD_CHARS,
    NAME_PATTERN,
    PROMPT_ID_PATTERN,
    SYNTH_CONCURRENCY,
    UserError,
    check_field,
    check_length,
    user_errors,
)
from webapp.forms import DEFAULT_PAIR_SECONDS, PairForm, RatingForm, SideForm, form_event
from webapp.guard import address_key, client_address
from webapp.ratings import NO_PREFERENCE, NOT_HEARD, UNSURE_INDEX, ClipRating, RatingStore, Submission, Trial, TrialClip
from webapp.storage import DataLayout, PendingClips
from webapp.synth_tab import SynthHandlers
from webapp.synth_widgets import NONE_CHOICE, setting_widget
from webapp.systems import SYSTEM_ESPEAK, SYSTEM_KEYS, SYSTEM_RUMIK, SystemRegistry

PROMPT_DIR = Path(__file__).resolve().parent.parent / "evaluation" / "prompts"
LABELS = ("Clip 1", "Clip 2")
RUBRIC = (
    "**Expression score, 1-5**: judge *tone and pitch* (does the melody fit the target delivery?), "
    "*energy and dynamics* (loudness and intensity), *timing and phrasing* (pauses, emphasis, pace) and "
    "*authenticity and sustainment* (sounds like a real person, and keeps it up to the end). "
    "1 = flat or wrong emotion, 3 = recognisable but uneven, 5 = convincing throughout."
)
TAG_BRACKETS = re.compile(r"<[^<>\n]{1,40}>|\[[^\[\]\n]{1,40}\]")
TRIAL_ID = re.compile(r"[0-9a-f]{16}")  # uuid4().hex[:16], as generate_pair makes them
PAIR_EXPIRED = ("This pair expired before it was rated: unrated pairs are kept for a day at most, and the oldest "
                "make way when one visitor (or everyone together) has too many waiting. Generate a new pair and "
                "rate it.")


@dataclass(frozen=True)
class PromptItem:
    id: str
    text: str  # what to synthesise, a tag (if any) spelled <laugh>/<chuckle>/<sigh>
    target_delivery: str | None


def prompt_sets() -> dict[str, Path]:
    """Prompt-set files shipped under evaluation/prompts, by file stem."""
    return {p.stem: p for p in sorted(PROMPT_DIR.glob("*.jsonl"))} if PROMPT_DIR.is_dir() else {}


def _item(rec: dict) -> PromptItem | None:
    text = rec.get("text")
    cls = nova.to_class(str(rec.get("nvv") or ""), nova.load_spellings()) if rec.get("nvv") else None
    if rec.get("text_with_mark") and cls:
        text = TAG_BRACKETS.sub(f"<{cls}>", str(rec["text_with_mark"]), count=1)
    if not rec.get("id") or not text:
        return None
    delivery = rec.get("target_delivery") or rec.get("delivery") or rec.get("emotion")
    try:
        delivery = indicemo.canonical_delivery(delivery) if delivery else None
    except ValueError:
        delivery = None
    return PromptItem(str(rec["id"]), str(text), delivery)


def load_prompt_set(name: str) -> list[PromptItem]:
    path = prompt_sets().get(name)
    if path is None:
        raise UserError(f"Unknown prompt set {name!r}. Sets: {', '.join(prompt_sets()) or 'none shipped yet'}.")
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = _item(json.loads(line))
            if item is not None:
                items.append(item)
    return items


def system_ids(registry: SystemRegistry, a: SideForm, b: SideForm) -> tuple[str, str]:
    """Export ids for the two sides: the system, plus what tells them apart if it is the same system."""
    names = []
    for side in (a, b):
        key = registry.resolve_key(side.system)
        name = (key if key != SYSTEM_RUMIK or registry.model == "rumik-ai/rumik-oss-1"
                else f"{key}[{Path(registry.model).name}]")
        names.append(name)
    if names[0] != names[1]:
        return names[0], names[1]
    diffs = [k for k in ("voice", "tone", "accent", "pace", "temperature", "seed")
             if str(getattr(a, k)) != str(getattr(b, k))]
    if not diffs:
        return f"{names[0]} (A)", f"{names[1]} (B)"

    def describe(side: SideForm) -> str:
        return ", ".join(f"{k} {getattr(side, k) if getattr(side, k) not in ('', None) else 'none'}" for k in diffs)

    return f"{names[0]} ({describe(a)})", f"{names[1]} ({describe(b)})"


def _address(request) -> str:
    """The client's address of a Gradio event ("" without a request, e.g. in a test)."""
    client = getattr(request, "client", None)
    return getattr(client, "host", "") or ""


def check_label(label: object) -> str:
    """An export label ("" = none): letters, digits and . _ -, at most 40, and not a system's
    name (a label only ever adds to the real system's id; see `export_id`)."""
    text = ("" if label is None else str(label)).strip()
    if not text:
        return ""
    check_field(text, "export label", LABEL_PATTERN, "1-40 letters, digits and . _ - (no spaces)")
    if text.casefold() in {k.casefold() for k in SYSTEM_KEYS}:
        raise UserError(f"The export label {text!r} is a system's name; a label names a variant of a system, e.g. "
                        "'ckpt-2000'.")
    return text


def export_id(system: str, label: str, auto: str, registry: SystemRegistry) -> str:
    """The id a clip is exported under: the automatic one, or with a label "<system>:<label>",
    so the real system always leads (a label cannot credit one system's clip to another)."""
    return f"{registry.resolve_key(system)}:{label}" if label else auto


class RateHandlers:
    """The Compare & rate functions. Rated clips and exports are kept in the private data dir
    (`layout`), unrated pairs in its pending/ area (`pending`, default: `PendingClips` with
    the default quota); visitors get copies under random names from the served folder.
    Results and exports need the admin password when one is configured (`admin`)."""

    def __init__(self, registry: SystemRegistry, synth: SynthHandlers, store: RatingStore, layout: DataLayout,
                 admin: AdminGate | None = None, pending: PendingClips | None = None):
        self.registry, self.synth, self.store, self.layout = registry, synth, store, layout
        self.admin = admin if admin is not None else AdminGate()
        self.pending = pending if pending is not None else PendingClips(layout.pending_clips)
        store.discard_unrated(self.pending.removed_on_start)

    def set_items(self, name: str):
        import gradio as gr

        with user_errors("Loading the prompt set"):
            items = load_prompt_set(name) if name else []
        return gr.update(choices=[(f"{i.id} · {i.text[:70]}", i.id) for i in items], value=None)

    def load_item(self, name: str, item_id: str, random_pick: bool = False):
        """(text, prompt id, target delivery, tone A, tone B) for an item (or a random one)."""
        import gradio as gr

        with user_errors("Loading the prompt"):
            if not name:
                raise UserError("Choose a prompt set first.")
            items = load_prompt_set(name)
            if not items:
                raise UserError(f"Prompt set {name!r} has no usable prompts.")
            item = secrets.choice(items) if random_pick else next((i for i in items if i.id == item_id), None)
            if item is None:
                return (gr.skip(),) * 6
        tone = (item.target_delivery or "").lower()
        tone_update = tone if tone in TONES else gr.skip()
        return item.text, item.id, item.target_delivery or "", tone_update, tone_update, item.id

    def draw(self, name: str):
        return self.load_item(name, "", random_pick=True)

    def generate_pair(self, form: PairForm, request: gr.Request = None):
        """Synthesise A and B into pending/ (counted against the client's address), store the
        trial, return the clips under shuffled blind labels."""
        import gradio as gr

        with user_errors("Generating the pair"):
            text = validate_text(form.text, max_chars=APP_MAX_TEXT_CHARS)
            delivery = indicemo.canonical_delivery(form.target_delivery) if form.target_delivery else None
            max_seconds = form.max_seconds
            sides = (form.a, form.b)
            built = [self.synth.build(side.synth_form(text, max_seconds)) for side in sides]
            auto = system_ids(self.registry, *sides)
            labels = [check_label(side.label) for side in sides]
            ids = [export_id(side.system, label, a, self.registry)
                   for side, label, a in zip(sides, labels, auto, strict=True)]
            if ids[0] == ids[1]:
                raise UserError(f"A and B would both be exported as {ids[0]!r}; give them different labels.")
            trial_id = uuid.uuid4().hex[:16]
            prompt_id = (form.prompt_id or "").strip() or "typed-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:10]
            prompt_id = check_field(prompt_id, "prompt id", PROMPT_ID_PATTERN,
                                    "1-128 letters, digits and . : _ - (no spaces)")
            order = [0, 1]
            secrets.SystemRandom().shuffle(order)
            trial = Trial(trial_id, prompt_id, text, delivery, [])
            blind = [(built[k], "AB"[k], ids[k], labels[k]) for k in order]  # in the order of LABELS
            served = self._make_pair(trial, blind, max_seconds, address_key(_address(request) or client_address()))
        req = trial.request
        info = f"Trial `{trial_id}` · prompt `{prompt_id}`" + (f" · target delivery **{delivery}**" if delivery else "")
        tag_updates = []
        for _ in LABELS:
            if req is None:
                tag_updates += [gr.update(visible=False, value=None), gr.update(visible=False, value=None, choices=[])]
            else:
                where = [(f"“{w}”", i) for i, w in enumerate(req.words)]
                where += [("after the last word", len(req.words)), ("heard it, unsure where", UNSURE_INDEX)]
                tag_updates += [gr.update(visible=True, value=None,
                                          label=f"Requested sound: <{req.nvv}>. What did you hear?"),
                                gr.update(visible=False, value=None, choices=where)]  # shown once a sound is picked
        if req is None and TAG_BRACKETS.search(text):
            info += " · (more than one tag: the tag-placement question is skipped)"
        return (served[0], served[1], trial_id, info, None, None, *tag_updates, None, "")

    def _make_pair(self, trial: Trial, blind: list, max_seconds: float, address: str) -> list[str]:
        """Synthesise `blind` ((system, request), side, export id, label) per LABELS into
        pending/, fill in and store `trial`, and admit the pair against `address` (the oldest
        unrated pairs over a quota go, with their trials). Returns the served copies."""
        folder = self.pending.start(trial.trial_id)
        try:
            for label, ((system, req), side, export, export_label) in zip(LABELS, blind, strict=True):
                audio = system.synthesize(req)
                archived = self.layout.rated_clip(trial.trial_id, label)  # where it goes once rated
                path = audio.save(folder / archived.name)
                settings = {**req.to_dict(), "system": system.key, "system_label": system.label,
                            "model": self.registry.model if system.key == SYSTEM_RUMIK else system.key,
                            "max_seconds": float(max_seconds), "label": export_label}
                trial.clips.append(TrialClip(label, side, export, settings, audio.seed, sha256_file(path),
                                             str(archived)))
            # The rater hears copies under random names: nothing in a URL reveals the side, the
            # trial or the seed, and no other visitor can guess it.
            served = [str(self.synth.served.copy(folder / Path(c.audio_path).name)) for c in trial.clips]
            self.store.add_trial(trial)
        except BaseException:
            self.pending.abandon(trial.trial_id)
            raise
        self.store.discard_unrated(self.pending.admit(trial.trial_id, address))
        return served

    def _archive(self, sub: Submission) -> None:
        """Move the rated pair's clips from pending/ to clips/<trial id>/ once the submission
        checks out; UserError(PAIR_EXPIRED) if they were pruned unrated. An id this server never
        made is left to the store's own message."""
        trial_id = sub.trial_id
        if not TRIAL_ID.fullmatch(trial_id) or self._archived(trial_id):
            return
        if not self.pending.is_pending(trial_id):
            raise UserError(PAIR_EXPIRED)
        self.store.check(sub)  # a submission that will not be stored archives nothing
        if not self.pending.archive(trial_id, self.layout.rated_clips / trial_id) and not self._archived(trial_id):
            raise UserError(PAIR_EXPIRED)

    def _archived(self, trial_id: str) -> bool:
        return all(self.layout.rated_clip(trial_id, label).is_file() for label in LABELS)

    def submit(self, form: RatingForm, request: gr.Request = None) -> str:
        """Store one rating (idempotent per rater and trial); returns a status line. Behind
        `--auth` the rater is the signed-in user, whatever the form says."""
        with user_errors("Submitting the rating"):
            trial_id = form.trial_id or ""
            if not trial_id.strip():
                raise UserError("Generate a pair first, then rate it.")
            signed_in = getattr(request, "username", None) if request is not None else None
            rater = signed_in or check_field(form.rater, "rater name", NAME_PATTERN,
                                             "1-64 letters, digits, spaces and . ' - (starting with a letter or digit)")
            comment = check_length(form.comment, "comment", MAX_COMMENT_CHARS)
            ratings = []
            for label, (score, heard, where) in zip(LABELS, form.clips(), strict=True):
                if score in (None, ""):
                    raise UserError(f"Give {label} an expression score from 1 to 5.")
                ratings.append(ClipRating(label, int(score), heard or None,
                                          None if where in (None, "") else int(where)))
            sub = Submission(trial_id.strip(), str(rater or ""), form.preference or "", ratings, comment or "")
            from webapp.ratings import RatingError

            try:
                self._archive(sub)
                stored = self.store.submit(sub)
            except RatingError as exc:
                raise UserError(str(exc)) from None
        total = self.store.count_submissions()
        if not stored:
            return (f"Already stored: this pair was rated by {sub.rater.strip()} before (submission `{sub.key()}`). "
                    "Generate a new pair.")
        return f"✓ Stored (submission `{sub.key()}`; {total} in total). Generate the next pair."

    def results(self, admin_password: str = "", request: gr.Request = None) -> tuple[str, dict]:
        """(markdown report, numbers) over every stored rating; admin only if a password is set."""
        with user_errors("Aggregating the results"):
            self.admin.require(check_length(admin_password, "password", MAX_PASSWORD_CHARS), "Showing the results",
                               _address(request))
            return self.store.results()

    def export(self, admin_password: str = "", request: gr.Request = None) -> list[str]:
        """Write an export into the data dir (kept there) and return download copies of its main files."""
        with user_errors("Exporting"):
            self.admin.require(check_length(admin_password, "password", MAX_PASSWORD_CHARS), "Exporting the ratings",
                               _address(request))
            out = self.layout.new_export_dir()
            files = self.store.export(out)
            # The zip keeps the folder layout (transcripts per system); the loose files are the main ones.
            main = [p for p in files if p.parent == out and p.suffix != ".json"]
            return [str(p) for p in self.synth.served.publish(main)]


def _side_controls(name: str, system_choices, default_system: str):
    """One side's controls: a system, then the request settings a side sets, as declared."""
    import gradio as gr

    def widget(setting: str):  # ids of this side's own: the Synthesise tab has the plain ones
        return setting_widget(setting, elem_id=f"{setting.replace('_', '-')}-{name.lower()}")

    with gr.Column():
        gr.Markdown(f"**Settings {name}**")
        with gr.Row():
            system = gr.Dropdown(system_choices, value=default_system, label="System", allow_custom_value=True)
            voice = widget("voice")
        with gr.Row():
            tone, accent, pace = (widget(setting) for setting in ("tone", "accent", "pace"))
        with gr.Row():
            seed, temperature = widget("seed"), widget("temperature")
        label = gr.Textbox(value="", label="Export id (optional)", placeholder="default: the system and what differs")
    return dict(system=system, voice=voice, tone=tone, accent=accent, pace=pace, seed=seed, temperature=temperature,
                label=label)


def build_rate_tab(h: RateHandlers, default_system: str, system_choices: list[tuple[str, str]]) -> None:
    """Lay out the Compare & rate tab inside an open `gr.Tab` and wire its events."""
    import gradio as gr

    sets = list(prompt_sets())
    rater = gr.Textbox(value="", label="Your rater name", placeholder="e.g. priya", elem_id="rater")
    with gr.Row():
        set_name = gr.Dropdown(sets, value=sets[0] if sets else None, label="Prompt set",
                               info="evaluation/prompts/*.jsonl" if sets else "No prompt sets found; type a prompt.")
        first = load_prompt_set(sets[0]) if sets else []
        item = gr.Dropdown([(f"{i.id} · {i.text[:70]}", i.id) for i in first], value=None, label="Prompt from the set")
        draw = gr.Button("Draw a random prompt", size="sm")
    text = gr.Textbox(value="", label="Prompt (type your own, or pick one above)", lines=2, elem_id="rate-text")
    with gr.Row():
        prompt_id = gr.Textbox(value="", label="Prompt id",
                               placeholder="set prompts keep their id; typed ones get typed-<hash>")
        delivery = gr.Dropdown([NONE_CHOICE] + [(d, d) for d in indicemo.DELIVERIES], value="",
                               label="Target delivery (for IndicEmo)")
    with gr.Row():
        a = _side_controls("A", system_choices, default_system)
        # B defaults to the classical baseline when A is the model: the comparison most raters want.
        b = _side_controls("B", system_choices, SYSTEM_ESPEAK if default_system == SYSTEM_RUMIK else default_system)
    max_seconds = setting_widget("max_seconds", value=DEFAULT_PAIR_SECONDS, label="Max seconds per clip",
                                 elem_id="pair-seconds")
    generate = gr.Button("Generate the pair", variant="primary", elem_id="generate-pair")
    trial_id = gr.Textbox(value="", label="Trial id", interactive=False, elem_id="trial-id")
    info = gr.Markdown()
    gr.Markdown(RUBRIC)
    per_clip = []
    with gr.Row():
        for n, label in enumerate(LABELS, 1):
            with gr.Column():
                clip = gr.Audio(label=label, type="filepath", interactive=False, elem_id=f"clip-{n}")
                score = gr.Radio(list(range(1, 6)), label=f"{label}: expression score (1-5)", elem_id=f"score-{n}")
                heard = gr.Radio([("not heard", NOT_HEARD)] + [(c, c) for c in nova.CLASSES], visible=False,
                                 label="Requested sound: what did you hear?", elem_id=f"heard-{n}")
                where = gr.Radio([], visible=False, label="Where? Click the word the sound came just before",
                                 elem_id=f"where-{n}")
                per_clip.append((clip, score, heard, where))
    preference = gr.Radio([(x, x) for x in LABELS] + [("No preference", NO_PREFERENCE)],
                          label="Which clip do you prefer?", elem_id="preference")
    comment = gr.Textbox(value="", label="Comment (optional)")
    submit = gr.Button("Submit rating", variant="primary", elem_id="submit-rating")
    status = gr.Markdown(elem_id="rating-status")
    admin = h.admin.enabled
    with gr.Accordion("Results and export (admin)" if admin else "Results and export", open=False):
        # Without an admin password (local use) this stays hidden and results are open to all.
        admin_password = gr.Textbox(value="", type="password", label="Admin password", visible=admin,
                                    elem_id="admin-password", info="Results and exports hold every rater's ratings.")
        show = gr.Button("Show results")
        results_md = gr.Markdown()
        results_json = gr.JSON(label="Numbers")
        export = gr.Button("Export (IndicEmo judgments, NoVA prompts and transcripts, raw CSV)")
        files = gr.File(label="Export files", file_count="multiple", interactive=False)

    set_name.change(h.set_items, inputs=set_name, outputs=item, api_name="prompt_set_items")
    item_outputs = [text, prompt_id, delivery, a["tone"], b["tone"], item]
    item.input(h.load_item, inputs=[set_name, item], outputs=item_outputs, api_name="load_prompt")
    draw.click(h.draw, inputs=set_name, outputs=item_outputs, api_name="draw_prompt")
    text.input(lambda: "", outputs=prompt_id, api_name="typed_prompt", queue=False, show_progress="hidden")
    (c1, s1, h1, w1), (c2, s2, h2, w2) = per_clip
    # In the API's order (gradio_client also passes arguments by position): max_seconds last.
    pair_inputs = dict(text=text, prompt_id=prompt_id, target_delivery=delivery,
                       **PairForm.input_names({"a": a, "b": b}), max_seconds=max_seconds)
    generate.click(form_event(PairForm, h.generate_pair), inputs_kwargs=pair_inputs,
                   outputs=[c1, c2, trial_id, info, s1, s2, h1, w1, h2, w2, preference, status],
                   api_name="generate_pair", concurrency_id="synthesis", concurrency_limit=SYNTH_CONCURRENCY)
    for _, _, heard, where in per_clip:
        heard.input(lambda heard: gr.update(visible=heard not in (None, "", NOT_HEARD)), inputs=heard, outputs=where,
                    api_name="show_word_choices", queue=False, show_progress="hidden")
    rating_inputs = dict(rater=rater, trial_id=trial_id, score_1=s1, score_2=s2, preference=preference, heard_1=h1,
                         where_1=w1, heard_2=h2, where_2=w2, comment=comment)
    submit.click(form_event(RatingForm, h.submit), inputs_kwargs=rating_inputs, outputs=status,
                 api_name="submit_rating", trigger_mode="once")
    show.click(h.results, inputs=admin_password, outputs=[results_md, results_json], api_name="rating_results")
    export.click(h.export, inputs=admin_password, outputs=files, api_name="export_ratings")
