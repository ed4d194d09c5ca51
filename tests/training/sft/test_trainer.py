"""training.sft end to end: the smoke run, checkpoint round trip, exact resume, accumulation, DDP."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rumik_app import SynthesisRequest, TTSEngine
from rumik_app.errors import ConfigError
from training.common import wsd_lambda
from training.config import load_config, save_config
from training.sft.__main__ import main
from training.sft.config import SFTConfig
from training.sft.trainer import SFTTrainer

CONFIGS = Path(__file__).resolve().parents[3] / "training" / "configs"


def train(cfg: SFTConfig, resume: bool = False) -> Path:
    return SFTTrainer(cfg).train(resume=resume)


def _losses(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("smoke") / "run"
    assert main(["--smoke", "--out", str(out)]) == out
    return out


def _short_config(smoke_dir: Path, out: Path, **changes) -> SFTConfig:
    """A few full-vocabulary steps on the smoke data, crossing the stage boundary."""
    cfg = load_config(SFTConfig, smoke_dir / "smoke_config.json",
                      ["stages.0.steps=3", "stages.1.steps=3", "loss.head=\"full\"", "batch.global_batch=4",
                       "batch.micro_batch=2", "save_every=2", "keep_last=5", "eval.every=0", "optim.warmup_steps=2"])
    cfg.out_dir = str(out)
    for key, value in changes.items():
        obj, *path = key.split("__")
        target = getattr(cfg, obj) if path else cfg
        setattr(target, path[0] if path else obj, value)
    return cfg


@pytest.fixture(scope="module")
def one_clip_micro_batches(smoke_dir, tmp_path_factory) -> Path:
    """The short run with micro-batches of one clip on one process: the big batch's accumulated
    twin (test_gradient_accumulation_equals_one_big_batch) and the two-process run's reference."""
    return train(_short_config(smoke_dir, tmp_path_factory.mktemp("micro1") / "run", batch__micro_batch=1,
                               save_every=100))


@pytest.mark.slow
def test_smoke_loss_falls_clearly(smoke_dir):
    rows = _losses(smoke_dir)
    first = np.mean([r["loss"] for r in rows[:10]])
    last = np.mean([r["loss"] for r in rows[-10:]])
    assert last < 0.8 * first, (first, last)
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    assert {r["stage"] for r in rows} == {"english", "indic+replay"}
    for key in ("acoustic_loss", "stop_loss", "learning_rate", "grad_norm", "tokens_per_s"):
        assert all(np.isfinite(r[key]) and r[key] >= 0 for r in rows), key
    # warmup; held-out at the end
    assert "heldout_loss" in rows[-1] and rows[0]["learning_rate"] < rows[20]["learning_rate"]
    summary = json.loads((smoke_dir / "smoke_summary.json").read_text())
    assert summary["ratio"] < 0.8 and summary["synth_seconds"] > 0
    assert summary["verdict"] == "PASS" and "needs < 0.8" in summary["criteria"]
    # the first step trained at the schedule's first value (warmup), none skipped
    cfg = load_config(SFTConfig, smoke_dir / "smoke_config.json")
    factor = wsd_lambda(*cfg.optim.phases(len(rows)), cfg.optim.min_lr_ratio)
    assert [r["learning_rate"] for r in rows] == pytest.approx([cfg.optim.lr * factor(i) for i in range(len(rows))],
                                                                rel=1e-12)


@pytest.mark.slow
def test_saved_checkpoint_round_trips_through_the_engine(smoke_dir):
    steps = sorted(p.name for p in (smoke_dir / "checkpoints").iterdir() if p.is_dir())
    assert steps == ["step_00000030", "step_00000060"]  # keep_last 2
    last = smoke_dir / "checkpoints" / steps[-1]
    master = torch.load(last / "training_state.pt", weights_only=False)["model"]
    published = TTSEngine.from_pretrained(str(smoke_dir), device="cpu")
    state = published.model.state_dict()
    assert set(state) - set(master) == {"lm_head.weight"}  # tied to model.embed_tokens.weight
    for key, value in master.items():
        assert torch.equal(state[key], value.to(torch.bfloat16).float()), key
    base = json.loads((smoke_dir / "base" / "config.json").read_text())
    saved = json.loads((smoke_dir / "config.json").read_text())
    assert saved["speakers"] == base["speakers"] + ["Meera"]  # the new voice in the smoke data
    assert {k: v for k, v in saved.items() if k != "speakers"} == {k: v for k, v in base.items() if k != "speakers"}
    assert json.loads((last / "train_config.json").read_text())["loss"]["head"] == "audio"
    req = SynthesisRequest("नमस्ते, आप कैसे हैं?", voice="Meera", seed=3, max_new_tokens=80)
    from_step = TTSEngine.from_pretrained(str(last), device="cpu")
    a, b = published.generate_batch([req]), from_step.generate_batch([req])
    assert torch.equal(a.token_ids, b.token_ids)
    audio = published.synthesize(req)
    assert audio.duration > 0 and np.isfinite(audio.samples).all()


@pytest.mark.slow
def test_resume_from_a_mid_run_checkpoint_reproduces_the_next_losses(smoke_dir, tmp_path):
    full = train(_short_config(smoke_dir, tmp_path / "full"))
    killed = tmp_path / "killed"
    (killed / "checkpoints").mkdir(parents=True)  # what a kill after step 5 leaves: checkpoints up to 4
    shutil.copytree(full / "checkpoints" / "step_00000004", killed / "checkpoints" / "step_00000004")
    train(_short_config(smoke_dir, killed))  # the same settings (another OUT): resumes by itself
    expected = {r["step"]: r for r in _losses(full)}
    resumed = _losses(killed)
    assert [r["step"] for r in resumed] == [5, 6]
    for row in resumed:
        for key in ("loss", "acoustic_loss", "stop_loss", "learning_rate", "grad_norm", "stage"):
            assert row[key] == expected[row["step"]][key], (row["step"], key)
    a = TTSEngine.from_pretrained(str(full), device="cpu").model.state_dict()
    b = TTSEngine.from_pretrained(str(killed), device="cpu").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    events = [json.loads(x) for x in (killed / "metrics.jsonl").read_text().splitlines()]
    assert {"step": 4, "event": "resumed from step_00000004"} in [{k: r[k] for k in ("step", "event")}
                                                                  for r in events if "event" in r]

    # Changed settings: refused with the keys named, unless --resume (train(resume=True)) says so.
    changed = _short_config(smoke_dir, killed, optim__lr=5e-3)
    changed.stages[1].steps = 4
    with pytest.raises(ConfigError, match=r"optim\.lr: 0\.01 -> 0\.005; stages\.1\.steps: 3 -> 4\)\. Pass --resume"):
        train(changed)
    train(changed, resume=True)
    assert [r["step"] for r in _losses(killed)] == [5, 6, 7]  # one more step, at the new learning rate


@pytest.mark.slow
def test_gradient_accumulation_equals_one_big_batch(smoke_dir, one_clip_micro_batches, tmp_path):
    one = train(_short_config(smoke_dir, tmp_path / "one", batch__micro_batch=4, save_every=100))
    for x, y in zip(_losses(one), _losses(one_clip_micro_batches), strict=True):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5)
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-4)


def test_example_configs_load_and_check():
    for path in (CONFIGS / "pretrain_curriculum.toml", CONFIGS / "finetune_voice.toml"):
        cfg = load_config(SFTConfig, path)
        cfg.validate(num_processes=1)
        assert cfg.stages and all(s.mixture for s in cfg.stages)
    cfg = load_config(SFTConfig, CONFIGS / "pretrain_curriculum.toml")
    assert cfg.batch.global_batch == 96 and cfg.optim.lr == 1e-4 and len(cfg.stages) == 3
    with pytest.raises(ConfigError, match="multiple of"):
        cfg.validate(num_processes=5)
    with pytest.raises(ConfigError, match="head"):
        load_config(SFTConfig, CONFIGS / "finetune_voice.toml", ["loss.head=\"softmax\""]).validate(num_processes=1)


def test_cli_needs_a_config(capsys):
    with pytest.raises(SystemExit):
        main([])
    assert "--config" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_accelerate_launch_two_processes_matches_one(smoke_dir, one_clip_micro_batches, tmp_path):
    """The same script under `accelerate launch` (DDP, gloo on CPU) trains the same global batches."""
    one = one_clip_micro_batches
    cfg = _short_config(smoke_dir, tmp_path / "two", batch__micro_batch=1, save_every=100)
    save_config(cfg, tmp_path / "two.json")
    # `accelerate launch --cpu --num_processes 2` silently runs ONE process on CPU; torchrun
    # with ACCELERATE_USE_CPU starts two gloo ranks that Accelerator picks up as MULTI_CPU.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true", "PYTHONPATH": str(CONFIGS.parents[1])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
           "-m", "training.sft", "--config", str(tmp_path / "two.json")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "training.sft: 2 processes (DDP over CPU processes)" in done.stdout
    two = tmp_path / "two"
    assert done.stdout.count("step 1/6 ") == 1 and done.stdout.count("finished step 6/6") == 1  # the main process only
    for x, y in zip(_losses(one), _losses(two), strict=True):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5) and x["learning_rate"] == y["learning_rate"]
    a = TTSEngine.from_pretrained(str(one), device="cpu").model.state_dict()
    b = TTSEngine.from_pretrained(str(two), device="cpu").model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-2) for k in a)  # bf16 published weights
