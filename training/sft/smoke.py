"""SFT smoke run: the whole training pipeline on CPU in about a minute.

    python -m training.sft --smoke --out /tmp/rumik-smoke
    python -m training.sft --smoke --out /tmp/rumik-smoke --set stages.1.steps=200
    config = prepare_smoke_run(Path("/tmp/rumik-smoke"))    # steps 1-3; returns OUT/smoke_config.json

1. speech from espeak-ng (`evaluation.systems.espeak_synthesize`) in English, Hindi, Tamil,
   Bengali and Telugu: two known voices and a new one (Meera, added to the saved config),
   some rows with a tone/pace description, one `<laugh>`,
   one clip re-encoded as 44.1 kHz stereo FLAC to exercise mixing and resampling; wav files
   and manifests under OUT/smoke_data/;
2. a tiny random checkpoint in the published format (OUT/base);
3. `training.prepare` for an English folder, an Indic folder and a held-out folder;
4. `training.sft` with a two-stage curriculum (English, then Indic with English replay);
5. OUT (the final published checkpoint) is loaded with `TTSEngine.from_pretrained(OUT)` and
   synthesises one sentence in the new voice (`SFTTrainer.smoke_report`).

This module prepares steps 1-3 and writes the config; the trainer (training.sft.trainer)
runs it like any other config, so this module does not import the trainer.

The codes of a random Mimi carry no speech, so the model can only memorise its small
training set: the training loss falls well below its start, the held-out loss does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from evaluation.systems.espeak import espeak_synthesize
from rumik_app.audio import write_wav
from rumik_app.checkpoint.tiny import build_tiny_checkpoint
from rumik_app.files import atomic_write
from rumik_app.resample import resample
from training.prepare import PrepareError, prepare

# (language code, sentences)
CORPUS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("en", ("Good morning, how are you today?", "The train leaves at nine.", "That is so funny <laugh> really.",
            "I like hot tea with ginger.", "See you tomorrow.", "What a lovely day it is!")),
    ("hi", ("नमस्ते, आप कैसे हैं?", "आज मौसम बहुत अच्छा है।", "मुझे चाय पसंद है।")),
    ("ta", ("வணக்கம், எப்படி இருக்கிறீர்கள்?", "இன்று நல்ல நாள்.")),
    ("bn", ("নমস্কার, কেমন আছেন?", "আমি ভাত খাই।")),
    ("te", ("నమస్కారం, మీరు ఎలా ఉన్నారు?", "ఈ రోజు బాగుంది.")),
)
HELDOUT: tuple[tuple[str, str], ...] = (
    ("en", "The market opens early."),
    ("hi", "कल फिर मिलेंगे।"),
    ("ta", "நன்றி, மீண்டும் வருக."),
)
SMOKE_STEPS = (25, 35)  # English stage, then Indic + replay
FLAC_RATE = 44_100
NEW_VOICE = "Meera"  # a voice the base checkpoint lacks: prepare --new-speakers, training adds it
ESPEAK_VOICE = {NEW_VOICE: "Zoya"}  # who lends it her espeak variant
# A hidden-64 model gains nothing from intra-op threads; on a busy machine they cost 5x.
SMOKE_THREADS = 1
DEFAULT_OUT = Path("runs/sft-smoke")
SMOKE_CONFIG_FILE = "smoke_config.json"
PREPARING = "smoke: preparing the espeak-ng data, a tiny checkpoint and the config under"
SYNTH_TEXT = "नमस्ते, आप कैसे हैं?"  # spoken by NEW_VOICE from the trained OUT


def _clip_rows(entries, wav_dir: Path, prefix: str) -> list[dict]:
    rows = []
    for n, (lang, text, voice, tone, pace) in enumerate(entries):
        audio = espeak_synthesize(text, language=lang, voice=ESPEAK_VOICE.get(voice, voice), pace=pace, tone=tone)
        name = f"{prefix}_{n:02d}_{lang}.wav"
        write_wav(wav_dir / name, audio.samples, audio.sample_rate)
        row = {"audio": f"wav/{name}", "text": text, "speaker": voice, "language": lang}
        row.update({k: v for k, v in (("tone", tone), ("pace", pace)) if v})
        rows.append(row)
    return rows


def synthesize_corpus(data_dir: Path) -> dict[str, Path]:
    """Write wav files and the english/indic/heldout manifests; returns their paths."""
    wav_dir = data_dir / "wav"
    wav_dir.mkdir(parents=True, exist_ok=True)
    styles = [("Ira", None, None), ("Aisha", "happy", "fast"), ("Ira", "sad", "slow"), (NEW_VOICE, None, None)]
    entries = {"en": [], "indic": []}
    for lang, sentences in CORPUS:
        for n, text in enumerate(sentences):
            voice, tone, pace = styles[n % len(styles)]
            entries["en" if lang == "en" else "indic"].append((lang, text, voice, tone, pace))
    manifests = {}
    for group, items in entries.items():
        manifests[group] = _write_manifest(data_dir / f"{group}.jsonl", _clip_rows(items, wav_dir, group))
    held = [(lang, text, "Ira", None, None) for lang, text in HELDOUT]
    manifests["heldout"] = _write_manifest(data_dir / "heldout.jsonl", _clip_rows(held, wav_dir, "heldout"))
    first = json.loads(manifests["en"].read_text().splitlines()[0])  # one stereo 44.1 kHz FLAC clip
    mono, rate = sf.read(str(data_dir / first["audio"]), dtype="float32")
    at_flac_rate = resample(mono, rate, FLAC_RATE)  # the one resampler (soxr HQ)
    flac = data_dir / "wav" / "en_stereo.flac"
    sf.write(str(flac), np.stack([at_flac_rate, 0.5 * at_flac_rate], axis=1), FLAC_RATE)
    first["audio"] = "wav/en_stereo.flac"
    lines = manifests["en"].read_text().splitlines()
    atomic_write(manifests["en"], "\n".join([json.dumps(first, ensure_ascii=False)] + lines[1:]) + "\n")
    return manifests


def _write_manifest(path: Path, rows: list[dict]) -> Path:
    return atomic_write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def smoke_config(out: Path, base: Path, data: dict[str, Path]) -> dict:
    """The smoke run's SFTConfig as a dict: memorise a small set quickly on one CPU core."""
    english, indic = str(data["en"]), str(data["indic"])
    return {
        "model": str(base), "out_dir": str(out), "seed": 0,
        "stages": [
            {"name": "english", "steps": SMOKE_STEPS[0], "mixture": [{"data": english, "weight": 1.0}]},
            {"name": "indic+replay", "steps": SMOKE_STEPS[1],
             "mixture": [{"data": indic, "weight": 1.0}, {"data": english, "weight": 0.25}]},
        ],
        "optim": {"lr": 1e-2, "warmup_steps": 10, "decay_fraction": 0.2, "min_lr_ratio": 0.1,
                  "weight_decay": 0.0, "max_grad_norm": 1.0},
        "batch": {"global_batch": 8, "micro_batch": 8},
        "loss": {"stop_lambda": 1.0, "head": "audio"},
        "eval": {"every": 20, "data": [str(data["heldout"])], "max_items": 8},
        "save_every": 30, "keep_last": 2, "mixed_precision": "no", "torch_threads": SMOKE_THREADS,
    }


def prepare_smoke_data(out: Path) -> tuple[Path, dict[str, Path]]:
    """Steps 1-3: tiny checkpoint at OUT/base and prepared folders under OUT/smoke_data."""
    base = out / "base"
    if not (base / "codec" / "model.safetensors").exists():
        build_tiny_checkpoint(base)
    data_dir = out / "smoke_data"
    manifests = synthesize_corpus(data_dir)
    prepared = {}
    for group, manifest in manifests.items():
        report = prepare(manifest, str(base), data_dir / f"prepared_{group}", shard_size=4, batch_size=8,
                         device="cpu", new_speakers=(NEW_VOICE,))
        if report["skipped_count"]:
            raise PrepareError(f"smoke data: unexpected skipped rows {report['skipped']}")
        prepared[group] = data_dir / f"prepared_{group}"
    return base, prepared


def prepare_smoke_run(out: Path) -> Path:
    """Steps 1-3 and the config: returns OUT/smoke_config.json (an SFTConfig file). Under a launcher
    only the main process calls it (training.trainer.train_command), so one writer makes OUT's data."""
    torch.set_num_threads(SMOKE_THREADS)  # before the codec encodes: the data, too, is made on one thread
    print(f"{PREPARING} {out}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    base, prepared = prepare_smoke_data(out)
    return atomic_write(out / SMOKE_CONFIG_FILE, json.dumps(smoke_config(out, base, prepared), indent=2) + "\n")

