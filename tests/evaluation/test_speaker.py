"""Speaker similarity (evaluation.speaker): resemblyzer's own preprocess_wav + embed_utterance on
espeak-ng clips, same voice vs another voice, a tiny random WavLM x-vector loaded from a folder,
the command line and its errors.

Run: .venv/bin/python -m pytest tests/evaluation/test_speaker.py -q
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from evaluation import speaker
from evaluation.audio_io import LOCAL_MAX_SECONDS, load_audio, resample
from evaluation.speaker import (
    MODEL_RATE,
    ResemblyzerEncoder,
    SpeakerError,
    SpeakerModelUnavailable,
    cosine,
    load_speaker_encoder,
    mean_embedding,
)


@pytest.fixture(scope="module")
def encoder() -> ResemblyzerEncoder:
    return ResemblyzerEncoder()


@pytest.fixture(scope="module")
def resemblyzer_itself():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from resemblyzer import VoiceEncoder, preprocess_wav
    return VoiceEncoder("cpu", verbose=False), preprocess_wav


def test_embeddings_equal_resemblyzer(encoder, resemblyzer_itself, speech_clips):
    reference, preprocess_wav = resemblyzer_itself
    one = load_audio(speech_clips["f5_one"], MODEL_RATE, max_seconds=LOCAL_MAX_SECONDS)
    two = load_audio(speech_clips["m3_two"], MODEL_RATE, max_seconds=LOCAL_MAX_SECONDS)
    clips = [one, two, one[:8000], np.tile(one, 3)]  # 1 to 13 partials
    ours = encoder.embed(clips, MODEL_RATE)  # every partial of every clip in one LSTM batch
    for clip, emb in zip(clips, ours, strict=True):
        theirs = reference.embed_utterance(preprocess_wav(clip))
        assert np.abs(emb - theirs).max() < 1e-5
        assert np.linalg.norm(emb) == pytest.approx(1.0, abs=1e-6) and emb.min() >= 0
    # other rates: resampled to 16 kHz first
    at24 = load_audio(speech_clips["f5_two"], 24_000, max_seconds=LOCAL_MAX_SECONDS)
    theirs = reference.embed_utterance(preprocess_wav(resample(at24, 24_000, MODEL_RATE)))
    assert np.abs(encoder.embed([at24], 24_000)[0] - theirs).max() < 1e-5


def test_same_voice_is_closer_than_another_voice(encoder, speech_clips):
    ref, same, other = encoder.embed(
        [load_audio(speech_clips[n], max_seconds=LOCAL_MAX_SECONDS) for n in ("f5_one", "f5_two", "m3_two")], 24_000)
    assert cosine(ref, same) > cosine(ref, other) + 0.1
    both = mean_embedding(np.stack([ref, same]))
    assert np.linalg.norm(both) == pytest.approx(1.0) and cosine(both, ref) > cosine(same, ref)


def test_silent_and_broken_clips_are_refused(encoder):
    with pytest.raises(SpeakerError, match="silent"):
        encoder.embed([np.zeros(16000, np.float32)], MODEL_RATE)
    with pytest.raises(SpeakerError, match="finite mono"):
        encoder.embed([np.full(100, np.inf, np.float32)], MODEL_RATE)
    with pytest.raises(SpeakerError, match="Valid specs"):
        load_speaker_encoder("ecapa")


def test_weights_load_without_unpickling_objects(tmp_path):
    bad = tmp_path / "pretrained.pt"
    torch.save({"model_state": {"lstm.weight": object()}}, bad)  # needs the full unpickler
    with pytest.raises(SpeakerError, match="force-reinstall"):
        ResemblyzerEncoder(weights=bad)


def _tiny_wavlm(folder, safetensors: bool = True) -> None:
    """A random WavLMForXVector small enough to build in a test, saved like a hub model (or,
    safetensors=False, as a pickled pytorch_model.bin, which transformers 5 no longer writes)."""
    from transformers import Wav2Vec2FeatureExtractor, WavLMConfig, WavLMForXVector

    torch.manual_seed(0)
    cfg = WavLMConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4), num_conv_pos_embeddings=16,
                      num_conv_pos_embedding_groups=2, num_buckets=32, max_bucket_distance=64,
                      tdnn_dim=(16, 16), tdnn_kernel=(3, 1), tdnn_dilation=(1, 1), xvector_output_dim=24,
                      num_labels=2, layerdrop=0.0, apply_spec_augment=False)
    model = WavLMForXVector(cfg).eval()
    if safetensors:
        model.save_pretrained(folder)
    else:
        cfg.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=MODEL_RATE, padding_value=0.0, do_normalize=False,
                             return_attention_mask=True).save_pretrained(folder)


def test_wavlm_xvector_loads_from_a_folder_and_embeds_one_clip_at_a_time(tmp_path, speech_clips):
    from transformers import WavLMForXVector

    _tiny_wavlm(tmp_path / "wavlm")
    enc = load_speaker_encoder(f"hf:{tmp_path / 'wavlm'}")
    # 1.5 s: the tiny model keeps 800 frames a second, and WavLM's attention grows with their square
    clips = [load_audio(speech_clips[n], max_seconds=LOCAL_MAX_SECONDS)[: 36_000] for n in ("f5_one", "m3_two")]
    ours = enc.embed(clips, 24_000)
    assert ours.shape == (2, 24) and np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    model = WavLMForXVector.from_pretrained(tmp_path / "wavlm").eval()
    with torch.no_grad():  # the same clip alone through the model by hand
        direct = model(torch.from_numpy(resample(clips[1], 24_000, MODEL_RATE))[None]).embeddings[0]
    assert np.abs(ours[1] - torch.nn.functional.normalize(direct, dim=-1).numpy()).max() < 1e-5


def test_wavlm_refuses_pickled_weights_and_an_unreachable_hub(tmp_path):
    _tiny_wavlm(tmp_path / "bin", safetensors=False)  # pytorch_model.bin only
    with pytest.raises(SpeakerError, match="safetensors"):
        load_speaker_encoder(f"hf:{tmp_path / 'bin'}")
    with pytest.raises(SpeakerModelUnavailable, match="--speaker-encoder resemblyzer"):
        load_speaker_encoder("hf:nobody/not-cached-wavlm")  # the tests run with HF_HUB_OFFLINE=1
    with pytest.raises(SpeakerError, match="does not exist"):
        load_speaker_encoder(f"hf:{tmp_path / 'missing' / 'x'}")


def test_cli_writes_similarities(speech_clips, tmp_path, capsys):
    out = tmp_path / "sim.jsonl"
    clips = [str(speech_clips["f5_two"]), str(speech_clips["m3_two"])]
    assert speaker.main([str(speech_clips["f5_one"]), *clips, "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["clip"] for r in rows] == clips and rows[0]["similarity"] > rows[1]["similarity"]
    assert "similarity" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        speaker.main([str(tmp_path / "missing.wav"), clips[0], "--out", str(out)])
    assert exit_info.value.code == 2 and capsys.readouterr().err.startswith("error: ")
