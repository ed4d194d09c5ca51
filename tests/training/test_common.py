"""training.config and training.common: configs, schedule, optimiser, metrics log, training checkpoints."""

import json
import os
import random
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from rumik_app import SynthesisRequest, TTSEngine
from rumik_app.errors import CheckpointError, ConfigError
from training.common import (
    CUBLAS_WORKSPACE,
    MetricsLogger,
    check_world,
    cpu_processes,
    latest_checkpoint,
    launched_processes,
    load_training_state,
    run_on_main_process,
    save_training_checkpoint,
    set_seed,
    wsd_lambda,
)
from training.config import load_config, save_config
from training.trainer import SMOKE_FAILED, SMOKE_SUMMARY, clock, smoke_outcome


@dataclass
class Optim:
    lr: float = 1e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])


@dataclass
class Part:
    name: str
    steps: int = 10


@dataclass
class Cfg:
    seed: int = 0
    out_dir: str | None = None
    keep_last: int = 2
    optim: Optim = field(default_factory=Optim)
    parts: list[Part] = field(default_factory=lambda: [Part("a"), Part("b", 5)])


def test_load_config_toml_json_and_overrides(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('seed = 3\n[optim]\nlr = 2\n[[parts]]\nname = "x"\nsteps = 7\n')
    cfg = load_config(Cfg, toml, ["optim.lr=3e-4", "parts.0.steps=9", "out_dir=runs/a"])
    assert cfg.seed == 3 and cfg.optim.lr == 3e-4 and isinstance(cfg.optim.lr, float)
    assert cfg.parts == [Part("x", 9)] and cfg.out_dir == "runs/a"
    save_config(cfg, tmp_path / "c.json")
    assert load_config(Cfg, tmp_path / "c.json") == cfg
    assert load_config(Cfg, None, ["parts.1.name=z"]).parts[1] == Part("z", 5)


@pytest.mark.parametrize("content, overrides, words", [
    ('{"optim": {"lrr": 1}}', [], ["'lrr'", "[optim]", "lr"]),
    ('{"seed": "x"}', [], ["'seed'", "integer"]),
    ("{}", ["parts.5.steps=1"], ["index"]),
    ("{}", ["seed"], ["KEY=VALUE"]),
    ('{"parts": [{"steps": 1}]}', [], ["name"]),
])
def test_config_errors_name_the_key(tmp_path, content, overrides, words):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_config(Cfg, path, overrides)
    for word in words:
        assert word in str(err.value)


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Cfg, tmp_path / "nope.toml")


def test_wsd_schedule_values_at_known_steps():
    f = wsd_lambda(warmup_steps=4, stable_steps=3, decay_steps=5, min_ratio=0.1)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert [f(s) for s in (4, 5, 6)] == [1.0, 1.0, 1.0]
    assert [round(f(s), 6) for s in range(7, 12)] == [0.82, 0.64, 0.46, 0.28, 0.1]
    assert f(12) == f(10_000) == 0.1
    g = wsd_lambda(0, 0, 2)
    assert [g(0), g(1), g(2)] == [0.5, 0.0, 0.0]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, f)
    lrs = []
    for _ in range(8):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.0, 2.0, 2.0, 1.64])


def test_metrics_logger_appends_one_json_line_per_step(tmp_path, capsys):
    log = MetricsLogger(tmp_path)
    log.log(1, {"loss": torch.tensor(2.5), "lr": 1e-4})
    log.log(2, {"loss": 2.0, "lr": 1e-4})
    log.close()
    MetricsLogger(tmp_path, is_main=False).log(3, {"loss": 1.0})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["loss"] == 2.5
    assert "step      1 | loss 2.5" in capsys.readouterr().out


def test_training_checkpoint_round_trip(tiny_checkpoint, tmp_path):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    model = engine.model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, wsd_lambda(2, 2, 2))
    ids = torch.tensor([engine.prompt_ids(SynthesisRequest("checkpoint"))])
    cfg = Cfg(keep_last=2)
    saved = []
    for step in range(1, 4):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        set_seed(100 + step)
        saved.append(save_training_checkpoint(tmp_path, step, model, engine.config, engine.checkpoint_dir,
                                               opt, sched, cfg, extra_state={"data": {"a": step}}))
    expected_next = torch.rand(3)
    ckpts = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir())
    assert ckpts == ["step_00000002", "step_00000003"]  # keep_last from the config
    assert latest_checkpoint(tmp_path) == saved[-1]
    assert json.loads((saved[-1] / "train_config.json").read_text())["keep_last"] == 2

    reloaded = TTSEngine.from_pretrained(str(saved[-1]), device="cpu")  # published format
    for key, value in reloaded.model.state_dict().items():
        torch.testing.assert_close(value, model.state_dict()[key].to(torch.bfloat16).float())

    fresh = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu").model
    opt2 = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, wsd_lambda(2, 2, 2))
    torch.manual_seed(0)
    extra = load_training_state(saved[-1], opt2, sched2, model=fresh)
    assert extra == {"data": {"a": 3}, "step": 3}
    assert torch.equal(torch.rand(3), expected_next)  # RNG restored
    assert sched2.last_epoch == 3 and opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    for key, value in model.state_dict().items():  # exact full-precision weights
        assert torch.equal(fresh.state_dict()[key], value), key
    assert opt2.state_dict()["state"][0]["exp_avg"].equal(opt.state_dict()["state"][0]["exp_avg"])


def test_latest_checkpoint_none_and_stale_pointer(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    root = tmp_path / "checkpoints"
    (root / "step_00000004").mkdir(parents=True)
    (root / "step_00000004" / "training_state.pt").write_bytes(b"x")
    (root / "latest").write_text("step_00000009\n")  # points at a folder that never completed
    assert latest_checkpoint(tmp_path) == root / "step_00000004"
    with pytest.raises(CheckpointError, match="not a training checkpoint"):
        load_training_state(tmp_path, None, None)


@pytest.fixture
def restore_determinism():
    """set_seed changes process-wide torch flags: put them back after the test."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1], saved[2]


def test_set_seed_seeds_every_rng_and_sets_the_deterministic_mode(monkeypatch, restore_determinism):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    set_seed(5)
    first = (random.random(), float(np.random.rand()), torch.rand(2))
    assert not torch.are_deterministic_algorithms_enabled() and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    set_seed(5, deterministic=True)
    again = (random.random(), float(np.random.rand()), torch.rand(2))
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])
    assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
    assert not torch.backends.cudnn.benchmark and os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE
    set_seed(5)  # the next run in this process gets torch's default back
    assert not torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.deterministic
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the user's choice is kept
    set_seed(5, deterministic=True)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_deterministic_is_a_config_key_of_both_trainers():
    from training.grpo.config import SMOKE_CONFIG, GRPOConfig
    from training.sft.config import SFTConfig

    assert load_config(SFTConfig, None).deterministic is False
    assert load_config(SFTConfig, None, ["deterministic=true"]).deterministic is True
    assert load_config(GRPOConfig, SMOKE_CONFIG, ["deterministic=true"]).deterministic is True
    with pytest.raises(ConfigError, match="deterministic"):
        load_config(SFTConfig, None, ["deterministic=yes"])


def test_config_changes_name_each_changed_key():
    from training.config import config_changes

    saved = {"out_dir": "runs/a", "seed": 0, "optim": {"lr": 0.01, "betas": [0.9, 0.95]},
             "stages": [{"name": "en", "steps": 3}, {"name": "hi", "steps": 3}], "resume": True}
    current = {"out_dir": "runs/b", "seed": 0, "optim": {"lr": 0.005, "betas": [0.9, 0.95]},
               "stages": [{"name": "en", "steps": 3}, {"name": "hi", "steps": 4}]}
    assert config_changes(saved, current) == [  # out_dir is where the run lives, not a setting
        "optim.lr: 0.01 -> 0.005", 'resume: true -> "(absent)"', "stages.1.steps: 3 -> 4"]
    assert config_changes(current, current) == []
    assert config_changes({"stages": [1]}, {"stages": [1, 2]}) == ["stages: [1] -> [1, 2]"]


class _Smoke:
    """A stand-in trainer class: only what `smoke_outcome` calls."""

    passed = True

    @classmethod
    def smoke_report(cls, out, seconds):
        return {"ratio": 0.5, **seconds}

    @classmethod
    def smoke_verdict(cls, summary):
        return cls.passed, f"ratio {summary['ratio']} (needs < 0.8)"


@pytest.mark.parametrize(("passed", "overrides", "status"), [
    (True, [], 0), (False, [], SMOKE_FAILED), (False, ["steps=2"], 0), (True, ["steps=2"], 0)])
def test_smoke_verdict_is_printed_saved_and_sets_the_exit_status(tmp_path, capsys, passed, overrides, status):
    _Smoke.passed = passed
    assert smoke_outcome(_Smoke, tmp_path, {"train_s": 1.0}, overrides) == status
    summary = json.loads((tmp_path / SMOKE_SUMMARY).read_text())
    verdict = "PASS" if passed else "FAIL"
    assert summary == {"ratio": 0.5, "train_s": 1.0, "verdict": verdict, "criteria": "ratio 0.5 (needs < 0.8)",
                       "overrides": overrides}
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"smoke: {verdict}: ratio 0.5 (needs < 0.8)") and str(tmp_path / SMOKE_SUMMARY) in line
    assert ("does not set the exit status" in line) == bool(overrides)


def test_clock():
    assert [clock(s) for s in (0, 59.4, 61, 3600, 3725.6)] == ["0:00", "0:59", "1:01", "1:00:00", "1:02:06"]


class _Payload:
    """Unpickling this runs code (here: makes a file), as a hostile training_state.pt would."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_pickle_planted_in_a_checkpoint_is_not_run_on_resume(tmp_path):
    ckpt = tmp_path / "checkpoints" / "step_00000001"
    ckpt.mkdir(parents=True)
    marker = tmp_path / "pwned"
    torch.save({"step": 1, "optimizer": _Payload(str(marker)), "rng": {}}, ckpt / "training_state.pt")
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(CheckpointError, match="never unpickled"):
        load_training_state(ckpt, opt, None)
    assert not marker.exists()  # the payload never ran


def test_the_launchers_world_is_read_before_a_process_group(monkeypatch):
    """torchrun's WORLD_SIZE (or an MPI launcher's) is the world; several processes without CUDA are
    CPU ones, and an Accelerator that sees another count is refused rather than run as lone mains."""
    for name in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert launched_processes() == 1 and not cpu_processes()
    check_world(1)
    assert run_on_main_process(lambda: "made once") == "made once"  # one process: it just runs
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert launched_processes() == 4
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launched_processes() == 2 and cpu_processes() == (not torch.cuda.is_available())
    check_world(2)
    with pytest.raises(ConfigError, match="the launcher started 2 processes but accelerate sees 1"):
        check_world(1)
