"""Audio judges beside a listening test: DNSMOS and speaker similarity per system next to the human
scores, and whether DNSMOS agrees with the listeners (docs/ARCHITECTURE.md §8).

Library module (no command line), for the annotation campaigns' results::

    from evaluation.campaign_judges import Clip, human_scores, judge_clips, judge_results
    clips = [Clip("p01", "rumik", "clips/3f9a.wav", voice="Ira"), ...]   # one clip per prompt x condition
    judged = judge_clips(clips, quality=DNSMOS(), speaker=encoder, references=refs)
    human = human_scores([("p01", "rumik", 4), ("p01", "rumik", 5), ...])   # (prompt, condition, 1-5 score)
    results = judge_results(judged, human)      # results.markdown(), results.as_dict()

- Per condition: the mean human score, DNSMOS OVRL/SIG/BAK and speaker similarity, each the
  mean over prompts with a 95 % percentile bootstrap CI (`evaluation.listening_stats.bootstrap_mean`,
  the campaigns' own CI), so the judges sit beside the listeners on the same footing.
- Agreement: Spearman's rank correlation between each clip's mean human score and its DNSMOS
  OVRL (`scipy.stats.spearmanr`), with a 95 % percentile bootstrap CI over clips (pairs
  resampled together, `scipy.stats.bootstrap(paired=True)`, seeded). A rho near 0, or a CI
  that straddles 0, says the predictor does not rank these clips as these listeners do.
"""

from __future__ import annotations

import math
import os
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from evaluation.audio_io import LOCAL_MAX_SECONDS, load_native
from evaluation.listening_stats import CONFIDENCE, DEFAULT_SEED, N_RESAMPLES, Estimate, bootstrap_mean
from evaluation.report import markdown_table
from evaluation.speaker import cosine
from rumik_app.errors import RumikError

MIN_PAIRS = 3  # fewer clips than this have no rank correlation worth a number
MIN_DEFINED = 0.99  # share of bootstrap resamples with a rho needed for a CI
QUALITY_KEYS = ("dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak")  # what judge_clips writes per judge
SPEAKER_KEYS = ("speaker_sim",)
JUDGE_KEYS = QUALITY_KEYS + SPEAKER_KEYS
JUDGE_GROUPS = (("quality", QUALITY_KEYS), ("speaker", SPEAKER_KEYS))  # each judge and the keys it writes
BATCH_CLIPS = 16


@dataclass(frozen=True)
class Clip:
    """One campaign clip: its prompt and condition (system), the audio file, the voice asked for."""

    prompt: str
    condition: str
    path: str | os.PathLike
    voice: str | None = None


@dataclass(frozen=True)
class Correlation:
    """Spearman's rho with its bootstrap CI (None when undefined) over n pairs, and scipy's p-value."""

    rho: float | None
    low: float | None
    high: float | None
    n: int
    p_value: float | None = None

    def text(self) -> str:
        if self.rho is None:
            return f"n/a ({self.n} clips: too few, or no variation)"
        ci = f" [{self.low:.3f}, {self.high:.3f}]" if self.low is not None else ""
        return f"{self.rho:.3f}{ci} (n={self.n} clips, p={self.p_value:.3g})"


def _rank_correlation(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman's rho along `axis` (vectorised for the bootstrap): Pearson's r of average ranks."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x, axis=axis), rankdata(y, axis=axis)
    rx = rx - rx.mean(axis=axis, keepdims=True)
    ry = ry - ry.mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(axis=axis) / np.sqrt((rx ** 2).sum(axis=axis) * (ry ** 2).sum(axis=axis))


def spearman(x: Sequence[float], y: Sequence[float], confidence: float = CONFIDENCE,
             n_resamples: int = N_RESAMPLES, seed: int = DEFAULT_SEED) -> Correlation:
    """Spearman's rho of paired values [n] with a percentile bootstrap CI over pairs.

    A resample whose x or y values are all equal has no rho (NaN); in a small campaign with tied
    ratings a few of every 10,000 are, and one NaN would void scipy's interval. The CI is the
    same percentiles (`scipy.stats.quantile`, as `bootstrap` takes them) of the defined
    resamples, equal to scipy's when all are defined; None when fewer than MIN_DEFINED are."""
    from scipy.stats import DegenerateDataWarning, bootstrap, quantile, spearmanr

    x, y = np.asarray(list(x), dtype=np.float64), np.asarray(list(y), dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"spearman: {x.size} values against {y.size}")
    if x.size < MIN_PAIRS or np.all(x == x[0]) or np.all(y == y[0]):
        return Correlation(None, None, None, int(x.size))
    result = spearmanr(x, y)
    with warnings.catch_warnings():  # scipy's warning about NaN resamples: handled below
        warnings.simplefilter("ignore", DegenerateDataWarning)
        res = bootstrap((x, y), _rank_correlation, paired=True, vectorized=True, n_resamples=n_resamples,
                        confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    defined = dist[np.isfinite(dist)]
    alpha = (1 - confidence) / 2
    ci = (None, None)
    if defined.size >= MIN_DEFINED * dist.size:
        low, high = (float(v) for v in quantile(defined, np.array([alpha, 1 - alpha])))
        ci = (low, high) if math.isfinite(low) and math.isfinite(high) else (None, None)
    return Correlation(float(result.statistic), *ci, int(x.size), float(result.pvalue))


def human_scores(ratings: Iterable[tuple[str, str, float]]) -> dict[tuple[str, str], float]:
    """{(prompt, condition): mean score} from (prompt, condition, score) ratings (first hearings)."""
    by_clip: dict[tuple[str, str], list[float]] = defaultdict(list)
    for prompt, condition, score in ratings:
        if score is not None:
            by_clip[(prompt, condition)].append(float(score))
    return {k: float(np.mean(v)) for k, v in by_clip.items()}


def judge_clips(clips: Sequence[Clip], quality=None, speaker=None, references=None,
                batch_size: int = BATCH_CLIPS) -> dict[tuple[str, str], dict]:
    """{(prompt, condition): {"dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak", "speaker_sim"} (those asked
    for) or {"error": message}}. quality: `evaluation.quality.DNSMOS`; speaker: an
    `evaluation.speaker` encoder with `references` (`evaluation.voice_ref.VoiceReferences`)."""
    out: dict[tuple[str, str], dict] = {}
    for lo in range(0, len(clips), batch_size):
        part = clips[lo:lo + batch_size]
        try:
            values = _judge_batch(part, quality, speaker, references)
        except RumikError:  # find the clip at fault: judge them one by one
            values = [_judge_one(c, quality, speaker, references) for c in part]
        out.update({(c.prompt, c.condition): v for c, v in zip(part, values, strict=True)})
    return out


def _judge_batch(part: Sequence[Clip], quality, speaker, references) -> list[dict]:
    # each file decoded once at its own rate; each judge converts it once, to its own rate
    audio = [load_native(c.path, max_seconds=LOCAL_MAX_SECONDS) for c in part]
    values: list[dict] = [{} for _ in part]
    if quality is not None:
        for v, s in zip(values, quality.score(audio), strict=True):
            v.update(dnsmos_ovrl=s.ovrl, dnsmos_sig=s.sig, dnsmos_bak=s.bak)
    if speaker is not None:
        for v, c, emb in zip(values, part, speaker.embed(audio), strict=True):
            v["speaker_sim"] = cosine(references.get(c.voice), emb)
    return values


def _judge_one(clip: Clip, quality, speaker, references) -> dict:
    try:
        return _judge_batch([clip], quality, speaker, references)[0]
    except RumikError as exc:
        return {"error": str(exc)}


@dataclass
class SystemJudges:
    """One condition: the human score and each judge, means over prompts with CIs."""

    condition: str
    human: Estimate
    judges: dict[str, Estimate] = field(default_factory=dict)


@dataclass
class JudgeResults:
    systems: list[SystemJudges]
    agreement: Correlation  # human mean score vs DNSMOS OVRL, over clips
    errors: dict[tuple[str, str], str]

    def as_dict(self) -> dict:
        return {"systems": {s.condition: {"human_score": s.human.as_dict(),
                                          **{k: e.as_dict() for k, e in s.judges.items()}} for s in self.systems},
                "spearman_human_vs_dnsmos_ovrl": self.agreement.__dict__,
                "errors": {f"{p}/{c}": e for (p, c), e in self.errors.items()}}

    def markdown(self) -> str:
        keys = [k for k in JUDGE_KEYS if any(k in s.judges for s in self.systems)]
        lines = ["## Audio judges beside the listeners", "",
                 "Means over prompts with 95 % percentile bootstrap CIs (prompts resampled).", "",
                 markdown_table(["condition", "human score (1-5)", *keys],
                                [[s.condition, s.human.text(3), *(s.judges[k].text(3) if k in s.judges else "n/a"
                                                                  for k in keys)] for s in self.systems]),
                 "", f"Spearman's rho, clip mean human score vs DNSMOS OVRL [95 % CI, clips resampled in pairs]: "
                     f"{self.agreement.text()}"]
        if self.errors:
            lines += ["", f"{len(self.errors)} clip(s) could not be judged: "
                      + "; ".join(f"{p}/{c}: {e}" for (p, c), e in sorted(self.errors.items()))]
        return "\n".join(lines)


def judge_results(judged: dict[tuple[str, str], dict], human: dict[tuple[str, str], float],
                  seed: int = DEFAULT_SEED) -> JudgeResults:
    """Per-condition tables and the human-DNSMOS agreement (see the module docstring)."""
    conditions = sorted({c for _, c in judged} | {c for _, c in human})
    systems = []
    for cond in conditions:
        prompts = sorted({p for p, c in list(judged) + list(human) if c == cond})
        row = SystemJudges(cond, bootstrap_mean([human[(p, cond)] for p in prompts if (p, cond) in human], seed=seed))
        for key in JUDGE_KEYS:
            values = [judged[(p, cond)][key] for p in prompts if key in judged.get((p, cond), {})]
            if values:
                row.judges[key] = bootstrap_mean(values, seed=seed)
        systems.append(row)
    paired = [(human[k], v["dnsmos_ovrl"]) for k, v in sorted(judged.items()) if k in human and "dnsmos_ovrl" in v]
    agreement = spearman([h for h, _ in paired], [d for _, d in paired], seed=seed)
    errors = {k: v["error"] for k, v in judged.items() if "error" in v}
    return JudgeResults(systems, agreement, errors)
