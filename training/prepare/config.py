"""The data-preparation pipeline's settings: one dataclass, each stage's thresholds (docs/training.md).

    cfg = load_config(PrepareConfig, "training/configs/prepare_corpus.toml", ["min_dnsmos=3.0"])
    cfg.validate()                      # ConfigError naming the key and the fix
    cfg.digest()                        # what a finished shard was made with (resume redoes others)

A filter whose threshold is 0 (or whose judge is "") is off. The defaults run no judge and drop
only silent or clipped clips, so ready-made clips go through cheaply;
`training/configs/prepare_corpus.toml` turns the corpus filters on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from rumik_app.errors import ConfigError
from training.audio.vad import VAD_BACKENDS, CutSettings

# Settings that change how a run is spread or what its report says, never a shard: left out of the digest.
NOT_IN_SHARDS = ("batch_size", "speaker_outlier_cosine")


@dataclass
class PrepareConfig(CutSettings):
    """Stages and thresholds of `training.prepare` (the module docstring of training.prepare); the
    VAD and cut settings are CutSettings' (training.audio.vad), shared with voice adaptation.

    read/decode: a row is one clip of min_seconds..max_seconds; a longer one (up to
    max_recording_seconds, refused from the header before decoding) is a recording to segment.
    segment: VAD (`vad`, `vad_threshold`, `energy_range_db`) cuts a recording into utterances of
    clip_min_seconds..clip_max_seconds, pauses up to max_pause_seconds kept inside one, speech runs
    under min_speech_seconds ignored, pad_seconds of context around each; the `asr` judge gives
    each utterance its text (a recording's own transcript is then checked against them).
    filters: silent (active level below min_level_db dBFS), clipped (more than max_clipped_fraction
    of samples at or above clip_level), low_snr (below min_snr_db), low_dnsmos (DNSMOS OVRL below
    min_dnsmos), high_cer (CER of the row's text against the `asr` judge above max_cer).
    embed: `speaker_encoder` ("resemblyzer", "hf:MODEL") writes one embedding per kept clip; a
    clip whose cosine to its speaker's mean is below speaker_outlier_cosine is listed as a suspect.
    encode: Mimi in batches of batch_size clips, longest first; shard_size manifest lines per shard.
    """

    min_seconds: float = 0.2
    max_seconds: float = 30.0
    max_recording_seconds: float = 1800.0
    min_level_db: float = -50.0
    clip_level: float = 0.99
    max_clipped_fraction: float = 0.001
    min_snr_db: float = 0.0
    min_dnsmos: float = 0.0
    asr: str = ""
    max_cer: float = 0.0
    speaker_encoder: str = ""
    speaker_outlier_cosine: float = 0.6
    batch_size: int = 16
    shard_size: int = 256

    def validate(self) -> PrepareConfig:
        """Raise ConfigError for a setting that cannot work; returns self."""
        if not 0 < self.min_seconds < self.max_seconds <= self.max_recording_seconds:
            raise ConfigError("Need 0 < min_seconds < max_seconds <= max_recording_seconds "
                              f"(got {self.min_seconds}, {self.max_seconds}, {self.max_recording_seconds}).")
        if not 0.5 <= self.clip_min_seconds < self.clip_max_seconds <= self.max_seconds:
            raise ConfigError("Need 0.5 <= clip_min_seconds < clip_max_seconds <= max_seconds "
                              f"(got {self.clip_min_seconds}, {self.clip_max_seconds}, {self.max_seconds}).")
        if self.vad not in VAD_BACKENDS:
            raise ConfigError(f"vad must be one of {VAD_BACKENDS}, got {self.vad!r}.")
        if not (0 < self.vad_threshold < 1 and 0 < self.clip_level <= 1 and 0 <= self.max_clipped_fraction < 1):
            raise ConfigError("vad_threshold must be in (0, 1), clip_level in (0, 1] and max_clipped_fraction in "
                              "[0, 1).")
        if self.min_dnsmos < 0 or self.min_dnsmos > 5 or self.max_cer < 0 or self.min_snr_db < 0:
            raise ConfigError("min_dnsmos is DNSMOS OVRL (1-5, 0 = off); max_cer and min_snr_db are >= 0 (0 = off).")
        if self.max_cer > 0 and not self.asr:
            raise ConfigError("max_cer checks transcripts against an ASR judge: set asr (e.g. asr=\"whisper:small\") "
                              "or max_cer=0.")
        if self.batch_size < 1 or self.shard_size < 1:
            raise ConfigError("batch_size and shard_size must be at least 1.")
        return self

    def digest(self, speakers: tuple[str, ...] = ()) -> str:
        """sha1 of what decides a shard's content: these settings (numbers as floats, so 15 and 15.0
        agree) and the voices a row may name; a finished shard made otherwise is redone."""
        settings = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) and isinstance(
            getattr(PrepareConfig, k), float) else v for k, v in asdict(self).items() if k not in NOT_IN_SHARDS}
        settings["speakers"] = sorted(speakers)
        return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()
