"""Real-weights evaluation of an adapted voice: held-out sentences synthesised in it, scored.

    figures = synthesis_figures(trainer, made)
    # {"speaker_similarity": 0.83, "speaker_similarity_base": 0.61, "cer": 0.04, "synthesized": 8, ...}

The first `eval.sentences` held-out clips' transcripts are synthesised in the new voice (seeds
0, 1, ...) with the adapter on and, for comparison, off (the base model reading the same
prompt, whose speaker it does not know). Speaker similarity (`evaluation.speaker`, encoder
`eval.speaker_encoder`) is the cosine of each synthesis with the mean embedding of the
held-out clips, averaged; CER (`evaluation.metrics.cer`) needs an ASR judge (`eval.asr`) and
is null without one. Only `training.voice.voice_trainer` calls this, and never on random
weights (their audio carries no words and no voice).
"""

from __future__ import annotations

import json

import numpy as np

from evaluation.audio_io import load_audio
from evaluation.speaker import cosine, load_speaker_encoder, mean_embedding
from rumik_app.audio import SAMPLE_RATE
from rumik_app.request import SynthesisRequest

MAX_CLIP_SECONDS = 30.0


def synthesis_figures(trainer, made) -> dict:
    """Speaker similarity (adapter on and off) and CER of held-out sentences in the new voice."""
    cfg, engine = trainer.cfg, trainer.engine
    rows = [json.loads(line) for line in made.heldout_manifest.read_text(encoding="utf-8").splitlines() if line]
    rows = rows[: cfg.eval.sentences]
    clips = [load_audio(made.heldout_manifest.parent / r["audio"], SAMPLE_RATE, max_seconds=MAX_CLIP_SECONDS)
             for r in rows]
    requests = [SynthesisRequest(r["text"], voice=trainer.name, language=r.get("language"), seed=k)
                for k, r in enumerate(rows)]
    adapted = [a.samples for a in engine.synthesize_many(requests)]
    with trainer.adapter_off():
        base = [a.samples for a in engine.synthesize_many(requests)]
    encoder = load_speaker_encoder(cfg.eval.speaker_encoder)
    reference = mean_embedding(encoder.embed(clips, SAMPLE_RATE))
    figures = {"synthesized": len(rows), "speaker_encoder": cfg.eval.speaker_encoder,
               "speaker_similarity": _mean_similarity(encoder, reference, adapted),
               "speaker_similarity_base": _mean_similarity(encoder, reference, base), "cer": None}
    if cfg.eval.asr:
        from evaluation.asr import load_asr
        from evaluation.metrics import cer

        judge = load_asr(cfg.eval.asr)
        heard = [judge.transcribe(wave, SAMPLE_RATE, r.get("language")) for wave, r in zip(adapted, rows, strict=True)]
        figures.update(cer=round(float(np.mean([cer(r["text"], h) for r, h in zip(rows, heard, strict=True)])), 4),
                       asr=cfg.eval.asr)
    return figures


def _mean_similarity(encoder, reference: np.ndarray, waves: list[np.ndarray]) -> float:
    return round(float(np.mean([cosine(reference, e) for e in encoder.embed(waves, SAMPLE_RATE)])), 4)
