"""training.grpo with `distributed = "fsdp2"`: two CPU processes over gloo, fp32, 10 steps.

The sharded policy trains while each process's engine samples from a full replica gathered after
every optimiser step (training.grpo.rollout): the run gives the one-process run's rewards, losses and
gradient norms, the replica's log-probs match the trainer's, and a DCP checkpoint resumes exactly.
The two-process run and the resume from its checkpoint share one launch (tests.training.distributed).
"""

import pytest
import torch

from rumik_app import TTSEngine
from tests.training.distributed import Copy, set_args, shared_plan
from training.common import read_metrics
from training.grpo.__main__ import main

pytestmark = pytest.mark.slow

STEPS = 10


def _rows(out) -> list[dict]:
    return [row for row in read_metrics(out) if "event" not in row]


@shared_plan
def two_process_plan(tmp_path, request):
    """One process here; in the session's shared launch, FSDP2 on two, then a resume on two from the
    step-5 DCP checkpoint (a copy in a fresh OUT): steps 6-10 again."""
    sets = set_args(f"model={request.getfixturevalue('tiny_checkpoint')}", f"steps={STEPS}",
                    "rollout.max_new_tokens=16", "save_every=5")
    main(["--smoke", "--out", str(tmp_path / "one"), *sets])
    sets += set_args("distributed=fsdp2")
    step5 = tmp_path / "fsdp2" / "checkpoints" / "step_00000005"
    resumed = tmp_path / "resumed" / "checkpoints"
    resumed.mkdir(parents=True)
    return [("training.grpo", ["--smoke", "--out", str(tmp_path / "fsdp2"), *sets]),
            Copy(step5, resumed / "step_00000005"),
            ("training.grpo", ["--smoke", "--out", str(tmp_path / "resumed"), *sets])], {}


def test_fsdp2_matches_one_process_and_resumes_exactly(shared_launch):
    launched = shared_launch[__name__]
    tmp_path, (printed, _, _) = launched.folder, launched.printed
    resumed = tmp_path / "resumed" / "checkpoints"
    assert "training.grpo: 2 processes (FSDP2 over CPU processes, sharded per decoder layer)" in printed
    one, two = _rows(tmp_path / "one"), _rows(tmp_path / "fsdp2")
    assert len(one) == len(two) == STEPS
    for x, y in zip(one, two, strict=True):
        assert x["reward"] == y["reward"] and x["num_actions"] == y["num_actions"], x["step"]  # the same rollouts
        assert y["grad_norm"] == pytest.approx(x["grad_norm"], rel=1e-4), x["step"]
        assert y["kl"] == pytest.approx(x["kl"], rel=1e-4, abs=1e-9), x["step"]
        assert y["loss"] == pytest.approx(x["loss"], abs=1e-7), x["step"]  # +-A terms cancelling to ~1e-9
        # the replica samples what the sharded policy scores: one gather per step, logged as the sync
        assert y["sampling/sampling_logp_difference/max"] < 1e-3 and y["sync_megabytes"] > 0
    a = TTSEngine.from_pretrained(str(tmp_path / "one"), device="cpu").model.state_dict()
    b = TTSEngine.from_pretrained(str(tmp_path / "fsdp2"), device="cpu").model.state_dict()
    assert set(a) == set(b) and all(torch.allclose(a[k], b[k], atol=1e-2) for k in a)  # bf16 published weights
    # the resumed run: steps 6-10 again, bit for bit
    assert (resumed / "step_00000005" / "dcp" / ".metadata").exists()
    again = _rows(tmp_path / "resumed")
    assert [r["step"] for r in again] == list(range(6, STEPS + 1))
    for x, y in zip(again, two[5:], strict=True):
        for key in ("reward", "loss", "grad_norm", "kl"):
            assert x[key] == y[key], (x["step"], key)
