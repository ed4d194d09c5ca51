"""Data preparation: a manifest of clips or long recordings -> clean utterances -> Mimi codes in shards
(docs/ARCHITECTURE.md §6; docs/training.md, "Preparing a corpus").

    python -m training.prepare --manifest clips.jsonl --model rumik-ai/rumik-oss-1-base --out data/my_voice
    python -m training.prepare --manifest clips.jsonl --model tiny --out /tmp/data --new-speakers Meera
    python -m training.prepare --manifest corpus.jsonl --model rumik-ai/rumik-oss-1-base --out data/indic \\
        --config training/configs/prepare_corpus.toml --engine ray [--address ray://head:10001]

Manifest: one JSON object per line with `audio` (a path; relative paths are relative to the
manifest's folder), `text`, `speaker`, `language` and optionally `description`, `tone`,
`accent`, `pace`. With an `asr` judge set, `text` may be left out: the judge transcribes the row.
Audio is anything soundfile (or, failing that, ffmpeg) reads.

Stages (`PrepareConfig` holds every threshold; 0 or "" turns a filter off):
  read      the manifest, streamed by shard (`shard_size` lines), each row checked (fields, prompt, voice)
  decode    bounded (from the header, then while decoding), mixed to mono, resampled to 24 kHz
  segment   a row up to max_seconds is one clip; a longer one (a recording, up to
            max_recording_seconds) is cut by VAD into 2-20 s utterances, each transcribed by the
            `asr` judge and keeping its source span
  filter    silent, clipped, low_snr, low_dnsmos, high_cer (against `asr`), each counted
  embed     a speaker embedding per clip (`speaker_encoder`); outliers listed in the report
  encode    the checkpoint's frozen Mimi, batched longest first
  write     shards/shard_k.npy (int16 [frames, Q]), .emb.npy, then .json (atomic)

Engines: `local` (one process, the default) and `ray` (Ray Data: a pool of cleaner actors and
one of Mimi actors; `training.prepare.engines`). Both write the same files.

Output (DATA_DIR): shards/, index.jsonl (every kept row, what training reads), report.json
(counts per stage and per drop reason, seconds per stage, skipped rows, speaker suspects) and
prepare.json (the codec fingerprint, token layout and settings the codes belong to). Shard k
holds manifest lines [k * shard_size, (k + 1) * shard_size); a killed run redoes only the
shards whose .json is missing, or whose lines or settings changed.
"""

from training.prepare.cli import main
from training.prepare.config import PrepareConfig
from training.prepare.pipeline import prepare
from training.prepare.shards import (
    CODE_DTYPE,
    INDEX_FILE,
    PREPARE_FILE,
    REPORT_FILE,
    SHARDS_DIR,
    PrepareError,
    codec_fingerprint,
)

__all__ = ["CODE_DTYPE", "INDEX_FILE", "PREPARE_FILE", "REPORT_FILE", "SHARDS_DIR", "PrepareConfig", "PrepareError",
           "codec_fingerprint", "main", "prepare"]
