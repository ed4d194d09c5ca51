"""The "Your voices" tab of `app.py`: make a library voice from recordings, in the browser (docs/voices.md).

    handlers = VoiceTabHandlers(maker, Path("voices"), admin)     # maker: rumik_app.voices.makers
    build_voices_tab(handlers, demo)                               # inside gr.Blocks `demo`

Shown when the app runs with `--adapt-voices --voices DIR`. The visitor uploads recordings (audio
files, same-stem .txt transcripts, or a zip), records or uploads the consent statement read
aloud, names the voice and starts; the job runs in the background (`VoiceMaker`: queued, one at a
time, resumed after a restart), so the page may be closed: its id is kept in the browser
(`gr.BrowserState`) and the progress comes back when the page is opened again. A progress bar
follows the steps, a chart the training loss; when the job is done the voice is in the
Synthesise tab's Voice menu (the library is re-read when its folder changes) and its card shows
the minutes kept, the held-out loss before and after, speaker similarity and CER where the
checkpoint could be judged, how the consent was checked and the watermark policy.

On an app with an admin password (a public Space) starting and following a job takes it; on a
local app without one the tab is open. API endpoints: `/start_adaptation`, `/adaptation_progress`,
`/cancel_adaptation`. Uploads are copied into the maker's staging folder under their own plain
names and checked by the maker like the server's (training.voice.uploads): sizes, zips, headers.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from rumik_app.errors import RumikError
from rumik_app.voices.library import describe
from rumik_app.voices.makers import FINAL_STATES, MAX_UPLOAD_FILES, STEPS, VoiceMaker, check_upload_name
from rumik_app.voices.package import read_package
from rumik_app.watermark import DEFAULT_POLICY
from webapp.access import AdminGate
from webapp.common import ui_error, user_errors

log = logging.getLogger(__name__)

DEFAULT_STATEMENT = ("I agree that recordings of my voice are used to make a synthetic voice of me with "
                     "rumik-oss-1, and that audio made with it carries a watermark.")
STEP_NAMES = {"data": "Reading and cutting the recordings", "consent": "Checking the consent",
              "load": "Loading the model", "encode": "Encoding the clips", "replay": "Keeping the built-in voices",
              "train": "Training", "evaluate": "Evaluating", "package": "Adding the voice to the library"}  # of STEPS
UPLOAD_TYPES = [".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".webm", ".txt", ".zip"]
IDLE = "Upload recordings, read the statement for consent, name the voice and start."


class VoiceTabHandlers:
    """The tab's functions; each raises gr.Error with one readable message."""

    def __init__(self, maker: VoiceMaker, voices_dir: Path, admin: AdminGate):
        self.maker, self.voices_dir, self.admin = maker, Path(voices_dir), admin

    def start(self, recordings: list[str] | None, consent: str | None, name: str, statement: str,
              admin_password: str = "", request=None) -> str:
        """Queue an adaptation; returns its job id. recordings: uploaded file paths; consent: a recording's path."""
        with user_errors("Starting the adaptation"):
            self.admin.require(admin_password, "Making a voice", _address(request))
            if not recordings:
                raise ui_error("Upload the speaker's recordings first (audio files, or a zip of them).")
            if not consent:
                raise ui_error("Record or upload the consent statement read aloud by the speaker.")
            if len(recordings) > MAX_UPLOAD_FILES:
                raise ui_error(f"{len(recordings):,} files: at most {MAX_UPLOAD_FILES:,}; zip short recordings.")
            staging = self.maker.staging()
            try:
                folder = staging / "recordings"
                folder.mkdir()
                for path in recordings:
                    shutil.copyfile(path, folder / check_upload_name(Path(path).name))
                kept = shutil.copyfile(consent, staging / ("consent" + (Path(consent).suffix.lower() or ".wav")))
                return self.maker.submit((name or "").strip(), folder, kept, (statement or "").strip())["id"]
            except RumikError as exc:
                raise ui_error(str(exc)) from None
            finally:
                shutil.rmtree(staging, ignore_errors=True)

    def progress(self, job_id: str | None, admin_password: str = "", request=None) -> tuple:
        """(status Markdown, progress bar HTML, loss rows, voice card Markdown) of a job; the idle
        tab's for no job."""
        if not job_id:
            return IDLE, _bar(0.0, ""), _loss_rows([]), ""
        with user_errors("Reading the adaptation's progress"):
            self.admin.require(admin_password, "Following a voice", _address(request))
            try:
                status, events = self.maker.status(job_id), [event for _, event in self.maker.events(job_id)]
            except RumikError as exc:
                raise ui_error(str(exc)) from None
        fraction, label = _done_fraction(events, status["state"])
        return _status_markdown(status, events), _bar(fraction, label), _loss_rows(events), self._card(status)

    def cancel(self, job_id: str | None, admin_password: str = "", request=None) -> str:
        with user_errors("Cancelling the adaptation"):
            self.admin.require(admin_password, "Cancelling a voice", _address(request))
            if not job_id:
                raise ui_error("No adaptation is running on this page.")
            try:
                return f"**{self.maker.cancel(job_id)['state']}**"
            except RumikError as exc:
                raise ui_error(str(exc)) from None

    def _card(self, status: dict) -> str:
        """The new voice's card once the job is done."""
        if status["state"] != "done":
            return ""
        try:
            voice = describe(read_package(self.voices_dir / status["name"]))
        except (RumikError, OSError) as exc:
            log.warning("voice card of %s: %s", status["name"], exc)
            return f"**{status['name']}** is in the library."
        return voice_card(voice)


def voice_card(voice: dict) -> str:
    """Markdown of a library voice's figures (rumik_app.voices.library.describe's dict)."""
    figures = voice["evaluation"]
    lines = [f"### {voice['name']}", f"- data kept: {voice['data_hours'] * 60:.1f} min "
             f"({', '.join(voice['languages']) or 'languages from the transcripts'})"]
    if figures.get("heldout_loss_base") is not None:
        lines.append(f"- held-out loss: {figures['heldout_loss_base']:.3f} before, "
                     f"{figures['heldout_loss_adapted']:.3f} with the voice")
    for key, label in (("speaker_similarity", "speaker similarity"), ("cer", "CER")):
        value = figures.get(key)
        lines.append(f"- {label}: " + (f"{value:.3f}" if isinstance(value, (int, float)) else
                                       f"not measured ({figures.get(key + '_reason') or 'a random checkpoint'})"))
    lines.append(f"- consent checked by: {voice['consent']['checked_by']}")
    lines.append(f"- watermark: every clip in this voice carries it (policy `{DEFAULT_POLICY}`)")
    lines.append("\nChoose it in the Synthesise tab's Voice menu.")
    return "\n".join(lines)


def _address(request) -> str | None:
    client = getattr(request, "client", None)
    return getattr(client, "host", None)


def _done_fraction(events: list[dict], state: str) -> tuple[float, str]:
    """How far the job is (0-1, training counted by its steps) and the step's name."""
    if state == "done":
        return 1.0, "Done"
    started = [event for event in events if event.get("status") == "started"]
    if not started:
        return 0.0, "Waiting for its turn" if state == "queued" else state.capitalize()
    step = started[-1]["step"]
    index = STEPS.index(step) if step in STEPS else 0
    within = 0.5  # a step under way counts half; training by its steps
    running = [event for event in events if event.get("status") == "running"]
    if step == "train" and running:
        within = running[-1]["train_step"] / max(running[-1]["train_steps"], 1)
    return (index + within) / len(STEPS), STEP_NAMES.get(step, step)


def _status_markdown(status: dict, events: list[dict]) -> str:
    state = status["state"]
    lines = [f"**{status['name']}**: {state}" + (f" ({status['error']})" if status.get("error") else "")]
    running = [event for event in events if event.get("status") == "running"]
    if state == "running" and running:
        last = running[-1]
        lines.append(f"training step {last['train_step']} of {last['train_steps']}, loss {last['loss']:.3f}, "
                     f"about {last['seconds_left']:.0f} s left")
    data = next((event for event in events if event.get("step") == "data" and event.get("status") == "done"), None)
    if data:
        dropped = ", ".join(f"{reason} {count}" for reason, count in (data.get("dropped") or {}).items() if count)
        lines.append(f"clips kept: {data.get('kept_clips', '?')} ({data.get('kept_minutes', 0):.1f} min)"
                     + (f"; dropped: {dropped}" if dropped else ""))
    if state in FINAL_STATES and state != "done":
        lines.append("Nothing was added to the library; fix what the message says and start again.")
    return "  \n".join(lines)


def _bar(fraction: float, label: str) -> str:
    percent = round(100 * min(max(fraction, 0.0), 1.0))
    return (f'<div id="adaptation-progress" data-percent="{percent}"><progress max="100" value="{percent}" '
            f'style="width:100%"></progress> {percent}% {label}</div>')


def _loss_rows(events: list[dict]):
    import pandas as pd

    rows = [{"step": event["train_step"], "loss": event["loss"], "curve": "training"}
            for event in events if event.get("status") == "running"]
    rows += [{"step": event["train_step"], "loss": event["heldout_loss"], "curve": "held-out"}
             for event in events if event.get("status") == "running" and "heldout_loss" in event]
    return pd.DataFrame(rows, columns=["step", "loss", "curve"])


def build_voices_tab(handlers: VoiceTabHandlers, demo) -> None:
    """The tab's widgets and events (inside `demo`, a gr.Blocks, and a gr.Tab)."""
    import gradio as gr

    gr.Markdown("Make a voice of your own from a speaker's recordings (at least 10 minutes of clean speech, with "
                "the speaker's consent). It trains in the background: you can close this page and come back.")
    with gr.Row():
        with gr.Column():
            recordings = gr.File(label="Recordings (audio files, .txt transcripts with the same names, or a .zip)",
                                 file_count="multiple", file_types=UPLOAD_TYPES, elem_id="voice-recordings")
            name = gr.Textbox(label="Voice name", placeholder="e.g. Arjun (2-32 letters, digits, _ or -)",
                              max_length=32, elem_id="voice-name")
            statement = gr.Textbox(label="Consent statement (the speaker reads it aloud)", value=DEFAULT_STATEMENT,
                                   lines=2, max_length=1000, elem_id="voice-statement")
            consent = gr.Audio(label="Consent: the speaker reading the statement", sources=["microphone", "upload"],
                               type="filepath", elem_id="voice-consent")
            password = gr.Textbox(label="Admin password", type="password", visible=handlers.admin.enabled)
            with gr.Row():
                start = gr.Button("Make the voice", variant="primary", elem_id="voice-start")
                cancel = gr.Button("Cancel", elem_id="voice-cancel")
        with gr.Column():
            job = gr.Textbox(label="Job", interactive=False, elem_id="voice-job")
            status = gr.Markdown(IDLE, elem_id="voice-status")
            bar = gr.HTML(_bar(0.0, ""))
            loss = gr.LinePlot(_loss_rows([]), x="step", y="loss", color="curve", title="Loss", height=220)
            card = gr.Markdown(elem_id="voice-card")
    saved = gr.BrowserState(None, storage_key="rumik-voice-job")  # the job comes back with the page
    timer = gr.Timer(2.0)
    outputs = [status, bar, loss, card]
    start.click(handlers.start, [recordings, consent, name, statement, password], job, api_name="start_adaptation",
                concurrency_limit=1).then(_same, job, saved, api_visibility="private")
    timer.tick(handlers.progress, [job, password], outputs, api_name="adaptation_progress", show_progress="hidden",
               queue=False)
    cancel.click(handlers.cancel, [job, password], status, api_name="cancel_adaptation")
    demo.load(_same, saved, job, api_visibility="private")


def _same(value):
    return value
