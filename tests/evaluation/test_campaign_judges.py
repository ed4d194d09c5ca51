"""Audio judges beside a listening test (evaluation.campaign_judges): Spearman's rho of human
scores with DNSMOS OVRL and its bootstrap CI equal scipy's on a small synthetic campaign; the
per-system table; real clips judged end to end.

Run: .venv/bin/python -m pytest tests/evaluation/test_campaign_judges.py -q
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from evaluation.campaign_judges import Clip, human_scores, judge_clips, judge_results, spearman
from evaluation.listening_stats import bootstrap_mean
from evaluation.quality import DNSMOS
from evaluation.speaker import ResemblyzerEncoder
from evaluation.voice_ref import VoiceReferences

CONDITIONS = ("rumik", "espeak", "other")
PROMPTS = [f"p{i:02d}" for i in range(10)]
RATERS = ("asha", "ben", "chitra")


def synthetic_campaign(seed: int = 7):
    """Three raters score every clip 1-5 around a per-system level; DNSMOS follows the same level
    with its own noise, so the two agree, imperfectly."""
    rng = np.random.default_rng(seed)
    level = {"rumik": 4.0, "espeak": 2.2, "other": 3.1}
    ratings, judged = [], {}
    for cond in CONDITIONS:
        for p in PROMPTS:
            quality = level[cond] + rng.normal(0, 0.5)
            ratings += [(p, cond, int(np.clip(round(quality + rng.normal(0, 0.7)), 1, 5))) for _ in RATERS]
            judged[(p, cond)] = {"dnsmos_ovrl": float(np.clip(quality * 0.6 + 1.0 + rng.normal(0, 0.3), 1, 5)),
                                 "dnsmos_sig": 3.0, "dnsmos_bak": 3.5}
    return ratings, judged


def test_agreement_equals_scipy_spearman_and_its_bootstrap():
    ratings, judged = synthetic_campaign()
    human = human_scores(ratings)
    results = judge_results(judged, human, seed=3)
    keys = sorted(judged)
    x, y = np.array([human[k] for k in keys]), np.array([judged[k]["dnsmos_ovrl"] for k in keys])
    theirs = stats.spearmanr(x, y)
    assert results.agreement.rho == pytest.approx(theirs.statistic, abs=1e-12)
    assert results.agreement.p_value == pytest.approx(theirs.pvalue) and results.agreement.n == 30
    ours = spearman(x, y, n_resamples=999, seed=3)  # the function judge_results calls, fewer resamples
    boot = stats.bootstrap((x, y), lambda a, b: stats.spearmanr(a, b).statistic, paired=True, vectorized=False,
                           n_resamples=999, method="percentile", rng=np.random.default_rng(3))
    assert (ours.low, ours.high) == pytest.approx((boot.confidence_interval.low, boot.confidence_interval.high),
                                                  abs=1e-9)
    assert 0 < results.agreement.low < results.agreement.rho < results.agreement.high <= 1


def test_per_system_table_sits_beside_the_human_scores():
    ratings, judged = synthetic_campaign()
    human = human_scores(ratings)
    results = judge_results(judged, human)
    rumik = next(s for s in results.systems if s.condition == "rumik")
    assert rumik.human == bootstrap_mean([human[(p, "rumik")] for p in PROMPTS])
    assert rumik.judges["dnsmos_ovrl"] == bootstrap_mean([judged[(p, "rumik")]["dnsmos_ovrl"] for p in PROMPTS])
    assert rumik.judges["dnsmos_sig"].low == rumik.judges["dnsmos_sig"].high == 3.0  # constant values
    md = results.markdown()
    assert "| rumik |" in md and "Spearman's rho" in md and "speaker_sim" not in md
    assert set(results.as_dict()["systems"]) == set(CONDITIONS)


def test_tied_ratings_in_a_small_campaign_still_get_a_ci():
    """Eight clips whose mean ratings tie: some resamples are all one value (no rho, NaN), which
    voids scipy's own interval; ours is the same percentiles of the resamples that have a rho."""
    x = np.array([4.5, 2.0, 4.5, 2.5, 2.5, 4.5, 2.5, 1.5])
    y = np.random.default_rng(1).normal(3.0, 0.1, 8)
    ours = spearman(x, y, n_resamples=4999, seed=5)

    def rho(a, b):
        return stats.spearmanr(a, b).statistic if np.ptp(a) and np.ptp(b) else np.nan

    boot = stats.bootstrap((x, y), rho, paired=True, vectorized=False, n_resamples=4999, method="percentile",
                           rng=np.random.default_rng(5))
    dist = boot.bootstrap_distribution
    assert np.isnan(dist).any() and np.isnan(boot.confidence_interval.low)  # scipy's interval is void
    defined = dist[np.isfinite(dist)]
    assert (ours.low, ours.high) == pytest.approx(tuple(stats.quantile(defined, np.array([0.025, 0.975]))), abs=1e-9)
    assert ours.low < ours.rho < ours.high


def test_too_few_or_constant_pairs_have_no_correlation():
    assert spearman([1, 2], [2, 1]).rho is None
    assert spearman([3, 3, 3, 3], [1, 2, 3, 4]).rho is None and "no variation" in spearman([3] * 4, [1, 2, 3, 4]).text()
    with pytest.raises(ValueError):
        spearman([1, 2, 3], [1, 2])


def test_real_clips_are_judged(speech_clips, tmp_path):
    encoder = ResemblyzerEncoder()
    clips = [Clip("p1", "f5", speech_clips["f5_two"]), Clip("p1", "m3", speech_clips["m3_two"]),
             Clip("p2", "f5", tmp_path / "missing.wav")]
    judged = judge_clips(clips, quality=DNSMOS(threads=1, max_windows=1, p808=False), speaker=encoder,
                         references=VoiceReferences(encoder, clip=speech_clips["f5_one"]))
    assert 1 <= judged[("p1", "f5")]["dnsmos_ovrl"] <= 5
    assert judged[("p1", "f5")]["speaker_sim"] > judged[("p1", "m3")]["speaker_sim"]
    assert "no such audio file" in judged[("p2", "f5")]["error"]  # one bad clip, the others judged
    results = judge_results(judged, {("p1", "f5"): 4.0, ("p1", "m3"): 2.0})
    assert results.errors and results.agreement.rho is None  # two clips: too few to rank
