"""GRPO reward functions (training.grpo.rewards): content, duration, synthetic, user functions, and the
real path espeak-ng -> waveform -> pocketsphinx -> content reward."""

import math
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
import torch

from evaluation.metrics import gcer
from rumik_app import SynthesisRequest
from rumik_app.errors import ConfigError
from training.grpo.rewards import (
    Codebook0LowReward,
    ContentReward,
    DurationReward,
    RewardSpec,
    build_reward,
    compute_rewards,
    load_callable,
)


class FakeJudge:
    """Returns a fixed transcript per call; records the languages it was asked for."""

    def __init__(self, transcripts):
        self.transcripts = list(transcripts)
        self.languages = []

    def transcribe(self, samples, sample_rate, language=None):
        self.languages.append(language)
        return self.transcripts.pop(0)


def _rollouts(num_frames, codes=None):
    frames = torch.tensor(num_frames)
    if codes is None:
        codes = torch.zeros(len(num_frames), 8, max(num_frames) if num_frames else 0, dtype=torch.long)
    return SimpleNamespace(num_frames=frames, codes=codes)


def test_content_reward_uses_wer_cer_for_latin_and_gcer_for_indic():
    judge = FakeJudge(["hello world", "hello word", "completely different", "मैं घर जाता हूँ"])
    reward = ContentReward(judge=judge, wer_weight=0.5)
    prompts = [SynthesisRequest("Hello, world!"), SynthesisRequest("Hello, world!"),
               SynthesisRequest("Hello, world!"), SynthesisRequest("मैं घर जा रहा हूँ।", language="hi")]
    audio = [np.zeros(2400, np.float32)] * 4
    out = reward(prompts, None, audio=audio, sample_rate=24_000)
    assert out[0] == 1.0
    # "hello word": WER 1/2, CER 1/11 -> err = 0.5 * 0.5 + 0.5 / 11
    assert out[1] == pytest.approx(1 - (0.25 + 0.5 / 11))
    assert out[2] == 0.0  # err clipped at 1
    assert out[3] == pytest.approx(1 - min(1.0, gcer("मैं घर जा रहा हूँ।", "मैं घर जाता हूँ")))
    assert judge.languages == [None, None, None, "hi"]


def test_content_reward_abstains():
    from evaluation.asr_judge import ASRError

    class Refuses:
        def transcribe(self, samples, sample_rate, language=None):
            raise ASRError("cannot do this language")

    audio = [np.zeros(100, np.float32)]
    refused = ContentReward(judge=Refuses())([SynthesisRequest("hi there")], None, audio=audio, sample_rate=24_000)
    assert refused == [None]
    only_en = ContentReward(judge=FakeJudge(["x"]), languages=["en"])
    assert only_en(["नमस्ते"], None, audio=audio, sample_rate=24_000, language=["hi"]) == [None]
    tags_only = ContentReward(judge=FakeJudge(["x"]))
    assert tags_only([SynthesisRequest("<laugh>")], None, audio=audio, sample_rate=24_000) == [None]
    with pytest.raises(ValueError):
        ContentReward(judge=FakeJudge([]))(["a", "b"], None, audio=audio, sample_rate=24_000)


# The first sentence hand-counted in tests/evaluation/test_metrics.py: GCER 3/24 under "grapheme", 4/20 under
# "unicode", so the reward is 0.875 or 0.8.
CONJUNCT_REF = "प्रधानमंत्री ने राष्ट्र को संबोधित किया।"
CONJUNCT_HYP = "परधानमंत्री ने राष्ट्र को सम्बोधित किया"


@pytest.mark.parametrize("segmentation, expected", [("grapheme", 1 - 3 / 24), ("unicode", 1 - 4 / 20)])
def test_content_reward_follows_its_segmentation(segmentation, expected):
    audio = [np.zeros(100, np.float32)]
    spec = RewardSpec(name="content", kind="content",
                      kwargs={"judge": FakeJudge([CONJUNCT_HYP]), "segmentation": segmentation})
    spec.check()
    reward = build_reward(spec)
    assert reward.segmentation == segmentation
    out = reward([SynthesisRequest(CONJUNCT_REF, language="hi")], None, audio=audio, sample_rate=24_000)
    assert out == [pytest.approx(expected)]
    assert out[0] == pytest.approx(1 - gcer(CONJUNCT_REF, CONJUNCT_HYP, segmentation=segmentation))


def test_content_reward_default_segmentation_is_written_into_the_spec():
    spec = RewardSpec(name="content", kind="content", kwargs={"asr": "pocketsphinx"})
    assert spec.kwargs == {"segmentation": "grapheme", "asr": "pocketsphinx"}
    assert RewardSpec(name="d", kind="duration").kwargs == {}
    default = ContentReward(judge=FakeJudge([CONJUNCT_HYP]))
    assert default.segmentation == "grapheme"
    out = default([CONJUNCT_REF], None, audio=[np.zeros(100, np.float32)], sample_rate=24_000, language=["hi"])
    assert out == [pytest.approx(1 - 3 / 24)]


def test_unknown_segmentation_is_a_clear_error():
    with pytest.raises(ValueError, match="content reward: Unknown GCER segmentation 'akshara'; use 'grapheme'"):
        ContentReward(judge=FakeJudge([]), segmentation="akshara")
    spec = RewardSpec(name="gcer", kind="content", kwargs={"segmentation": "Unicode"})
    with pytest.raises(ValueError, match=r"reward 'gcer': kwargs.segmentation: .*use 'grapheme' .* or 'unicode'"):
        spec.check()
    with pytest.raises(ValueError, match="Unknown GCER segmentation 'Unicode'"):
        build_reward(spec)


def test_duration_reward_is_minus_abs_log_ratio():
    reward = DurationReward()
    text = "a" * 30  # English: 15 chars/s -> 2.0 s expected
    prompts = [SynthesisRequest(text, language="en")] * 4
    out = reward(prompts, _rollouts([25, 50, 12, 0]), frame_rate_hz=12.5)
    assert out[0] == pytest.approx(0.0)
    assert out[1] == pytest.approx(-math.log(2.0))
    assert out[2] == pytest.approx(-abs(math.log(0.96 / 2.0)))
    assert out[3] == pytest.approx(-abs(math.log(0.08 / 2.0)))  # floored at one frame, finite
    slow = reward([SynthesisRequest(text, language="en", pace="slow")], _rollouts([25]))[0]
    assert slow == pytest.approx(-abs(math.log(2.0 / 2.5)))  # slow pace: 0.8 x rate
    assert reward([SynthesisRequest("<sigh>")], _rollouts([25]))[0] is None


def test_duration_rates_from_config_per_language_and_voice():
    reward = DurationReward(rates={"Hindi": 10.0, "hi:Aisha": 5.0})
    text = "न" * 20
    assert reward.expected_seconds(text, "hi") == pytest.approx(2.0)
    assert reward.expected_seconds(text, "hi", voice="Aisha") == pytest.approx(4.0)
    assert reward.expected_seconds(text, "hi", voice="Ira", pace="fast") == pytest.approx(20 / 12.0)
    rows = [SynthesisRequest(text, voice="Aisha"), SynthesisRequest(text, voice="Ira")]
    out = reward(rows, _rollouts([50, 25]), language=["hi", "hi"], voice=[None, None])
    assert out == [pytest.approx(0.0), pytest.approx(0.0)]
    with pytest.raises(ValueError):
        DurationReward(rates={"xx": 10.0})
    with pytest.raises(ValueError):
        DurationReward(rates={"en": 0.0})


def test_codebook0_low_reward():
    codes = torch.full((3, 8, 4), 2000)
    codes[0, 0] = torch.tensor([0, 1023, 1024, 5])
    codes[1, 0, :2] = torch.tensor([10, 20])
    codes[1, 1] = 0  # other codebooks do not count
    out = Codebook0LowReward()([""] * 3, _rollouts([4, 3, 0], codes))
    assert out == [0.75, pytest.approx(2 / 3), None]


def user_reward(prompts, rollouts, *, scale=1.0, domain=None, **_):
    return [scale * len(p.text) if d != "skip" else None for p, d in zip(prompts, domain, strict=False)]


def test_user_function_reward_and_compute_rewards():
    fn = build_reward(RewardSpec(name="mine", function="tests.training.grpo.test_rewards:user_reward",
                                 kwargs={"scale": 0.5}))
    assert fn.name == "mine" and fn.kind == "function" and not fn.needs_audio
    dur = build_reward(RewardSpec(name="dur", kind="duration"))
    prompts = [SynthesisRequest("abcd", language="en"), SynthesisRequest("ab", language="en")]
    table = compute_rewards([fn, dur], prompts, _rollouts([3, 1]), {"domain": ["a", "skip"], "frame_rate_hz": 12.5})
    assert table.shape == (2, 2) and table[0, 0] == 2.0 and math.isnan(table[1, 0])
    assert not torch.isnan(table[:, 1]).any()
    bad = build_reward(RewardSpec(name="bad", function="tests.training.grpo.test_rewards:user_reward"))
    with pytest.raises(ValueError, match="returned"):
        compute_rewards([bad], prompts, None, {"domain": ["a"]})
    with pytest.raises(ValueError, match="unknown kind"):
        build_reward(RewardSpec(name="x", kind="nope"))
    with pytest.raises(ValueError, match="module:function"):
        load_callable("no_colon")


def test_non_finite_rewards_are_rejected():
    def inf_reward(prompts, rollouts, **_):
        return [math.inf] * len(prompts)

    inf_reward.name = "inf"
    with pytest.raises(ValueError, match="abstain"):
        compute_rewards([inf_reward], ["a"], None, {})


ESPEAK = shutil.which("espeak-ng")
MATCHING = "one two three four five six seven"
WRONG = "the committee approved a budget for new libraries"


def _espeak(text, path):
    subprocess.run([ESPEAK, "-v", "en-us", "-w", str(path), text], check=True, capture_output=True)
    samples, rate = sf.read(str(path), dtype="float32")
    return samples, rate


@pytest.mark.slow
@pytest.mark.skipif(ESPEAK is None, reason="espeak-ng is not installed (setup.sh installs it)")
def test_content_reward_end_to_end_espeak_pocketsphinx(tmp_path):
    """Real path: espeak-ng English waveform as a rollout's audio -> pocketsphinx judge -> reward."""
    samples, rate = _espeak(MATCHING, tmp_path / "speech.wav")
    reward = build_reward(RewardSpec(name="content", kind="content", kwargs={"asr": "pocketsphinx"}))
    prompts = [SynthesisRequest(MATCHING, language="en"), SynthesisRequest(WRONG, language="en"),
               SynthesisRequest("नमस्ते दोस्त", language="hi")]
    out = reward(prompts, None, audio=[samples] * 3, sample_rate=rate, language=["en", "en", "hi"])
    assert out[0] > 0.6, out
    assert out[1] < 0.3, out
    assert out[2] is None  # pocketsphinx is English-only: the row abstains


def _espeak_voice(text, voice, path):
    subprocess.run([ESPEAK, "-v", voice, "-w", str(path), text], check=True, capture_output=True)
    return sf.read(str(path), dtype="float32")


@pytest.mark.skipif(ESPEAK is None, reason="espeak-ng is not installed (setup.sh installs it)")
def test_speaker_reward_is_similarity_to_the_rows_voice_reference(tmp_path):
    ref, rate = _espeak_voice("The weather is lovely today, we walk by the river.", "en-us+f5", tmp_path / "ref.wav")
    same, _ = _espeak_voice("Please call me back when you reach home tonight.", "en-us+f5", tmp_path / "same.wav")
    other, _ = _espeak_voice("Please call me back when you reach home tonight.", "en-us+m3", tmp_path / "other.wav")
    reward = build_reward(RewardSpec(name="speaker", kind="speaker", kwargs={"reference": str(tmp_path / "ref.wav")}))
    assert reward.kind == "speaker" and reward.needs_audio
    prompts = [SynthesisRequest("a")] * 4
    out = reward(prompts, None, audio=[same, other, np.zeros(0, np.float32), np.zeros(2000, np.float32)],
                 sample_rate=rate)
    assert 0.0 <= out[1] < out[0] <= 1.0 and out[2:] == [None, None]  # empty and silent rollouts abstain
    from evaluation.audio_io import LOCAL_MAX_SECONDS, load_audio
    from evaluation.speaker import ResemblyzerEncoder, cosine

    enc = ResemblyzerEncoder()
    # the reference file read as every clip is (24 kHz), the audible rollouts embedded together
    ref_emb = enc.embed([load_audio(tmp_path / "ref.wav", max_seconds=LOCAL_MAX_SECONDS)], 24_000)[0]
    assert out[0] == pytest.approx(cosine(ref_emb, enc.embed([same, other], rate)[0]), abs=1e-6)


def test_speaker_reward_needs_a_reference_and_defaults_to_the_run_checkpoint():
    with pytest.raises(ConfigError, match="kwargs.reference"):
        build_reward(RewardSpec(name="speaker", kind="speaker"))
    fn = build_reward(RewardSpec(name="speaker", kind="speaker"), model="runs/sft/final")
    assert fn.reference_model == "runs/sft/final" and fn.reference is None
    own = build_reward(RewardSpec(name="speaker", kind="speaker", kwargs={"reference_model": "other"}), model="x")
    assert own.reference_model == "other"


@pytest.mark.skipif(ESPEAK is None, reason="espeak-ng is not installed (setup.sh installs it)")
def test_quality_reward_is_dnsmos_ovrl_on_0_to_1(tmp_path):
    clean, rate = _espeak_voice("Please call me back when you reach home tonight.", "en-us+f5", tmp_path / "c.wav")
    rng = np.random.default_rng(0)
    noisy = np.clip(clean + np.sqrt(np.mean(clean ** 2)) * rng.standard_normal(len(clean)), -1, 1).astype(np.float32)
    reward = build_reward(RewardSpec(name="quality", kind="quality", kwargs={"max_windows": 1, "threads": 1}))
    out = reward([SynthesisRequest("a")] * 3, None, audio=[clean, noisy, np.zeros(0, np.float32)], sample_rate=rate)
    assert 0.0 <= out[1] < out[0] <= 1.0 and out[2] is None
    from evaluation.quality import DNSMOS

    [mos] = DNSMOS(threads=1, max_windows=1).score([clean], rate)
    assert out[0] == pytest.approx((mos.ovrl - 1.0) / 4.0)


def test_reward_spec_checks_weight_and_routing():
    RewardSpec(name="q", kind="quality", routing="acoustic", weight=0.5).check()
    RewardSpec(name="q", kind="quality", routing=[0.0] + [1.0] * 7 + [0.5]).check()
    for bad, message in ((dict(weight=-1.0), "weight must be a number >= 0"),
                         (dict(routing="timbre"), "neither a target nor a list"),
                         (dict(routing=[True, 1.0]), "neither a target nor a list")):
        with pytest.raises(ConfigError, match=message):
            RewardSpec(name="q", kind="quality", **bad).check()
