"""The Synthesise tab of `app.py` and the non-streaming `/synthesize` API endpoint.

Library module (run the app with `python app.py`). `SynthHandlers` holds the plain
functions (testable without a browser); `build_synth_tab` lays out the components and wires
them. The UI streams audio while it is generated (`gr.Audio(streaming=True)` fed by a
generator of WAV pieces), with an info line counting the seconds generated against the
budget, and then offers the whole clip as a 24 kHz WAV download. A run first clears the
previous clip, seed and download, so an error is never shown under an old result.
The live prompt preview is queued like every other event, with a small limit of its own
(`PREVIEW_CONCURRENCY`), so a visitor cannot run previews of long texts without bound.

Say it right (`webapp.scripts`): a visitor may upload a pronunciation lexicon (PLS,
TSV or JSON) and type words in a small lexicon editor (*My words*, a table of grapheme | alias |
languages, bounded; its entries win ties with the file's), inputs of their own events only (per
session by construction, nothing kept on the server), applied to their requests and shown in the
preview; text starting with `<speak>` is SSML and, with *Dialogue* on, the text is a script of
`Name (tone, pace): text` lines. Both are scripts (`rumik_app.engine.script`): spoken whole,
their parts joined with exact pauses, the info line listing each part's span; the player gets a
script in one piece. Only rumik engines speak scripts; espeak-ng refuses them (it reads lexicons).

Word timestamps (`webapp.timings`): with *Word timestamps* ticked, a second event
aligns the words of the clip just streamed (the stream event keeps what it needs in the
visitor's session state) and shows SRT and WebVTT captions and a transcript whose current word
is highlighted while the clip plays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rumik_app.align import AlignerSet
from rumik_app.audio import SAMPLE_RATE, Audio
from rumik_app.engine.script import Part
from rumik_app.errors import RumikError
from rumik_app.prompt import ALLOWED_TAGS, MAX_TEXT_CHARS, VOICE_NOTE, VOICES
from rumik_app.request import (
    APP_LIMITS,
    DEFAULT_MAX_SECONDS,
    TINY_MAX_SECONDS,
    SynthesisRequest,
    build_request,
    default_max_seconds,
)
from rumik_app.text.lexicon import Lexicon
from webapp.common import (
    APP_MAX_TEXT_CHARS,
    PREVIEW_CONCURRENCY,
    SYNTH_CONCURRENCY,
    UserError,
    checked_slider,
    error_line,
    user_errors,
)
from webapp.examples import DEFAULT_LANGUAGE, LANGUAGE_CHOICES, SHOWCASE, example_for, script_note
from webapp.forms import MODE_FREE, MODE_STRUCTURED, SynthForm, form_event, synth_input_names
from webapp.scripts import (
    DEFAULT_GAP,
    KIND_DIALOGUE,
    KIND_NAMES,
    MAX_EDITOR_ROWS,
    MAX_GAP_SECONDS,
    NEEDS_ENGINE,
    NEEDS_ENGINE_FIX,
    STREAM_NOTE,
    check_gap,
    lexicon_note,
    read_lexicon_editor,
    read_lexicon_upload,
    script_kind,
    script_parts,
    script_prompts,
    script_summary,
    spans_table,
)
from webapp.storage import ServedFolder
from webapp.synth_widgets import lexicon_editor, lexicon_upload, setting_widget, setting_widgets
from webapp.systems import SYSTEM_ESPEAK, SYSTEM_RUMIK, SYSTEM_TINY, LoadedSystem, SystemRegistry, SystemUnavailable
from webapp.timings import (
    ALIGN_CONCURRENCY,
    TIMESTAMPS_INFO,
    TRANSCRIPT_ELEM_ID,
    TimingJob,
    WordTimings,
    script_job,
    timing_job,
)

log = logging.getLogger(__name__)

# The settings laid out by hand (the rest go under Generation, with the seed and the length cap).
LAID_OUT = ("text", "normalize", "voice", "language", "tone", "accent", "pace", "description", "max_seconds", "seed")
TEXT_ELEM_ID = "tts-text"
FINISH_AT_CAP = "max_tokens"  # rumik_app.decode.sampling.FINISH_MAX_TOKENS: a chunk cut at its token budget
SEED_PLACEHOLDER_TEXT = "…"  # a script's fields are checked (and its seed drawn) with this in place of the script
SAY_IT_RIGHT_NOTE = (
    "**Lexicon**: a PLS (.pls, .xml), TSV (`word<TAB>say it as`) or JSON file of words and how to say them, "
    f"and/or **My words**, a table of up to {MAX_EDITOR_ROWS} words you type (it wins where both give a word), "
    "for your requests only; the preview shows the text with their aliases. **SSML**: text starting with "
    "`<speak>` (`<break time=\"500ms\"/>`, `<say-as>`, `<sub alias>`, `<prosody rate>`, `<voice name>`, "
    "`<lang>`, `<p>`, `<s>`). **Dialogue**: one turn a line, `Name (tone, pace): text`, where Name is a voice "
    f"({', '.join(VOICES)}) and tone, pace and accent are optional. " + STREAM_NOTE)
TEXT_LIMIT_NOTE = (f"Long text is split at sentence ends and joined. The app takes {APP_MAX_TEXT_CHARS:,} characters "
                   "(about two minutes of speech) so one visitor cannot hold the shared model for long; the CLI and "
                   f"the Python API take up to {MAX_TEXT_CHARS:,}.")

# Inserts a tag at the textarea's cursor (or replaces the selection), with spaces around it.
INSERT_TAG_JS = """
(text) => {{
  const tag = "{tag}";
  const ta = document.querySelector("#{elem} textarea");
  text = text || "";
  const s = ta && ta.selectionStart != null ? ta.selectionStart : text.length;
  const e = ta && ta.selectionEnd != null ? ta.selectionEnd : s;
  const before = text.slice(0, s), after = text.slice(e);
  const left = before && !/\\s$/.test(before) ? " " : "";
  const right = after && !/^\\s/.test(after) ? " " : "";
  const out = before + left + tag + right + after;
  if (ta) {{ const pos = (before + left + tag + right).length;
    setTimeout(() => {{ ta.focus(); ta.setSelectionRange(pos, pos); }}, 0); }}
  return out;
}}
"""


@dataclass
class Job:
    """What one synthesis event does: one request, or a script (SSML, dialogue) of parts."""

    chosen: LoadedSystem
    seed: int
    request: SynthesisRequest | None = None
    kind: str | None = None  # webapp.scripts.KIND_SSML or KIND_DIALOGUE for a script
    parts: list[Part] | None = None


class SynthHandlers:
    """The Synthesise tab's functions; each raises gr.Error with one readable message."""

    def __init__(self, registry: SystemRegistry, served: ServedFolder, aligners: AlignerSet | None = None):
        self.registry, self.served = registry, served
        self.timings = WordTimings(registry, served, aligners)  # aligners: app.py --aligner (None: the engine's)

    def build(self, form: SynthForm) -> tuple[LoadedSystem, SynthesisRequest]:
        """Check everything: every field before any model is loaded (so they are checked even if
        the model is missing), then the voice against the chosen system's and the request's size
        against the app's limits (numbers can multiply a text). The same seed both times.
        The visitor's lexicons (My words, the uploaded file) are read first and carried by the request."""
        fields = _fields(form)
        fields["seed"] = build_request(fields, limits=APP_LIMITS).seed
        chosen = self.registry.get(form.system)
        req = build_request(fields, voices=chosen.voices, limits=APP_LIMITS, tokens_for=chosen.max_new_tokens_for)
        chosen.check_size(req, APP_LIMITS)
        return chosen, req

    def prepare(self, form: SynthForm) -> Job:
        """The job a form asks for: a request (`build`), or a script when Dialogue is on or the
        text is SSML. A script's fields and the script itself are checked before any model is
        loaded (against the published voices if the system is not loaded yet), then again
        against the loaded system's voices; its totals are checked when it is planned."""
        kind = script_kind(form.text, form.is_dialogue)
        if kind is None:
            chosen, req = self.build(form)
            return Job(chosen, req.seed, request=req)
        gap = check_gap(form.dialogue_gap) if kind == KIND_DIALOGUE else DEFAULT_GAP
        key = self.registry.resolve_key(form.system)
        _refuse_scripts(key, kind)
        fields = _fields(form)
        fields["seed"] = build_request({**fields, "text": SEED_PLACEHOLDER_TEXT}, limits=APP_LIMITS).seed
        if self.registry.status(key).state != "ready":  # checked before a model loads for it
            script_parts(kind, fields, VOICES, gap)
        chosen = self.registry.get(key)
        _refuse_scripts(key, kind, chosen)
        parts = script_parts(kind, fields, chosen.voices, gap, limits=APP_LIMITS, tokens_for=chosen.max_new_tokens_for)
        return Job(chosen, fields["seed"], kind=kind, parts=parts)

    def synthesize(self, form: SynthForm) -> str:
        """Non-streaming synthesis (the `/synthesize` API): path of a 24 kHz 16-bit WAV.
        normalize: read numbers, money, dates and times as words (False: the text as typed).
        lexicon: a PLS, TSV or JSON pronunciation lexicon for this request. Text starting with
        <speak> is SSML; dialogue: the text is `Name (tone, pace): text` lines, dialogue_gap
        seconds of silence between the turns (0 to 2). lexicon_entries: words to say differently,
        {"headers": ["grapheme", "alias", "languages"], "data": [["SBI", "एस बी आई", "hi"]]} (up to
        200 rows, blank rows ignored; languages optional), applied before the file's lexicon."""
        with user_errors("Synthesis"):
            job = self.prepare(form)
            if job.parts is not None:
                samples = job.chosen.synthesize_script(job.parts, APP_LIMITS).samples
            else:
                samples = job.chosen.synthesize(job.request).samples
            return str(self.served.write_wav(samples))

    def stream(self, form: SynthForm) -> Iterator[tuple]:
        """UI synthesis: yields (audio piece as WAV bytes, seed used as text, download path, info,
        timing job): the last is the `webapp.timings.TimingJob` the *Word timestamps* event reads
        (a gr.State: kept on the server, not an API output).

        The first yield clears the previous result (audio, seed, download, job), so an error never
        sits under an old clip; the info line then counts the audio generated against the
        budget while pieces stream, and on an error says what went wrong (also raised as
        gr.Error, the toast)."""
        import gradio as gr

        # gr.update(value=None) empties a streaming player (a plain None leaves the last clip in it);
        # the download is emptied and greyed out until this run's clip is there (_download_state).
        yield gr.update(value=None), "", gr.update(value=None, interactive=False), "Checking the request…", None
        try:
            with user_errors("Synthesis"):
                job = self.prepare(form)
            if job.parts is not None:
                yield from self._stream_script(job)
                return
            chosen, req = job.chosen, job.request
            yield gr.skip(), str(req.seed), gr.skip(), f"Generating with {chosen.label}, seed {req.seed}…", gr.skip()
            stats: dict = {}
            pieces: list[np.ndarray] = []
            with user_errors("Synthesis"):
                for piece in chosen.stream(req, stats):
                    if len(piece):
                        pieces.append(piece)
                        yield (Audio(piece).to_wav_bytes(), gr.skip(), gr.skip(), _progress(chosen, req, stats),
                               gr.skip())
                samples = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
                path = self.served.write_wav(samples)
        except gr.Error as exc:
            yield gr.skip(), gr.skip(), gr.skip(), error_line("Not synthesised", exc), gr.skip()
            raise
        yield (gr.skip(), str(req.seed), str(path), _info(chosen, req, samples, stats),
               timing_job(chosen, req, stats, path))

    def word_timings(self, wanted: object, job: TimingJob | None) -> Iterator[tuple]:
        """After a run, with *Word timestamps* ticked: (transcript HTML, [captions.srt, captions.vtt]
        or None, note), "Aligning…" first (`webapp.timings.WordTimings.run`)."""
        yield from self.timings.run(wanted, job)

    @staticmethod
    def clear_timings() -> tuple:
        """A new run starts: no transcript, captions or note of the previous clip."""
        return "", None, ""

    def _stream_script(self, job: Job) -> Iterator[tuple]:
        """A script for the player: made whole (its parts share the engine's batches), then one piece."""
        import gradio as gr

        spoken = sum(part.request is not None for part in job.parts)
        yield (gr.skip(), str(job.seed), gr.skip(),
               f"Generating the {KIND_NAMES[job.kind]} ({spoken} parts) with {job.chosen.label}, seed {job.seed}; "
               "it plays when all of it is made…", gr.skip())
        with user_errors("Synthesis"):
            result = job.chosen.synthesize_script(job.parts, APP_LIMITS)
            path = self.served.write_wav(result.samples)
        yield (Audio(result.samples).to_wav_bytes(), str(job.seed), str(path),
               _script_info(job, result.samples, result.spans, result.info), script_job(job.chosen, path))

    def default_seconds(self, system: str | None) -> float:
        """The Max seconds slider's default for a system: short for random-weight `tiny`."""
        try:
            key = self.registry.resolve_key(system)
        except SystemUnavailable:
            return DEFAULT_MAX_SECONDS
        if key == SYSTEM_TINY:
            return TINY_MAX_SECONDS
        return default_max_seconds(self.registry.model) if key == SYSTEM_RUMIK else DEFAULT_MAX_SECONDS

    def voice_choices(self, system: str | None):
        """The Voice menu for a system: its voices once loaded, a voice library's included
        (`--voices`, re-read when its folder changed); the published ones before. Never loads a model."""
        import gradio as gr

        try:
            voices = _ready_voices(self.registry, self.registry.resolve_key(system))
        except SystemUnavailable:
            voices = VOICES
        return gr.update(choices=list(voices))

    def preview(self, form: SynthForm) -> tuple[str, str]:
        """(exact prompt string or a '⚠' line saying what to fix, notes) for the live preview;
        with `normalize` the prompt shows the text as the model reads it (numbers as words).
        Never loads a model: a system not loaded yet is checked against the published voices."""
        notes = [script_note(form.text or "", form.language)]
        if not (form.text or "").strip():
            return "", ""
        try:
            key = self.registry.resolve_key(form.system)
            voices = _ready_voices(self.registry, key)
            kind = script_kind(form.text, form.is_dialogue)
            mine, uploaded = _visitor_lexicons(form)
            fields = _fields(form, mine + uploaded)
            if kind is None:
                req = build_request(fields, voices=voices, limits=APP_LIMITS)
                prompt = "[BOS]" + req.prompt(voices=voices, max_chars=APP_MAX_TEXT_CHARS)
            else:
                _refuse_scripts(key, kind)
                gap = check_gap(form.dialogue_gap) if kind == KIND_DIALOGUE else DEFAULT_GAP
                parts = script_parts(kind, fields, voices, gap)
                prompt = script_prompts(parts, voices, APP_MAX_TEXT_CHARS)
                notes.append(script_summary(kind, parts))
        except RumikError as exc:  # the problem, in the project's words, instead of a failure
            return f"⚠ {exc}", "\n\n".join(n for n in notes if n)
        except Exception:  # noqa: BLE001 - no library message or path reaches a visitor
            log.exception("prompt preview failed")
            return "⚠ The preview is not available right now.", "\n\n".join(n for n in notes if n)
        notes.append(lexicon_note(mine, uploaded))
        if key == SYSTEM_ESPEAK:
            notes.append("The espeak-ng baseline does not read this prompt: it speaks the text with its own voice.")
        elif key == SYSTEM_TINY:
            notes.append("tiny has random weights: it reads this prompt but its audio is noise.")
        return prompt, "\n\n".join(n for n in notes if n)


def _visitor_lexicons(form: SynthForm) -> tuple[tuple[Lexicon, ...], tuple[Lexicon, ...]]:
    """(My words, the uploaded file's lexicon): each () when not given; PromptError for a bad one."""
    return read_lexicon_editor(form.lexicon_entries), read_lexicon_upload(form.lexicon)


def _fields(form: SynthForm, lexicons: tuple[Lexicon, ...] | None = None) -> dict:
    """`build_request`'s fields of a form, with the visitor's lexicons (`_visitor_lexicons`
    unless given): My words first, so its entries win ties with the file's."""
    if lexicons is None:
        mine, uploaded = _visitor_lexicons(form)
        lexicons = mine + uploaded
    return {**form.request_fields(), "lexicons": lexicons or None}


def _refuse_scripts(key: str, kind: str, chosen: LoadedSystem | None = None) -> None:
    """UserError unless the system speaks scripts (rumik engines: rumik-oss-1, tiny)."""
    if key == SYSTEM_ESPEAK or (chosen is not None and chosen.engine is None):
        label = chosen.label if chosen is not None else "espeak-ng (classical baseline)"
        what = "Dialogue" if kind == KIND_DIALOGUE else "SSML"
        raise UserError(NEEDS_ENGINE.format(what=what, label=label, fix=NEEDS_ENGINE_FIX[kind]))


def _ready_voices(registry: SystemRegistry, key: str) -> tuple[str, ...]:
    """The loaded system's voices if it is loaded (never loads a model for a preview)."""
    if registry.status(key).state == "ready":
        return registry.get(key).voices
    return VOICES


def _download_state(path: str | None):
    """After a run: the download button usable when it holds the new clip. (A run greys it out
    at its start, so after an error it stays greyed out: Gradio runs no `.then` after one.)"""
    import gradio as gr

    return gr.update(interactive=bool(path))


def _progress(chosen: LoadedSystem, req: SynthesisRequest, stats: dict) -> str:
    """The info line while pieces stream: audio generated so far out of the budget."""
    head = f"Generating with {chosen.label}, seed {req.seed}"
    if chosen.engine is None or not stats.get("max_tokens"):
        return head + "…"
    per_second = chosen.engine.layout.tokens_per_second
    done, budget = stats["tokens"] / per_second, stats["max_tokens"] / per_second
    chunks = f" in {stats['chunks']} chunks" if stats.get("chunks", 1) > 1 else ""
    return (f"{head}: {done:.1f} s of audio of at most {budget:.1f} s{chunks} "
            f"({stats['tokens']} of {stats['max_tokens']} tokens)…")


def _info(chosen: LoadedSystem, req: SynthesisRequest, samples: np.ndarray, stats: dict) -> str:
    seconds = len(samples) / SAMPLE_RATE
    parts = [f"{seconds:.2f} s of audio", f"seed {req.seed}", chosen.label]
    if "tokens" in stats:
        parts.append(f"{stats['tokens']} tokens")
    if stats.get("finish_reasons"):
        parts.append("finished by " + ", ".join(sorted(set(stats["finish_reasons"]))))
    line = " · ".join(parts)
    if FINISH_AT_CAP in stats.get("finish_reasons", []):
        line += ("\n\n⚠ Stopped at the *Max seconds* cap instead of ending by itself: the speech may be cut off. "
                 "Raise *Max seconds* (under Generation).")
    return line


def _script_info(job: Job, samples: np.ndarray, spans: list[dict], info: dict) -> str:
    """The info line after a script: length, seeds, system, tokens, and a table of its parts' spans."""
    seconds = len(samples) / SAMPLE_RATE
    spoken = sum(span["voice"] is not None for span in spans)
    line = (f"{seconds:.2f} s of audio · {KIND_NAMES[job.kind]}, {spoken} parts · seed {job.seed} (part k: seed + k) "
            f"· {job.chosen.label} · {info.get('tokens', 0)} tokens")
    reasons = sorted({reason for span in spans for reason in span["finish_reasons"]})
    if reasons:
        line += " · finished by " + ", ".join(reasons)
    line += "\n\n" + spans_table(spans)
    if FINISH_AT_CAP in reasons:
        line += ("\n\n⚠ A part stopped at the *Max seconds* cap instead of ending by itself: its speech may be cut "
                 "off. Raise *Max seconds* (under Generation).")
    return line


def build_synth_tab(handlers: SynthHandlers, default_system: str, system_choices: list[tuple[str, str]]) -> None:
    """Lay out the Synthesise tab inside an open `gr.Blocks`/`gr.Tab` and wire its events."""
    import gradio as gr

    first_text = example_for(DEFAULT_LANGUAGE)
    first_prompt, first_notes = handlers.preview(SynthForm(text=first_text, description_mode=MODE_STRUCTURED,
                                                           system=default_system, language=DEFAULT_LANGUAGE))

    gr.Markdown(f"**{VOICE_NOTE}**", elem_id="voice-note")
    with gr.Row():
        with gr.Column(scale=3):
            text = setting_widget("text", label=f"Text (up to {APP_MAX_TEXT_CHARS:,} characters)", value=first_text,
                                  info=TEXT_LIMIT_NOTE, elem_id=TEXT_ELEM_ID,
                                  placeholder="Type in any of the 22 languages or English…")
            with gr.Row():
                tag_buttons = [gr.Button(f"Insert {tag}", size="sm", elem_id=f"insert-{tag.strip('<>')}")
                               for tag in ALLOWED_TAGS]
            normalize = setting_widget("normalize", info="₹2,50,000 → दो लाख पचास हज़ार रुपए; the preview shows what "
                                                         "the model reads.")
            timestamps = gr.Checkbox(value=False, label="Word timestamps", info=TIMESTAMPS_INFO,
                                     elem_id="word-timestamps")
            preview = gr.Textbox(label="Prompt the model receives (read-only)", value=first_prompt, interactive=False,
                                 lines=2, elem_id="prompt-preview")
            notes = gr.Markdown(first_notes, elem_id="prompt-notes")
            with gr.Accordion("Say it right: pronunciation lexicon, SSML, dialogue", open=False):
                gr.Markdown(SAY_IT_RIGHT_NOTE, elem_id="say-it-right-note")
                lexicon = lexicon_upload()
                lexicon_entries = lexicon_editor()
                with gr.Row():
                    dialogue = gr.Checkbox(value=False, label="Dialogue", elem_id="dialogue",
                                           info="The text is a script: `Name (tone, pace): text`, one turn a line.")
                    gap = checked_slider(0.0, MAX_GAP_SECONDS, value=DEFAULT_GAP, step=0.05, elem_id="dialogue-gap",
                                         label="Gap between turns (seconds)")
        with gr.Column(scale=2):
            system = gr.Dropdown(system_choices, value=default_system, label="System", allow_custom_value=True)
            voice = setting_widget("voice", choices=list(_ready_voices(handlers.registry, default_system)),
                                   info="The four built-in voices are female-presenting; library voices (--voices) "
                                        "follow them.")
            # Also the examples' picker: the languages by name and script, no "(none)".
            language = setting_widget("language", choices=LANGUAGE_CHOICES, value=DEFAULT_LANGUAGE,
                                      info="Loads an example in its script. "
                                           "The model reads the language from the text itself.")
            mode = gr.Radio([MODE_STRUCTURED, MODE_FREE], value=MODE_STRUCTURED, label="Description")
            with gr.Group(visible=True) as structured:
                tone, accent, pace = (setting_widget(name) for name in ("tone", "accent", "pace"))
            description = setting_widget("description", visible=False,
                                         placeholder="e.g. warm and calm, like a bedtime story")
            with gr.Accordion("Generation", open=False):
                others = setting_widgets(exclude=LAID_OUT)  # the sampling sliders, and any setting declared since
                max_seconds = setting_widget("max_seconds", value=handlers.default_seconds(default_system))
                seed = setting_widget("seed")
    go = gr.Button("Synthesise", variant="primary", elem_id="synthesize-button")
    with gr.Row():
        audio = gr.Audio(label="Audio (plays while it is generated)", streaming=True, autoplay=True,
                         interactive=False, elem_id="audio-out")
        with gr.Column():
            # A textbox, not a Number: a Number shows 0 while empty, which reads as "seed 0 was used".
            seed_used = gr.Textbox(value="", label="Seed used", interactive=False, elem_id="seed-used",
                                   placeholder="shown after a run")
            download = gr.DownloadButton("Download (24 kHz WAV)", value=None, elem_id="download", interactive=False)
            info = gr.Markdown(elem_id="synth-info")
    # Word timestamps (webapp.timings): shown while the box is ticked, filled after each run.
    with gr.Column(visible=False, elem_id="word-timings") as timings_box:
        transcript = gr.HTML("", label="Transcript (the word being spoken is highlighted)", show_label=True,
                             container=True, elem_id=TRANSCRIPT_ELEM_ID)
        with gr.Row():
            captions = gr.File(label="Captions: SubRip (.srt) and WebVTT (.vtt)", file_count="multiple",
                               interactive=False, elem_id="captions")
            timings_note = gr.Markdown(elem_id="timings-note")
    timing_state = gr.State(None)  # the last clip's TimingJob: on the server only
    gr.Examples(
        [list(example) for example in SHOWCASE],
        inputs=[text, voice, language, tone, accent, pace],
        label="Examples: English, Hindi, Telugu, Tamil, Kannada, Bengali, Punjabi, and code-switched text with tags",
    )
    # API-only twin of the button: same inputs, one 24 kHz WAV file out, no streaming.
    api_audio = gr.Audio(type="filepath", format="wav", visible=False)
    api_button = gr.Button(visible=False)

    # The two synthesis events take one form (SynthForm): these components, by field name, in its
    # order, which is the API's too (gradio_client also passes arguments by position: a setting
    # declared since comes last, webapp.forms.SYNTH_INPUTS).
    components = dict(text=text, voice=voice, tone=tone, accent=accent, pace=pace, description=description, seed=seed,
                      max_seconds=max_seconds, language=language, normalize=normalize, **others, system=system,
                      description_mode=mode, lexicon=lexicon, dialogue=dialogue, dialogue_gap=gap,
                      lexicon_entries=lexicon_entries)
    inputs = {name: components[name] for name in synth_input_names()}
    preview_inputs = {name: inputs[name] for name in ("text", "voice", "tone", "accent", "pace", "description",
                                                      "description_mode", "system", "language", "normalize",
                                                      "lexicon", "dialogue", "dialogue_gap", "lexicon_entries")}
    for button, tag in zip(tag_buttons, ALLOWED_TAGS, strict=True):
        button.click(None, inputs=text, outputs=text, js=INSERT_TAG_JS.format(tag=tag, elem=TEXT_ELEM_ID))
    language.input(example_for, inputs=language, outputs=text, api_name="language_example")
    system.input(handlers.default_seconds, inputs=system, outputs=max_seconds, api_name="default_seconds",
                 queue=False, show_progress="hidden")
    # The Voice menu follows the system and the voice library (re-read when a visitor opens it).
    gr.on([system.input, voice.focus], handlers.voice_choices, inputs=system, outputs=voice, api_name="voice_choices",
          queue=False, show_progress="hidden")
    mode.change(lambda mode: (gr.update(visible=mode == MODE_STRUCTURED), gr.update(visible=mode == MODE_FREE)),
                inputs=mode, outputs=[structured, description], api_name="description_mode")
    # In the queue with a small limit of its own (normalising a long text is CPU work, and a
    # visitor's previews count against their share); always_last keeps one pending per page.
    gr.on([c.change for c in preview_inputs.values()], form_event(SynthForm, handlers.preview),
          inputs_kwargs=preview_inputs, outputs=[preview, notes], api_name="prompt_preview", show_progress="hidden",
          trigger_mode="always_last", concurrency_id="preview", concurrency_limit=PREVIEW_CONCURRENCY)
    # Gradio's busy/error overlay on the player only: the info line beside it says what is happening.
    timing_outputs = [transcript, captions, timings_note]
    go.click(handlers.clear_timings, outputs=timing_outputs, api_name="clear_timings", api_visibility="private",
             queue=False, show_progress="hidden")
    run = go.click(form_event(SynthForm, handlers.stream), inputs_kwargs=inputs,
                   outputs=[audio, seed_used, download, info, timing_state], api_name="synthesize_stream",
                   concurrency_id="synthesis", concurrency_limit=SYNTH_CONCURRENCY, show_progress_on=[audio])
    run.then(_download_state, inputs=download, outputs=download, api_name="download_state", queue=False,
             show_progress="hidden")
    # The words are aligned after the clip is out (the player does not wait), in a queue of their own.
    run.then(handlers.word_timings, inputs=[timestamps, timing_state], outputs=timing_outputs,
             api_name="word_timings", api_visibility="private", concurrency_id="align",
             concurrency_limit=ALIGN_CONCURRENCY, show_progress="hidden")
    timestamps.change(lambda on: gr.update(visible=bool(on)), inputs=timestamps, outputs=timings_box,
                      api_name="word_timings_box", api_visibility="private", queue=False, show_progress="hidden")
    # The API twin: no description mode (tone, accent, pace and description as sent) and no language
    # (its dropdown picks examples; an API caller's numbers are read per clause, from the script).
    api_inputs = {name: component for name, component in inputs.items() if name not in ("description_mode", "language")}
    api_button.click(form_event(SynthForm, handlers.synthesize), inputs_kwargs=api_inputs, outputs=api_audio,
                     api_name="synthesize", concurrency_id="synthesis", concurrency_limit=SYNTH_CONCURRENCY)
