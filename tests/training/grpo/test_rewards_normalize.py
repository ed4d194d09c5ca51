"""GRPO rewards compare against the spoken text the engine synthesised (rumik_app.text.normalize).

Run: .venv/bin/python -m pytest tests/training/test_rewards_normalize.py -q
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rumik_app import SynthesisRequest
from rumik_app.text.languages import speakable_length
from training.grpo.config import RolloutConfig
from training.grpo.prompts import rollout_request
from training.grpo.rewards import ContentReward, DurationReward


class FakeJudge:
    def __init__(self, transcripts):
        self.transcripts = list(transcripts)

    def transcribe(self, samples, sample_rate, language=None):
        return self.transcripts.pop(0)


def test_content_reward_scores_the_spoken_text():
    judge = FakeJudge(["इसकी कीमत पाँच सौ रुपए है", "इसकी कीमत 500 रुपए है", "इसकी कीमत पाँच सौ रुपए है"])
    reward = ContentReward(judge=judge)
    prompts = [SynthesisRequest("इसकी कीमत ₹500 है।", language="hi"),
               SynthesisRequest("इसकी कीमत ₹500 है।", language="hi"),  # ASR wrote digits: normalised too
               SynthesisRequest("इसकी कीमत ₹500 है।", language="hi", normalize=False)]
    out = reward(prompts, None, audio=[np.zeros(2400, np.float32)] * 3, sample_rate=24_000)
    assert out[0] == 1.0 and out[1] == 1.0
    assert out[2] < 1.0  # the model was asked to read "₹500" as typed; words do not match it


def test_plain_string_prompts_are_normalised_with_their_language():
    reward = ContentReward(judge=FakeJudge(["five kilometres"]))
    assert reward(["5 km"], None, audio=[np.zeros(2400, np.float32)], sample_rate=24_000) == [1.0]


def test_duration_reward_expects_the_spoken_length():
    req = SynthesisRequest("₹2,50,000", language="hi")
    reward = DurationReward()
    spoken = req.spoken_text()
    expected = reward.expected_seconds(spoken, "hi")
    assert expected > reward.expected_seconds("₹2,50,000", "hi")
    frames = round(expected * 12.5)
    rollouts = SimpleNamespace(num_frames=torch.tensor([frames]))
    assert reward([req], rollouts)[0] == pytest.approx(0.0, abs=0.05)
    assert speakable_length(spoken) > len("₹2,50,000")


def test_grpo_requests_normalise_by_default():
    req = rollout_request({"text": "₹500 दो", "language": "hi"}, seed=1, rollout=RolloutConfig())
    assert req.normalize and req.spoken_text() == "पाँच सौ रुपए दो"
