"""A training run is a function of its config and seed, not of paths or of the process.

The same-seed runs A and B are fresh `python -m training.sft` / `python -m training.grpo`
processes, each with its own PYTHONHASHSEED. The same-seed SFT runs read copies of one prepared
data set from two different folders and write to two different OUTs: the situation of two
`training.sft --smoke --out A|B` runs, whose batch order used to depend on the data path. The
run with another seed (seed1) runs in the test's own process while they do: that another seed
gives another run needs no interpreter of its own, and a start costs ~13 CPU s of imports.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.torch import load_file

from training.common import TRAINING_STATE, latest_checkpoint
from training.grpo.__main__ import main as grpo_main
from training.prepare import prepare
from training.sft.__main__ import main as sft_main

ROOT = Path(__file__).resolve().parents[2]
RATE = 24_000
TIMING_KEYS = ("time", "tokens_per_s", "time/rollout_s", "time/update_s")  # wall clock, not results
RUN_TIMEOUT_S = 300


def _tone(seconds: float, freq: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * freq * t) + 0.05 * np.sin(2 * np.pi * 2.7 * freq * t)).astype(np.float32)


def _prepared(root: Path, tiny_checkpoint, name: str, language: str, texts: list[str]) -> Path:
    """A small prepared folder: one tone clip per text, voices Ira and Meera (a new one)."""
    wav = root / "wav"
    wav.mkdir(parents=True, exist_ok=True)
    rows = []
    for n, text in enumerate(texts):
        path = wav / f"{name}_{n}.wav"
        sf.write(path, _tone(0.4 + 0.1 * n, 150.0 + 40 * n), RATE)
        rows.append({"audio": f"wav/{path.name}", "text": text, "speaker": ("Ira", "Meera")[n % 2],
                     "language": language})
    manifest = root / f"{name}.jsonl"
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    report = prepare(manifest, str(tiny_checkpoint), root / name, shard_size=4, batch_size=8, device="cpu",
                     new_speakers=("Meera",))
    assert report["skipped_count"] == 0, report["skipped"]
    return root / name


def _config(model, data: Path, out: Path) -> dict:
    """Two stages (English, then Hindi with English replay), a held-out split, a mid-run save."""
    en, hi = str(data / "en"), str(data / "hi")
    return {
        "model": str(model), "out_dir": str(out), "seed": 0,
        "stages": [{"name": "english", "steps": 3, "mixture": [{"data": en}]},
                   {"name": "hindi", "steps": 3, "mixture": [{"data": hi}, {"data": en, "weight": 0.5}]}],
        "optim": {"lr": 1e-2, "warmup_steps": 2}, "batch": {"global_batch": 4, "micro_batch": 2},
        "loss": {"head": "audio"}, "eval": {"every": 3, "fraction": 0.25}, "save_every": 3,
        "mixed_precision": "no",
    }


def _launch(module: str, args: list[str], hash_seed: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", module, *args], env=env, cwd=ROOT, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def _wait(runs: dict[str, tuple[subprocess.Popen, Path]]) -> None:
    for name, (proc, log) in runs.items():
        assert proc.wait(timeout=RUN_TIMEOUT_S) == 0, f"{name}: {log.read_text()[-3000:]}"


def _results(out: Path) -> list[dict]:
    """metrics.jsonl without the timing columns."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in rows]


def _master_weights(out: Path) -> dict[str, torch.Tensor]:
    """The full-precision weights of the last checkpoint (what a resume would continue from)."""
    return torch.load(latest_checkpoint(out) / TRAINING_STATE, map_location="cpu", weights_only=False)["model"]


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def sft_runs(tiny_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """Two fresh SFT processes at once, A and B (same seed; data copies at different paths,
    different hash seeds; B with deterministic=true, which changes nothing on CPU), and meanwhile
    `seed1` (as A with seed 1) in this process."""
    root = tmp_path_factory.mktemp("repro")
    first = root / "a" / "data"
    _prepared(first, tiny_checkpoint, "en", "en", ["good morning", "the train is late", "see you soon",
                                                   "what a day", "tea with ginger", "hello there"])
    _prepared(first, tiny_checkpoint, "hi", "hi", ["नमस्ते", "आज मौसम अच्छा है", "मुझे चाय पसंद है",
                                                   "कल मिलेंगे"])
    second = root / "b" / "elsewhere" / "data"
    shutil.copytree(first, second)
    plans = {"A": (first, 1, []), "B": (second, 2, ["--set", "deterministic=true"]),
             "seed1": (first, None, ["--set", "seed=1"])}
    runs, outs, configs = {}, {}, {}
    for name, (data, hash_seed, extra) in plans.items():
        outs[name] = root / name.lower() / "out"
        configs[name] = root / f"{name}.json"
        configs[name].write_text(json.dumps(_config(tiny_checkpoint, data, outs[name])), encoding="utf-8")
        if hash_seed is not None:
            runs[name] = (_launch("training.sft", ["--config", str(configs[name]), *extra], hash_seed,
                                  root / f"{name}.log"), root / f"{name}.log")
    sft_main(["--config", str(configs["seed1"]), *plans["seed1"][2]])
    _wait(runs)
    return outs


@pytest.mark.slow
def test_same_seed_same_losses_and_weights_across_paths_and_processes(sft_runs):
    a, b = _results(sft_runs["A"]), _results(sft_runs["B"])
    assert [r["step"] for r in a] == list(range(1, 7)) and "heldout_loss" in a[2]
    assert a == b  # every loss, held-out loss, grad norm and lr, bit for bit
    assert _same_weights(_master_weights(sft_runs["A"]), _master_weights(sft_runs["B"]))
    published = [load_file(sft_runs[name] / "model.safetensors") for name in ("A", "B")]
    assert _same_weights(*published)


@pytest.mark.slow
def test_a_different_seed_gives_a_different_run(sft_runs):
    a, other = _results(sft_runs["A"]), _results(sft_runs["seed1"])
    # another batch order (a batch can hold the same clips under both seeds: compare the whole run)
    assert [r["loss"] for r in a] != [r["loss"] for r in other]
    assert not _same_weights(_master_weights(sft_runs["A"]), _master_weights(sft_runs["seed1"]))


@pytest.mark.slow
def test_deterministic_switch_reaches_the_saved_config(sft_runs):
    assert json.loads((sft_runs["B"] / "train_config.json").read_text())["deterministic"] is True
    assert json.loads((latest_checkpoint(sft_runs["B"]) / "train_config.json").read_text())["deterministic"] is True
    assert json.loads((sft_runs["A"] / "train_config.json").read_text())["deterministic"] is False
    assert "deterministic kernels" in (sft_runs["B"].parents[1] / "B.log").read_text()


@pytest.mark.slow
def test_grpo_runs_are_reproducible_and_follow_the_seed(tiny_checkpoint, tmp_path):
    common = ["--smoke", "--set", f"model={tiny_checkpoint}", "--set", "steps=2", "--set", "save_every=2",
              "--set", "rollout.max_new_tokens=16"]
    plans = {"A": (1, []), "B": (2, [])}  # fresh processes; seed1 runs here meanwhile (module docstring)
    runs = {name: (_launch("training.grpo", [*common, "--out", str(tmp_path / name), *extra], hash_seed,
                           tmp_path / f"{name}.log"), tmp_path / f"{name}.log")
            for name, (hash_seed, extra) in plans.items()}
    grpo_main([*common, "--out", str(tmp_path / "seed1"), "--set", "seed=1"])
    _wait(runs)
    a, b, other = (_results(tmp_path / name) for name in ("A", "B", "seed1"))
    assert len(a) == 2 and a == b
    weights = {name: load_file(latest_checkpoint(tmp_path / name) / "model.safetensors")
               for name in ("A", "B", "seed1")}
    assert _same_weights(weights["A"], weights["B"])
    assert a[0]["reward"] != other[0]["reward"]  # other prompts and sampling seeds
    assert not _same_weights(weights["A"], weights["seed1"])
