"""Adapting a voice: a LoRA adapter of the body, trained on a speaker's clips, written as a voice package.

    rumik voice create Arjun --audio recordings/arjun --consent consent.wav \\
        --statement "I, Arjun Rao, consent to ..." --out voices [--model PATH|tiny] [--set train.steps=400]
    trainer = VoiceTrainer(cfg, "Arjun", work=Path("runs/voice-Arjun"))
    trainer.load_data(made)                      # training.prepare's Mimi codes + the replay samples
    trainer.train()                              # AdamW over the adapter, a line of tqdm per step
    figures = trainer.evaluate(made)             # held-out losses with the adapter off and on
    trainer.write_package(Path("voices"), consent, "consent.wav", made)   # voices/Arjun (atomic)

What trains: LoRA (peft, lora_dropout 0) on the seven projections of every layer of the body;
the embeddings (tied with the LM head), the norms and the stop head stay frozen, so the
package is only `lora_A`/`lora_B` matrices under PEFT's names (rumik_app.voices.package).
Prompts are the engine's own (`[BOS]<text>NAME: {text}<audio>`, NAME added to the speakers in
memory), sequences and loss are SFT's (training.sft.sequences, training.sft.objective:
teacher-forced cross-entropy over the audio tokens plus the stop head's BCE, normalised per
batch). Replay: before training, the base model speaks the new voice's sentences in the
built-in voices (`[replay]`); `replay.weight` of every batch is drawn from those samples, so
the adapter learns to leave a prompt that names a built-in voice as the base model had it.
Schedule: linear warmup, cosine decay to `min_lr_ratio`.

Evaluation (voice.json `evaluation`): teacher-forced loss of the held-out clips with the
adapter disabled (peft `disable_adapter`) and enabled, and the same for held-out replay
samples of the built-in voices (their drift); on real weights also the speaker similarity
(evaluation.speaker) and, with an ASR judge, the CER of held-out sentences synthesised in the
new voice. On a random checkpoint (`--model tiny`, which writes tiny_spec.json) those two are
null with the reason: random weights speak no words and no voice.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from rumik_app.engine.local import TTSEngine
from rumik_app.request import SynthesisRequest
from rumik_app.voices.package import VoicePackage, adapter_key, base_fingerprint, write_package
from training.common import METRICS_FILE, MetricsLogger, set_seed
from training.config import config_dict
from training.prepare import PrepareError, codec_fingerprint, prepare
from training.sft.data import DataSource
from training.sft.objective import SFTObjective
from training.sft.sequences import TrainingExample, build_sequence, collate
from training.voice.data import MadeData
from training.voice.progress import Progress
from training.voice.train_state import restore_train_state, save_train_state
from training.voice.voice_config import VoiceConfig

RANDOM_MARKER = "tiny_spec.json"  # written by rumik_app.checkpoint.tiny: the weights are random
EVAL_BATCH = 8
REPLAY_BATCH = 16
MAX_REPLAY_SECONDS = 20.0
RANDOM_REASON = "random weights: a random checkpoint speaks no words and no voice"


def cosine_lambda(warmup: int, total: int, min_ratio: float):
    """LambdaLR multiplier: linear warmup to 1 over `warmup` steps, then a cosine to `min_ratio` at `total`."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup + 1) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def is_random_checkpoint(folder: Path) -> bool:
    return (Path(folder) / RANDOM_MARKER).exists()


def prepared_examples(engine: TTSEngine, folder: Path) -> list[TrainingExample]:
    """Every clip of a prepared folder (training.prepare) as a training sequence with the engine's prompt."""
    source = DataSource(folder, engine.layout, codec_fingerprint(engine.checkpoint_dir))
    return [build_sequence(engine.prompt_ids(source.request(i)), source.codes(i), engine.layout)
            for i in range(len(source))]


@torch.no_grad()
def mean_loss(objective: SFTObjective, engine: TTSEngine, examples: list[TrainingExample],
              stop_lambda: float = 1.0) -> dict[str, float]:
    """Teacher-forced loss of `examples` (SFT's, normalised over all of them as one batch)."""
    objective.model.eval()
    sums = torch.zeros(2)
    for lo in range(0, len(examples), EVAL_BATCH):
        tensors = {k: v.to(engine.device) for k, v in collate(examples[lo : lo + EVAL_BATCH], engine.pad_id).items()}
        out = objective(**tensors)
        sums += torch.stack([out["acoustic_sum"].float().cpu(), out["stop_sum"].float().cpu()])
    targets, bounds = sum(e.num_targets for e in examples), sum(e.num_frames for e in examples)
    acoustic, stop = float(sums[0]) / targets, float(sums[1]) / bounds
    return {"loss": acoustic + stop_lambda * stop, "acoustic": acoustic, "stop": stop}


class VoiceTrainer:
    """One voice adaptation run (module docstring): engine, data, adapter, optimiser."""

    def __init__(self, cfg: VoiceConfig, name: str, work: Path):
        self.cfg, self.name, self.work = cfg.validate(), name, Path(work)
        set_seed(cfg.seed)
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.engine = TTSEngine.from_pretrained(cfg.model, device=device, compile=False,
                                                dtype=torch.float32 if device == "cpu" else None)
        self.builtin = tuple(self.engine.config.speakers)
        self.engine.config.speakers = self.builtin + (name,)
        self.checkpoint = self.engine.checkpoint_dir
        self.random_weights = is_random_checkpoint(self.checkpoint)
        self.peft = None
        self.train_set: list[TrainingExample] = []
        self.held_set: list[TrainingExample] = []
        self.replay_train: list[TrainingExample] = []
        self.replay_held: list[TrainingExample] = []
        self.history: list[dict] = []

    # ------------------------------------------------------------------ data
    def encoded(self, manifest: Path, folder: str) -> list[TrainingExample]:
        """A clips manifest through training.prepare (this checkpoint's Mimi), as training sequences."""
        data = self.cfg.data
        report = prepare(manifest, str(self.checkpoint), self.work / folder, device=str(self.engine.device),
                         new_speakers=(self.name,), min_seconds=min(1.0, data.clip_min_seconds),
                         max_seconds=data.clip_max_seconds + 1.0)
        if report["skipped_count"]:
            raise PrepareError(f"training.prepare skipped clips of {manifest}: {report['skipped'][:3]}")
        return prepared_examples(self.engine, self.work / folder)

    def replay_samples(self, texts: list[str], frames: list[int], count: int, seed: int) -> list[TrainingExample]:
        """`count` samples of the base model speaking `texts` in the built-in voices (about as
        long as the clips they come from), as training sequences."""
        replay, layout = self.cfg.replay, self.engine.layout
        voices = list(replay.voices or self.builtin)
        longest = MAX_REPLAY_SECONDS * layout.frame_rate_hz
        requests = [SynthesisRequest(texts[k % len(texts)], voice=voices[k % len(voices)], seed=seed + k,
                                     temperature=replay.temperature,
                                     max_new_tokens=int(min(frames[k % len(frames)], longest) * layout.num_quantizers))
                    for k in range(count)]
        out = []
        for lo in tqdm(range(0, count, REPLAY_BATCH), desc="replay: base voices speaking", unit="batch"):
            batch = requests[lo : lo + REPLAY_BATCH]
            rollouts = self.engine.generate_batch(batch)
            for row, req in enumerate(batch):
                frames_row = int(rollouts.num_frames[row])
                if frames_row:
                    codes = rollouts.codes[row, :, :frames_row].cpu().numpy()
                    out.append(build_sequence(self.engine.prompt_ids(req), codes, self.engine.layout))
        return out

    def load_data(self, made: MadeData, progress: Progress | None = None) -> None:
        """Encode the clips and make the replay samples (before the adapter exists)."""
        progress = progress or Progress()
        progress.started("encode")
        self.train_set = self.encoded(made.train_manifest, "prepared_train")
        self.held_set = self.encoded(made.heldout_manifest, "prepared_heldout")
        progress.done("encode", train_clips=len(self.train_set), heldout_clips=len(self.held_set))
        progress.started("replay")
        rows = [json.loads(line) for line in made.train_manifest.read_text(encoding="utf-8").splitlines() if line]
        order = np.random.default_rng(self.cfg.seed).permutation(len(rows))
        texts = [rows[i]["text"] for i in order]
        frames = [self.train_set[i].num_frames for i in order]
        replay = self.cfg.replay
        with torch.no_grad():
            self.replay_held = self.replay_samples(texts[::-1], frames[::-1], replay.heldout, 10_000 + self.cfg.seed)
            if replay.weight > 0:
                self.replay_train = self.replay_samples(texts, frames, replay.clips - replay.heldout, self.cfg.seed)
        progress.done("replay", samples=len(self.replay_train) + len(self.replay_held))

    # ------------------------------------------------------------------ training
    def attach_adapter(self) -> None:
        """Inject the LoRA adapter (peft) into the engine's model in place; only it trains."""
        from training.grpo.policy import apply_lora

        lora = self.cfg.lora
        self.peft = apply_lora(self.engine.model, lora.rank, lora.alpha, 0.0, list(lora.target_modules),
                               train_stop_head=False)
        self.objective = SFTObjective(self.engine.model, self.engine.layout, self.cfg.train.loss_head)
        train = self.cfg.train
        trained = [name for name, p in self.peft.named_parameters() if p.requires_grad]
        if not trained or any(".lora_" not in name for name in trained):
            raise RuntimeError(f"only the adapter may train, but {[n for n in trained if '.lora_' not in n][:3]} "
                               "would too: the peft pin changed what get_peft_model freezes.")
        params = [p for p in self.peft.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=train.lr, betas=tuple(train.betas),
                                           weight_decay=train.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, cosine_lambda(train.warmup_steps, train.steps, train.min_lr_ratio))

    def batch_at(self, step: int) -> list[TrainingExample]:
        """Step `step`'s clips: a pure function of (seed, step): new voice, then replay."""
        train, rng = self.cfg.train, np.random.default_rng([self.cfg.seed, step])
        replayed = round(train.batch * self.cfg.replay.weight) if self.replay_train else 0
        new = rng.choice(len(self.train_set), train.batch - replayed,
                         replace=len(self.train_set) < train.batch - replayed)
        old = rng.choice(len(self.replay_train), replayed, replace=len(self.replay_train) < replayed) \
            if replayed else []
        return [self.train_set[i] for i in new] + [self.replay_train[i] for i in old]

    def backward(self, examples: list[TrainingExample]) -> dict[str, float]:
        """Gradients of SFT's loss of one step's batch (acoustic CE per target + stop_lambda x
        BCE per boundary, both over the whole batch), `train.micro_batch` clips per forward."""
        targets, bounds = sum(e.num_targets for e in examples), sum(e.num_frames for e in examples)
        sums = torch.zeros(2)
        for lo in range(0, len(examples), self.cfg.train.micro_batch):
            part = collate(examples[lo : lo + self.cfg.train.micro_batch], self.engine.pad_id)
            out = self.objective(**{k: v.to(self.engine.device) for k, v in part.items()})
            (out["acoustic_sum"] / targets + self.cfg.train.stop_lambda * out["stop_sum"] / bounds).backward()
            sums += torch.stack([out["acoustic_sum"].detach().float().cpu(), out["stop_sum"].detach().float().cpu()])
        acoustic, stop = float(sums[0]) / targets, float(sums[1]) / bounds
        return {"loss": acoustic + self.cfg.train.stop_lambda * stop, "acoustic_loss": acoustic, "stop_loss": stop}

    def train(self, progress: Progress | None = None) -> list[dict]:
        """Run `train.steps` optimiser steps, from WORK/train_state.pt's step when a killed run left
        one (train_state); every step's metrics go to WORK/metrics.jsonl, and to `progress`."""
        if self.peft is None:
            self.attach_adapter()
        train, events = self.cfg.train, progress or Progress()
        first = restore_train_state(self) + 1
        (self.work / METRICS_FILE).unlink(missing_ok=True)  # this run's steps only: rewritten from the history
        logger = MetricsLogger(self.work, echo=False)
        for row in self.history:
            logger.log(row["step"], {k: v for k, v in row.items() if k != "step"})
        self.engine.model.train()
        bar = tqdm(range(first, train.steps + 1), desc=f"training {self.name}", unit="step",
                   initial=first - 1, total=train.steps)
        for step in bar:
            lr = self.scheduler.get_last_lr()[0]
            metrics = self.backward(self.batch_at(step))
            params = [p for p in self.peft.parameters() if p.requires_grad]
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, train.max_grad_norm or float("inf")))
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            metrics.update(learning_rate=lr, grad_norm=grad_norm)
            if train.eval_every and (step % train.eval_every == 0 or step == train.steps):
                metrics["heldout_loss"] = self.mean_loss(self.held_set)["loss"]
                self.engine.model.train()
            logger.log(step, metrics)
            self.history.append({"step": step, **metrics})
            if train.checkpoint_every and step % train.checkpoint_every == 0 and step < train.steps:
                save_train_state(self, step)
            bar.set_postfix_str(f"loss {metrics['loss']:.3f}" + (
                f", held-out {metrics['heldout_loss']:.3f}" if "heldout_loss" in metrics else ""))
            events.training(step, train.steps, metrics)
        logger.close()
        self.engine.model.eval()
        return self.history

    # ------------------------------------------------------------------ evaluation
    def mean_loss(self, examples: list[TrainingExample]) -> dict[str, float]:
        return mean_loss(self.objective, self.engine, examples, self.cfg.train.stop_lambda)

    def adapter_off(self):
        return self.peft.disable_adapter() if self.peft is not None else contextlib.nullcontext()

    def evaluate(self, made: MadeData) -> dict:
        """voice.json's `evaluation`: held-out losses without and with the adapter, the built-in
        voices' drift, and (real weights) speaker similarity and CER of synthesised sentences."""
        with self.adapter_off():
            base_new, base_old = self.mean_loss(self.held_set), self.mean_loss(self.replay_held)
        new, old = self.mean_loss(self.held_set), self.mean_loss(self.replay_held)
        figures = {
            "heldout_clips": len(self.held_set), "heldout_loss_base": round(base_new["loss"], 4),
            "heldout_loss_adapted": round(new["loss"], 4),
            "heldout_loss_drop": round(1 - new["loss"] / base_new["loss"], 4),
            "heldout_acoustic_base": round(base_new["acoustic"], 4),
            "heldout_acoustic_adapted": round(new["acoustic"], 4),
            "builtin_samples": len(self.replay_held), "builtin_loss_base": round(base_old["loss"], 4),
            "builtin_loss_adapted": round(old["loss"], 4),
            "builtin_drift": round(old["loss"] / base_old["loss"] - 1, 4),
        }
        if self.random_weights:
            figures.update(speaker_similarity=None, cer=None, synthesis_note=RANDOM_REASON)
        else:
            from training.voice.synthesis_eval import synthesis_figures

            figures.update(synthesis_figures(self, made))
        return figures

    # ------------------------------------------------------------------ the package
    def adapter_tensors(self) -> dict[str, torch.Tensor]:
        """The adapter as PEFT names it (`get_peft_model_state_dict`), checked against
        rumik_app.voices.package.adapter_key: every layer, every target module, A and B."""
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.peft, save_embedding_layers=False)
        layers = self.engine.model.config.num_hidden_layers
        expected = {adapter_key(layer, module, which) for layer in range(layers)
                    for module in self.cfg.lora.target_modules for which in "AB"}
        if set(state) != expected:
            raise RuntimeError(f"peft named the adapter's tensors {sorted(set(state) ^ expected)[:4]}..., not as "
                               "rumik_app.voices.package.adapter_key does; the peft pin changed its names.")
        return {key: tensor.detach().float().cpu() for key, tensor in state.items()}

    def write_package(self, voices_dir: Path, consent, consent_file: Path, made: MadeData,
                      figures: dict) -> Path:
        """VOICES_DIR/NAME: voice.json, adapter.safetensors, adapter_config.json, the consent file."""
        package = VoicePackage(
            name=self.name, base_fingerprint=base_fingerprint(self.checkpoint), lora=self.cfg.lora.spec(),
            consent=consent, languages=made.languages,
            data_hours=round(sum(e.num_frames for e in self.train_set + self.held_set)
                             / self.engine.layout.frame_rate_hz / 3600, 4),
            training={**config_dict(self.cfg), "checkpoint": str(self.checkpoint),
                      "data_report": _short_report(made.report), "steps_run": len(self.history)},
            evaluation=figures,
            created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        return write_package(Path(voices_dir) / self.name, package, self.adapter_tensors(), consent_file)


def _short_report(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "dropped_examples"}


def run(cfg: VoiceConfig, name: str, made: MadeData, work: Path,
        progress: Progress | None = None) -> tuple["VoiceTrainer", dict, dict]:
    """Load, encode, replay, train and evaluate: (trainer, figures, seconds per stage)."""
    progress = progress or Progress()
    marks = [time.perf_counter()]
    progress.started("load", model=cfg.model)
    trainer = VoiceTrainer(cfg, name, work)
    progress.done("load", random_weights=trainer.random_weights)
    marks.append(time.perf_counter())
    trainer.load_data(made, progress)
    marks.append(time.perf_counter())
    trainer.attach_adapter()
    progress.started("train", train_steps=cfg.train.steps)
    trainer.train(progress)
    progress.done("train", final_loss=round(trainer.history[-1]["loss"], 5))
    marks.append(time.perf_counter())
    progress.started("evaluate")
    figures = trainer.evaluate(made)
    progress.done("evaluate", **{k: figures[k] for k in ("heldout_loss_base", "heldout_loss_adapted", "builtin_drift")})
    marks.append(time.perf_counter())
    stages = ("load_s", "encode_and_replay_s", "train_s", "evaluate_s")
    return trainer, figures, {stage: round(marks[k + 1] - marks[k], 1) for k, stage in enumerate(stages)}
