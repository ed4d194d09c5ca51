"""training.sft with `distributed = "fsdp2"` (training.fsdp) and DDP: two CPU processes over gloo, fp32.

FSDP2 = DDP = one process on the SFT smoke's losses; DCP-sharded checkpoints that resume exactly
on the same world size and reshard from 2 processes to 1; the final weights in the published format.
Two plain torchrun launches make every two-process run: `--smoke` under FSDP2, which prepares the
smoke's data on the main process only, SIGKILLed at its step-4 checkpoint; then the session's
shared launch (tests.training.distributed.shared_plan) resumes it first, as a fresh process after a
crash would, then makes the whole DDP and FSDP2 runs, and resumes a copy of the DDP run's step-4
checkpoint.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch

from rumik_app import TTSEngine
from rumik_app.errors import ConfigError
from tests.training.distributed import Copy, kill_on_two_cpu_processes_when, set_args, shared_plan
from training.common import read_metrics
from training.config import load_config
from training.dpo.config import DPOConfig
from training.grpo.config import SMOKE_CONFIG as GRPO_SMOKE
from training.grpo.config import GRPOConfig
from training.sft.config import SFTConfig
from training.sft.smoke import PREPARING, SMOKE_CONFIG_FILE
from training.sft.trainer import SFTTrainer

DPO_SMOKE = Path(__file__).resolve().parents[3] / "training" / "configs" / "dpo_smoke.json"
STEPS = 10  # 5 English + 5 Indic-with-replay steps: crosses the stage boundary and two checkpoints
SETS = ["stages.0.steps=5", "stages.1.steps=5", 'loss.head="full"', "batch.global_batch=4", "batch.micro_batch=1",
        "save_every=4", "keep_last=5", "eval.every=0", "optim.warmup_steps=2", "mixed_precision=\"no\""]
KEYS = ("loss", "acoustic_loss", "stop_loss", "heldout_loss")  # to 1e-5 (rel); grad_norm to 1e-4


def _rows(out: Path) -> list[dict]:
    return [r for r in read_metrics(out) if "event" not in r]


def _config(smoke: Path, out: Path, *more: str) -> SFTConfig:
    cfg = load_config(SFTConfig, smoke, [*SETS, *more])
    cfg.out_dir = str(out)
    return cfg


def _two(smoke: Path, out: Path, *more: str) -> tuple[str, list[str]]:
    return "training.sft", ["--config", str(smoke), "--out", str(out), *set_args(*SETS, *more)]


def _close(a: list[dict], b: list[dict]) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for x, y in zip(a, b, strict=True):
        assert x["learning_rate"] == y["learning_rate"] and x["stage"] == y["stage"]
        for key in KEYS:
            if key in x or key in y:
                assert x[key] == pytest.approx(y[key], rel=1e-5), (x["step"], key, x[key], y[key])
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-4), x["step"]


@shared_plan
def two_process_plan(tmp, request) -> tuple[list, dict]:
    """An FSDP2 `--smoke` launch SIGKILLed once its step-4 checkpoint is on disk, and the same 10 steps
    on one process, here; the steps of the session's shared launch: the killed run resumed by the same
    config, the whole runs on two (DDP) and on two (FSDP2), and a DDP run resumed from a copy of the
    whole DDP run's step-4 checkpoint (module docstring)."""
    killed = tmp / "killed"
    step4 = killed / "checkpoints" / "step_00000004"
    kill_on_two_cpu_processes_when("training.sft", ["--smoke", "--out", str(killed), *set_args(*SETS),
                                                    *set_args("distributed=fsdp2")], step4, tmp / "killed.log")
    smoke = killed / SMOKE_CONFIG_FILE  # the smoke's data and config, made by the killed launch's main process
    finished = (killed / "checkpoints" / f"step_{STEPS:08d}").exists()
    SFTTrainer(_config(smoke, tmp / "one")).train()
    (tmp / "resumed1" / "checkpoints").mkdir(parents=True)  # the same checkpoint, for one process
    shutil.copytree(step4, tmp / "resumed1" / "checkpoints" / "step_00000004")
    ddp_step4 = tmp / "ddp" / "checkpoints" / "step_00000004"
    steps = [_two(smoke, killed, "distributed=fsdp2"), _two(smoke, tmp / "ddp"),
             _two(smoke, tmp / "fsdp2", "distributed=fsdp2"),
             Copy(ddp_step4, tmp / "ddp_resumed" / "checkpoints" / ddp_step4.name), _two(smoke, tmp / "ddp_resumed")]
    return steps, {"smoke": smoke, "finished_before_kill": finished}


@pytest.fixture(scope="module")
def runs(shared_launch) -> dict:
    """The folders and printed text of `two_process_plan`'s runs."""
    launched = shared_launch[__name__]
    tmp, info = launched.folder, launched.info
    resumed, ddp, fsdp, _, ddp_resumed = launched.printed
    assert "training.sft: 2 processes (DDP over CPU processes)" in ddp
    assert "training.sft: 2 processes (FSDP2 over CPU processes, sharded per decoder layer)" in fsdp
    assert "MiB of weights, grads and AdamW state per process" in fsdp
    assert fsdp.count(f"finished step {STEPS}/{STEPS}") == 1  # the main process prints
    return {"smoke": info["smoke"], "one": tmp / "one", "ddp": tmp / "ddp", "fsdp2": tmp / "fsdp2", "tmp": tmp,
            "killed": tmp / "killed", "killed_log": (tmp / "killed.log").read_text(errors="replace"),
            "finished_before_kill": info["finished_before_kill"], "resumed": resumed, "ddp_resumed": ddp_resumed}


@pytest.mark.slow
def test_smoke_under_torchrun_prepares_its_data_once(runs):
    """`torchrun --nproc-per-node 2 -m training.sft --smoke`: the main process prepares the data, the
    other waits for it, and both train it as one FSDP2 run to its step-4 checkpoint."""
    log = runs["killed_log"]
    assert log.count(PREPARING) == 1, log[-3000:]
    assert log.count("training.sft: 2 processes (FSDP2 over CPU processes") == 1, log[-3000:]
    assert (runs["killed"] / "checkpoints" / "step_00000004" / "dcp" / ".metadata").exists()


@pytest.mark.slow
def test_ddp_resumes_from_its_checkpoint_on_two_processes(runs):
    """Both DDP processes reach the checkpoints (the main one writes them), and a run resumed from a
    copy of step 4 repeats steps 5-10 bit for bit."""
    assert [p.name for p in sorted((runs["ddp"] / "checkpoints").glob("step_*"))] == [
        "step_00000004", "step_00000008", f"step_{STEPS:08d}"]
    assert "resumed from" in runs["ddp_resumed"]
    again, full = _rows(runs["tmp"] / "ddp_resumed"), _rows(runs["ddp"])
    assert [r["step"] for r in again] == list(range(5, STEPS + 1))
    for x, y in zip(again, full[4:], strict=True):
        for key in ("loss", "grad_norm", "learning_rate"):
            assert x[key] == y[key], (x["step"], key)


@pytest.mark.slow
def test_fsdp2_losses_match_ddp_and_one_process(runs):
    one, ddp, fsdp = (_rows(runs[k]) for k in ("one", "ddp", "fsdp2"))
    assert len(one) == STEPS and "heldout_loss" in one[-1]
    _close(one, ddp)
    _close(one, fsdp)
    # the final weights in the published format, gathered from the shards
    a = TTSEngine.from_pretrained(str(runs["one"]), device="cpu").model.state_dict()
    b = TTSEngine.from_pretrained(str(runs["fsdp2"]), device="cpu").model.state_dict()
    assert set(a) == set(b) and all(torch.allclose(a[k], b[k], atol=1e-2) for k in a)  # bf16 published weights
    ckpt = runs["fsdp2"] / "checkpoints" / "step_00000008"
    assert (ckpt / "dcp" / ".metadata").exists() and (ckpt / "model.safetensors").exists()
    state = torch.load(ckpt / "training_state.pt", weights_only=True)
    assert state["optimizer"] is None and "model" not in state and state["rng"]  # AdamW + weights: in dcp/


@pytest.mark.slow
def test_fsdp2_resumes_exactly_after_sigkill_and_reshards_to_one_process(runs):
    """A run SIGKILLed once its step-4 checkpoint is on disk continues on 2 processes exactly; the
    same checkpoint loads on one process (DCP resharding) and continues to the same losses."""
    full, killed = _rows(runs["fsdp2"]), runs["killed"]
    assert not runs["finished_before_kill"]
    assert "resumed from" in runs["resumed"]
    again = _rows(killed)[-(STEPS - 4):]  # the rows the resumed run appended
    assert [r["step"] for r in again] == list(range(5, STEPS + 1))
    for x, y in zip(again, full[4:], strict=True):
        for key in ("loss", "grad_norm", "learning_rate"):
            assert x[key] == y[key], (x["step"], key)  # same world size: bit for bit
    SFTTrainer(_config(runs["smoke"], runs["tmp"] / "resumed1", "distributed=fsdp2")).train()
    _close(_rows(runs["tmp"] / "resumed1"), full[4:])


def test_distributed_key_is_checked():
    cfg = SFTConfig(stages=[])
    assert cfg.distributed == "ddp"
    cfg.distributed = "zero3"
    with pytest.raises(ConfigError, match=r"distributed must be one of \('ddp', 'fsdp2'\)"):
        cfg.validate()
    assert json.loads(json.dumps(SFTConfig().__dict__, default=str))["distributed"] == "ddp"
    # GRPO and DPO take FSDP2 (tests/training/grpo/test_fsdp.py, tests/training/dpo/test_trainer.py, with vLLM
    # rollouts tests/vllm/test_grpo.py), but not with LoRA
    load_config(GRPOConfig, GRPO_SMOKE, ["distributed=fsdp2", 'rollout.backend="vllm"']).validate(2)
    load_config(DPOConfig, DPO_SMOKE, ["distributed=fsdp2"]).validate(2)
    for config_class, path in ((GRPOConfig, GRPO_SMOKE), (DPOConfig, DPO_SMOKE)):
        policy = load_config(config_class, path, ["distributed=fsdp2", "lora.enabled=true"])
        policy.validate(1)  # one process needs neither strategy
        with pytest.raises(ConfigError, match="LoRA"):
            policy.validate(2)
