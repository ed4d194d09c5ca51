"""Reading a visitor's uploaded clip, bounded before it is decoded (the Evaluate tab, its audio judges).

Library module (no command line; no gradio), below `webapp.scoring` (the clips to score) and
`webapp.audio_judges` (the reference voice), which both read uploads through `read_upload`:
an upload is refused (`UploadRefused`, a ValueError whose message names the problem and the
fix) when its extension is not one of AUDIO_SUFFIXES, it is over MAX_CLIP_MB, or its header
declares more than the caller's limit in seconds; decoding stops there whatever it declares.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rumik_app.audio import SAMPLE_RATE

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
MAX_CLIP_MB = 50  # also the app's upload limit (app.py MAX_UPLOAD)


class UploadRefused(ValueError):
    """An uploaded clip that is not read: wrong format, too large, too long or unreadable."""


def read_upload(path: str | Path, max_seconds: float, name: str | None = None) -> np.ndarray:
    """A visitor's uploaded clip as float32 mono [N] at SAMPLE_RATE (24 kHz), refused before
    decoding when its extension is not AUDIO_SUFFIXES, it is over MAX_CLIP_MB, or its header
    declares more than `max_seconds` (and decoding stops there whatever it declares).
    UploadRefused names the problem and the fix; `name` (default: the file's) replaces the
    path in it, so no message shows where uploads are kept."""
    from evaluation.audio_io import AudioLoadError, check_audio, load_audio

    path = Path(path)
    name = name or path.name
    if path.suffix.lower() not in AUDIO_SUFFIXES:
        raise UploadRefused(f"not a WAV, FLAC, OGG or MP3 file ({path.suffix or 'no extension'}); convert it first.")
    size_mb = path.stat().st_size / 1e6 if path.exists() else 0.0
    if size_mb > MAX_CLIP_MB:
        raise UploadRefused(f"too large ({size_mb:.1f} MB; the limit is {MAX_CLIP_MB} MB). Trim or compress it.")
    try:
        samples = load_audio(path, max_seconds=max_seconds)
        check_audio(samples, SAMPLE_RATE, where=name)
    except AudioLoadError as exc:
        raise UploadRefused(f"unreadable: {str(exc).replace(str(path), name)}") from None
    return samples
