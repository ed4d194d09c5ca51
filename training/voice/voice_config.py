"""A voice adaptation run's configuration (dataclasses; no command line, no torch).

    cfg = load_config(VoiceConfig, "my_voice.toml", ["train.steps=400", "lora.rank=8"])
    cfg.validate()                       # ConfigError naming the key and the fix
    save_config(cfg, work / "voice_config.json")

`rumik voice create NAME ... [--config FILE] [--set KEY=VALUE]` reads a JSON or TOML file into
`VoiceConfig` with `training.config.load_config`; the whole config is also saved in the
package's voice.json (`training`). The tables:

    [data]    how recordings become clips: VAD, clip lengths, the filters and their
              thresholds, the bounds on what is read, the minimum kept, the held-out share
    [replay]  the built-in voices' own samples mixed into training, so they stay as they are
    [lora]    the adapter: rank, alpha and the projections of every layer it adapts
    [train]   AdamW with a linear warmup and a cosine decay, steps and batch
    [eval]    speaker encoder, ASR judge and sentences of the real-weights evaluation
    [consent] the consent recording's checks: speaker similarity and the statement's CER
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rumik_app.errors import ConfigError
from rumik_app.request import DEFAULT_MODEL
from rumik_app.voices.package import TARGET_MODULES, LoraSpec, VoiceError
from training.audio.vad import VAD_BACKENDS, CutSettings

LOSS_HEADS = ("audio", "full")


@dataclass
class DataConfig(CutSettings):
    """Recordings -> clips (training.voice.data); the VAD and cut settings are CutSettings'.

    max_hours: total audio read (from the headers, before decoding); max_recording_minutes:
    one file. vad: "silero" (Silero VAD's ONNX model) or "energy" (frame RMS, no model);
    vad_threshold: silero's speech probability; energy_range_db: energy VAD's speech floor
    below the recording's loud frames. Clips are clip_min_seconds to clip_max_seconds; pauses
    up to max_pause_seconds stay inside a clip. Filters: max_clipped_fraction of samples at
    or above clip_level; min_dnsmos (DNSMOS OVRL, 1-5; 0 turns it off); max_cer (transcript vs
    the ASR judge, only with one). min_minutes of kept audio are required; heldout_fraction of
    clips (at least one) is held out for evaluation. language: of recordings that do not say
    (None: guessed from the transcript's script).
    """

    max_hours: float = 20.0
    max_recording_minutes: float = 60.0
    clip_level: float = 0.99
    max_clipped_fraction: float = 0.001
    min_dnsmos: float = 2.5
    max_cer: float = 0.3
    min_minutes: float = 10.0
    heldout_fraction: float = 0.1
    language: str | None = None


@dataclass
class ReplayConfig:
    """The built-in voices' own samples (the base model speaking the new voice's sentences),
    generated before training and mixed into every batch with `weight` (a share of the batch),
    so a prompt naming a built-in voice keeps the base model's behaviour. clips: how many
    (heldout of them measure the drift); voices: which (empty: every built-in voice);
    temperature: their sampling temperature. weight 0 turns replay off."""

    weight: float = 0.5
    clips: int = 48
    heldout: int = 8
    voices: list[str] = field(default_factory=list)
    # 1, not the request's 0.8: replay samples are training targets meant to keep the built-in
    # voices' distribution where it is; samples at 1 are drawn from it, at 0.8 they would sharpen it.
    temperature: float = 1.0


@dataclass
class LoraSettings:
    """The adapter (rumik_app.voices.package.LoraSpec): delta = alpha / rank * B @ A."""

    rank: int = 16
    alpha: float = 32.0
    target_modules: list[str] = field(default_factory=lambda: list(TARGET_MODULES))

    def spec(self) -> LoraSpec:
        """The package's LoraSpec; ConfigError naming the key when it is out of bounds."""
        try:
            return LoraSpec(self.rank, float(self.alpha), tuple(self.target_modules)).check()
        except VoiceError as exc:
            raise ConfigError(f"[lora]: {exc}") from None


@dataclass
class TrainConfig:
    """AdamW over the adapter only; lr warms up linearly for warmup_steps, then follows a
    cosine down to min_lr_ratio x lr at `steps`. batch: clips per step (new voice + replay),
    micro_batch of them per forward (gradients accumulate; the loss is the whole batch's).
    checkpoint_every: steps between two saves of WORK/train_state.pt, from which a killed run
    resumes exactly (0: never)."""

    steps: int = 300
    batch: int = 8
    micro_batch: int = 4
    lr: float = 2e-3
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    max_grad_norm: float = 1.0
    loss_head: str = "audio"
    stop_lambda: float = 1.0
    eval_every: int = 50
    checkpoint_every: int = 50


@dataclass
class EvalConfig:
    """Real weights only (a random checkpoint's speech means nothing): `sentences` held-out
    sentences synthesised in the new voice, scored by speaker similarity to the held-out clips
    (`speaker_encoder`) and, with `asr` (an evaluation.asr spec), CER. The ASR judge also
    transcribes clips without a transcript and sets the data's CER filter."""

    speaker_encoder: str = "resemblyzer"
    asr: str | None = None
    sentences: int = 8


@dataclass
class ConsentConfig:
    """The consent recording's checks (training.voice.consent). min_similarity: None = the speaker
    encoder's calibrated threshold (consent.SIMILARITY_THRESHOLDS). asr: the judge that hears the
    statement (an evaluation.asr spec; None = eval.asr); max_cer: the most CER it may show."""

    min_similarity: float | None = None
    max_cer: float = 0.4
    asr: str | None = None


@dataclass
class VoiceConfig:
    """Everything `rumik voice create` needs besides the name, the recordings and the consent.

    model: the checkpoint the adapter is for (folder, hub id or "tiny"); the package records
    its fingerprint and is served only on it. device: None picks CUDA when there is one.
    """

    model: str = DEFAULT_MODEL
    seed: int = 0
    device: str | None = None
    torch_threads: int | None = None
    data: DataConfig = field(default_factory=DataConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    consent: ConsentConfig = field(default_factory=ConsentConfig)

    def validate(self) -> "VoiceConfig":
        """Raise ConfigError naming the key for settings that cannot run; returns self."""
        d, t, r = self.data, self.train, self.replay
        if d.vad not in VAD_BACKENDS:
            raise ConfigError(f"data.vad must be one of {VAD_BACKENDS}, got {d.vad!r}.")
        if not 0.5 <= d.clip_min_seconds < d.clip_max_seconds <= 30.0:
            raise ConfigError("data.clip_min_seconds and data.clip_max_seconds must satisfy 0.5 <= min < max <= 30 "
                              "(training.prepare takes clips up to 30 s).")
        if min(d.max_hours, d.max_recording_minutes) <= 0 or d.min_minutes < 0:
            raise ConfigError("data.max_hours and data.max_recording_minutes must be > 0, data.min_minutes >= 0.")
        if not (0 < d.heldout_fraction < 0.5 and 0 < d.vad_threshold < 1 and 0 < d.clip_level <= 1):
            raise ConfigError("data.heldout_fraction must be in (0, 0.5), data.vad_threshold in (0, 1) and "
                              "data.clip_level in (0, 1].")
        if not 0 <= r.weight < 1 or (r.weight > 0 and not 0 < r.heldout < r.clips):
            raise ConfigError("replay.weight must be in [0, 1), and with replay 0 < replay.heldout < replay.clips.")
        if t.checkpoint_every < 0:
            raise ConfigError("train.checkpoint_every must be >= 0 (0: no training state is saved).")
        if min(t.steps, t.batch, t.micro_batch) < 1 or t.lr <= 0 or t.warmup_steps < 0 or not 0 <= t.min_lr_ratio <= 1:
            raise ConfigError("train.steps, train.batch and train.micro_batch must be >= 1, train.lr > 0, "
                              "train.warmup_steps >= 0 and train.min_lr_ratio in [0, 1].")
        if t.loss_head not in LOSS_HEADS:
            raise ConfigError(f"train.loss_head must be one of {LOSS_HEADS}, got {t.loss_head!r}.")
        if len(t.betas) != 2 or not all(0 <= b < 1 for b in t.betas):
            raise ConfigError(f"train.betas must be two numbers in [0, 1), got {t.betas}.")
        self.lora.spec()
        c = self.consent
        if (c.min_similarity is not None and not 0 < c.min_similarity < 1) or not 0 < c.max_cer <= 1:
            raise ConfigError("consent.min_similarity must be in (0, 1) (or left out for the encoder's calibrated "
                              "threshold) and consent.max_cer in (0, 1].")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ConfigError("torch_threads must be >= 1 (or left out for torch's default).")
        return self
