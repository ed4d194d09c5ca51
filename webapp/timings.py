"""Word timestamps in the Synthesise tab: captions to download and a transcript whose
current word is highlighted while the clip plays.

Library module for `webapp.synth_tab` (no command line)::

    job = timing_job(chosen, req, stats, wav_path)      # after a streamed synthesis (kept in gr.State)
    for transcript, captions, note in timer.run(True, job):   # timer = WordTimings(registry, served)
        ...                                               # HTML of spans, [srt, vtt] paths, a Markdown note

The clip is streamed as usual; when the *Word timestamps* box is ticked, a second event aligns
its words afterwards (`rumik_app.align.timeline.time_words`, each planned chunk inside its exact
span, as `rumik --stream --timestamps` does), so the audio is never held back for it. The
event's input is the visitor's own `TimingJob` (a gr.State: server-side, never sent to the page).
Captions are written as SubRip and WebVTT (`rumik_app.align.captions`) into the app's served
folder (`ServedFolder.reserve`: pruned with the clips). The transcript is one
`<span data-start data-end>` per typed word, every word HTML-escaped (the text is a visitor's);
`HIGHLIGHT_JS` (passed to `launch(js=...)`) marks the span whose [start, end) holds the
player's current time, on `timeupdate` and on every animation frame while it plays, and a click
on a word seeks the player there. Systems without an engine (espeak-ng) and scripts (SSML,
dialogue) get a note instead of timings.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from webapp.forms import flag

if TYPE_CHECKING:
    from rumik_app.align import AlignerSet, Timings, WordTime
    from rumik_app.request import SynthesisRequest
    from webapp.storage import ServedFolder
    from webapp.systems import LoadedSystem, SystemRegistry

log = logging.getLogger(__name__)

AUDIO_ELEM_ID = "audio-out"  # the Synthesise tab's player
TRANSCRIPT_ELEM_ID = "word-transcript"
CURRENT_CLASS = "word-now"  # the span being spoken
ALIGN_CONCURRENCY = 1  # alignments at once (CPU work, minutes of audio at most: APP_LIMITS)
CAPTIONS_NAME = "captions"  # captions.srt and captions.vtt, in a folder of their own
TIMESTAMPS_INFO = ("After synthesis, align the words to the audio: captions (SRT, WebVTT) to download and the "
                   "transcript highlighted word by word as it plays. rumik-oss-1 and tiny only; plain text only.")
NO_ENGINE_NOTE = "{label} makes no word timestamps here: choose rumik-oss-1 (or tiny) for captions."
SCRIPT_NOTE = ("Word timestamps are made for plain text; SSML and dialogue scripts get none yet (the info line "
               "gives each part's span).")
ALIGNING_NOTE = "Aligning the words to the audio…"
GONE_NOTE = "The clip is no longer on the server: synthesise it again for word timestamps."
FAILED_NOTE = "Word timestamps could not be made for this clip (an internal error; the server log has the details)."
NO_SPANS_NOTE = ("Word timestamps could not be made for this clip: the stream did not report where its {chunks} "
                 "chunks lie in the audio (text of one sentence or a few is one chunk and gets them).")

# Installed once per page (`launch(js=...)`): media events do not bubble, so the listeners sit on
# the document in the capture phase and take the player inside #audio-out, whichever element
# Gradio renders (and re-renders) there.
HIGHLIGHT_JS = """
() => {
  if (window.__rumikWordTimes) return;
  window.__rumikWordTimes = true;
  let frame = 0;
  const player = (el) => el instanceof HTMLMediaElement && el.closest && el.closest("#%(audio)s") ? el : null;
  const mark = (audio) => {
    const box = document.getElementById("%(transcript)s");
    if (!box) return;
    const t = audio.currentTime;
    for (const span of box.querySelectorAll("span[data-start]")) {
      const on = t >= parseFloat(span.dataset.start) && t < parseFloat(span.dataset.end);
      if (on !== span.classList.contains("%(current)s")) {
        span.classList.toggle("%(current)s", on);
        if (on) span.setAttribute("aria-current", "true"); else span.removeAttribute("aria-current");
      }
    }
  };
  const follow = (audio) => {
    cancelAnimationFrame(frame);
    const step = () => { mark(audio); if (!audio.paused && !audio.ended) frame = requestAnimationFrame(step); };
    step();
  };
  for (const type of ["timeupdate", "seeked", "pause", "ended", "loadedmetadata"]) {
    document.addEventListener(type, (e) => { const a = player(e.target); if (a) mark(a); }, true);
  }
  document.addEventListener("play", (e) => { const a = player(e.target); if (a) follow(a); }, true);
  document.addEventListener("click", (e) => {
    const span = e.target.closest && e.target.closest("#%(transcript)s span[data-start]");
    const audio = span && document.querySelector("#%(audio)s audio");
    if (audio) { audio.currentTime = parseFloat(span.dataset.start); mark(audio); }
  });
}
""" % {"audio": AUDIO_ELEM_ID, "transcript": TRANSCRIPT_ELEM_ID, "current": CURRENT_CLASS}

TRANSCRIPT_CSS = f"""
#{TRANSCRIPT_ELEM_ID} .word-transcript {{ line-height: 1.9; font-size: 1.1em; padding-top: 1.2em; }}
#{TRANSCRIPT_ELEM_ID} span[data-start] {{ cursor: pointer; padding: 0.1em 0.15em; border-radius: 4px; }}
#{TRANSCRIPT_ELEM_ID} span.word-tag {{ color: #6b7280; font-style: italic; }}
#{TRANSCRIPT_ELEM_ID} span.{CURRENT_CLASS} {{ background: #fde68a; color: #111827; }}
"""


@dataclass(frozen=True)
class TimingJob:
    """What aligning the clip just made needs, kept in the visitor's session (gr.State).

    key: the system; wav: the served clip's path (written by the app, never sent by a page);
    request and chunk_texts: the request and its planned chunks' texts; chunk_seconds: where
    each chunk lies in the clip (start, end) s, () for one chunk: the whole clip; note: why this
    clip gets no timings (else "")."""

    key: str = ""
    wav: str = ""
    request: SynthesisRequest | None = None
    chunk_texts: tuple[str, ...] = ()
    chunk_seconds: tuple[tuple[float, float], ...] = ()
    note: str = ""


def timing_job(chosen: LoadedSystem, req: SynthesisRequest, stats: dict, wav: str | Path) -> TimingJob:
    """The job of a streamed clip: its chunks' exact spans from the stream's `chunk_samples`
    (`rumik_app.engine.stream`) and the crossfade; a note instead for a system without an engine."""
    if chosen.engine is None:
        return TimingJob(chosen.key, str(wav), note=NO_ENGINE_NOTE.format(label=chosen.label))
    from rumik_app.audio import SAMPLE_RATE
    from rumik_app.engine.stream import chunk_seconds

    texts = tuple(chunk.text for chunk in chosen.engine.plan(req))
    seconds = tuple(tuple(span) for span in chunk_seconds(stats.get("chunk_samples", ()), SAMPLE_RATE))
    if len(seconds) != len(texts):  # not reported (a stream run in another process: ZeroGPU's worker)
        if len(texts) == 1:
            seconds = ()  # one chunk: the whole clip, exactly
        else:
            log.warning("word timestamps: %d chunk spans for %d chunks", len(seconds), len(texts))
            return TimingJob(chosen.key, str(wav), note=NO_SPANS_NOTE.format(chunks=len(texts)))
    return TimingJob(chosen.key, str(wav), req, texts, seconds)


def script_job(chosen: LoadedSystem, wav: str | Path) -> TimingJob:
    return TimingJob(chosen.key, str(wav), note=SCRIPT_NOTE)


class WordTimings:
    """The *Word timestamps* step. aligners: the app's (`app.py --aligner`); None: each engine's own
    (`TTSEngine.aligners`: pocketsphinx for English unless the engine was given others)."""

    def __init__(self, registry: SystemRegistry, served: ServedFolder, aligners: AlignerSet | None = None):
        self.registry, self.served, self.aligners = registry, served, aligners

    def run(self, wanted: object, job: TimingJob | None) -> Iterator[tuple]:
        """Yields (transcript HTML, caption paths or None, note): "Aligning…" first, then the result.
        Nothing when the box is not ticked or no clip was made."""
        if not flag(wanted, default=False) or job is None:
            yield "", None, ""
            return
        if job.note:
            yield "", None, f"ℹ {html.escape(job.note, quote=False)}"
            return
        yield "", None, ALIGNING_NOTE
        try:
            timings = self.align(job)
            files = self.write_captions(timings.words) if timings.words else None
        except FileNotFoundError:
            yield "", None, f"ℹ {GONE_NOTE}"
            return
        except Exception:  # noqa: BLE001 - the audio stands; a visitor never sees a traceback
            log.exception("word timestamps failed")
            yield "", None, f"⚠ {FAILED_NOTE}"
            return
        yield transcript_html(timings.words), files, timings_note(timings)

    def align(self, job: TimingJob) -> Timings:
        """The clip's word timings (read back from its served WAV: the samples that were streamed)."""
        import soundfile as sf

        from rumik_app.align.timeline import time_words

        if not Path(job.wav).is_file():  # pruned meanwhile (soundfile would say only "System error")
            raise FileNotFoundError(job.wav)
        samples, rate = sf.read(job.wav, dtype="float32", always_2d=False)
        aligners = self.aligners if self.aligners is not None else self.registry.get(job.key).engine.aligners
        spans = job.chunk_seconds or ((0.0, len(samples) / rate),)
        return time_words(job.request, job.chunk_texts, samples, rate, spans, aligners)

    def write_captions(self, words: Sequence[WordTime]) -> list[str]:
        """captions.srt and captions.vtt in a fresh folder of the served place (pruned like the clips)."""
        from rumik_app.align.captions import write_captions

        srt = self.served.reserve(f"{CAPTIONS_NAME}.srt")
        return [str(write_captions(srt, words)), str(write_captions(srt.with_suffix(".vtt"), words))]


def transcript_html(words: Sequence[WordTime]) -> str:
    """One span per typed word, with its times in seconds; tags as a sound label ("[laugh]").
    Every word is escaped: it is the visitor's text."""
    spans = []
    for word in words:
        tag = word.kind == "tag"
        shown = f"[{word.word.strip('<>')}]" if tag else word.word
        spans.append(f'<span class="word{" word-tag" if tag else ""}" data-start="{word.start:.3f}" '
                     f'data-end="{max(word.end, word.start):.3f}">{html.escape(shown)}</span>')
    return f'<div class="word-transcript" dir="auto">{" ".join(spans)}</div>' if spans else ""


def timings_note(timings: Timings) -> str:
    """One Markdown line: how many words were timed and by what; what is missing and why (escaped)."""
    if not timings.words:
        line = "⚠ No word could be placed in the audio."
    else:
        line = f"{len(timings.words)} words timed by {timings.aligner or 'no aligner'}; click a word to play from it."
    if timings.missing:
        line += f"\n\n⚠ {html.escape(timings.missing, quote=False)}"
    return line
