"""Reading a visitor's uploaded clips, bounded before they are decoded (the Evaluate tab, its audio judges).

Library module (no command line; no gradio), below `webapp.scoring` (the clips to score),
`webapp.manifest` (its limits) and `webapp.audio_judges` (the reference voice):

    from webapp.uploads import check_budget, plan_uploads, read_upload
    uploads = plan_uploads(paths)   # headers read, repeats marked; nothing decoded
    check_budget(uploads)           # ValueError naming the largest clips if the run is too big
    clip = read_upload(path, MAX_CLIP_SECONDS, "a.wav")  # Audio: float32 mono at the file's rate, or UploadRefused

One clip: `read_upload` refuses it (`UploadRefused`, a ValueError whose message names the
problem and the fix) when its extension is not one of AUDIO_SUFFIXES, it is over MAX_CLIP_MB,
or its header declares more than the caller's limit in seconds; decoding stops there whatever
it declares.

One Evaluate run (at most MAX_CLIPS clips): before anything is decoded, `plan_uploads` reads
every clip's header (`evaluation.audio_io.read_header`) and marks repeats (the same upload
path, or the same bytes under another name: scored once), and `check_budget` refuses the run,
naming the largest clips, when the distinct clips declare more than MAX_TOTAL_SECONDS of audio
or MAX_TOTAL_DECODE_SAMPLES to decode (a header without a length counts as MAX_CLIP_SECONDS).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evaluation.audio_io import AudioHeader, AudioLoadError, file_sha256, read_header
from rumik_app.audio import SAMPLE_RATE, Audio

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
MAX_CLIP_MB = 50  # also the app's upload limit (app.py MAX_UPLOAD)
# The Evaluate tab's run: one clip, and all of them together.
MAX_CLIP_SECONDS = 300.0
MAX_CLIPS = 200
# All clips of one request together: one visitor must not hold the ASR judge for hours
# (Whisper-large on a CPU takes about real time).
MAX_TOTAL_SECONDS = 1200.0
# ... and the samples they decode to at their own rates (frames x channels): 20 minutes of 48 kHz
# stereo. A 192 kHz clip costs 4x a 48 kHz one to decode, whatever it lasts.
DECODE_RATE = 48_000
MAX_TOTAL_DECODE_SAMPLES = int(MAX_TOTAL_SECONDS * DECODE_RATE * 2)
MAX_NOTES = 5  # clips named in one note or refusal; the rest are counted


class UploadRefused(ValueError):
    """An uploaded clip that is not read: wrong format, too large, too long or unreadable."""


def read_upload(path: str | Path, max_seconds: float, name: str | None = None) -> Audio:
    """A visitor's uploaded clip as float32 mono [N] at the file's own rate (`Audio`; each judge
    converts it once, straight to its rate), refused before decoding when its extension is not
    AUDIO_SUFFIXES, it is over MAX_CLIP_MB, or its header declares more than `max_seconds` (and
    decoding stops there whatever it declares). UploadRefused names the problem and the fix;
    `name` (default: the file's) replaces the path in it, so no message shows where uploads are kept."""
    from evaluation.audio_io import check_audio, load_native  # here: tests count the clips it decodes

    path = Path(path)
    name = name or path.name
    if path.suffix.lower() not in AUDIO_SUFFIXES:
        raise UploadRefused(f"not a WAV, FLAC, OGG or MP3 file ({path.suffix or 'no extension'}); convert it first.")
    size_mb = path.stat().st_size / 1e6 if path.exists() else 0.0
    if size_mb > MAX_CLIP_MB:
        raise UploadRefused(f"too large ({size_mb:.1f} MB; the limit is {MAX_CLIP_MB} MB). Trim or compress it.")
    try:
        clip = load_native(path, max_seconds=max_seconds)
        check_audio(clip.samples, clip.sample_rate, where=name)
    except AudioLoadError as exc:
        raise UploadRefused(f"unreadable: {str(exc).replace(str(path), name)}") from None
    return clip


@dataclass
class Upload:
    """One uploaded clip before decoding: what its header declares and whether it repeats one."""

    path: Path
    name: str
    header: AudioHeader | None = None  # None: soundfile cannot read it (ffmpeg may)
    counted: bool = True  # False: read_upload refuses it unread (format, size, header), so it costs nothing
    same_as: str | None = None  # an earlier upload of the same file or bytes: scored once, there

    def cost(self) -> tuple[float, float]:
        """(seconds, samples to decode: frames x channels at its own rate) by the header; a clip
        whose header does not say its length counts as MAX_CLIP_SECONDS, where decoding stops."""
        h = self.header
        seconds = h.seconds if h is not None and h.seconds is not None else MAX_CLIP_SECONDS
        rate, channels = (h.sample_rate, h.channels) if h is not None else (SAMPLE_RATE, 1)
        return seconds, seconds * rate * channels

    def describe(self) -> str:
        seconds, _ = self.cost()
        h = self.header
        known = h is not None and h.frames is not None
        rate = f" at {h.sample_rate / 1000:g} kHz, {h.channels} channel(s)" if h is not None else ""
        return f"`{self.name}` {seconds:,.0f} s{rate}" + ("" if known else " (no length in its header: counted "
                                                                         "as the most a clip may hold)")


def plan_uploads(paths: Sequence[Path]) -> list[Upload]:
    """Every upload with its header read (nothing decoded) and repeats marked: the same path
    twice, or the same bytes under two names (hashed only where sizes are equal)."""
    uploads = [_header(Upload(p, p.name)) for p in paths]
    first: dict[object, str] = {}
    sizes = Counter(u.path.stat().st_size for u in uploads if u.counted)
    for u in (u for u in uploads if u.counted):
        keys = [("path", str(u.path.resolve()))]
        if sizes[u.path.stat().st_size] > 1:
            keys.append(("bytes", file_sha256(u.path)))
        u.same_as = next((first[k] for k in keys if k in first), None)
        for k in keys:
            first.setdefault(k, u.name)
    return uploads


def _header(u: Upload) -> Upload:
    """`u` with its header, or not counted if read_upload would refuse it without decoding."""
    path = u.path
    if path.suffix.lower() not in AUDIO_SUFFIXES or not path.is_file() or path.stat().st_size > MAX_CLIP_MB * 1e6:
        u.counted = False
        return u
    try:
        u.header = read_header(path, MAX_CLIP_SECONDS)
    except AudioLoadError:
        u.counted = False
    return u


def check_budget(uploads: Sequence[Upload]) -> None:
    """ValueError before anything is decoded when the distinct clips' headers declare more than
    one run takes: MAX_TOTAL_SECONDS of audio, or MAX_TOTAL_DECODE_SAMPLES to decode."""
    todo = [u for u in uploads if u.counted and u.same_as is None]
    seconds = sum(u.cost()[0] for u in todo)
    samples = sum(u.cost()[1] for u in todo)
    if seconds > MAX_TOTAL_SECONDS:
        raise ValueError(
            f"These clips hold {seconds / 60:,.1f} min of audio by their headers; one run takes at most "
            f"{MAX_TOTAL_SECONDS / 60:.0f} min. Longest: {_largest(todo, 0)}. Score them in several runs of at most "
            f"{MAX_TOTAL_SECONDS / 60:.0f} min.")
    if samples > MAX_TOTAL_DECODE_SAMPLES:
        raise ValueError(
            f"These clips hold {samples / 1e6:,.0f} million samples to decode by their headers (length x "
            f"rate x channels); one run decodes at most {MAX_TOTAL_DECODE_SAMPLES / 1e6:,.0f} million "
            f"({MAX_TOTAL_SECONDS / 60:.0f} min of {DECODE_RATE / 1000:g} kHz stereo). Largest: {_largest(todo, 1)}. "
            f"Resample them to {DECODE_RATE / 1000:g} kHz or less, or score them in several runs.")


def _largest(uploads: Sequence[Upload], by: int) -> str:
    """The MAX_NOTES largest uploads by cost `by` (0 seconds, 1 samples), described."""
    ranked = sorted(uploads, key=lambda u: -u.cost()[by])
    more = len(ranked) - MAX_NOTES
    return "; ".join(u.describe() for u in ranked[:MAX_NOTES]) + (f"; and {more} more" if more > 0 else "")
