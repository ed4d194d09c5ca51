"""Statistics of listening tests: bootstrap confidence intervals and Krippendorff's alpha.

Library module (no command line), used by the annotation campaigns (`webapp.campaign`)::

    from evaluation.listening_stats import bootstrap_mean, krippendorff_alpha
    est = bootstrap_mean([3.5, 4.0, 2.5, 4.5])       # Estimate(mean, low, high, n): 95 % percentile CI
    alpha = krippendorff_alpha({"asha": {"u1": 4, "u2": 2}, "ben": {"u1": 5, "u2": 2}}, "ordinal",
                               value_domain=[1, 2, 3, 4, 5])

Both wrap well-kept libraries: `scipy.stats.bootstrap` (percentile method, a seeded NumPy
generator, so a report reproduces exactly) and the `krippendorff` package (pinned in
pyproject.toml). The caller chooses the resampling unit by what it passes: the campaign
results pass one value per prompt (a prompt's mean score, or its win rate), so the interval
reflects the variation between prompts, not only between clicks.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 9999
DEFAULT_SEED = 0
BOOTSTRAP_METHOD = "percentile"
LEVELS = ("nominal", "ordinal", "interval", "ratio")


@dataclass(frozen=True)
class Estimate:
    """A mean with its bootstrap confidence interval; low/high are None when n < 2."""

    mean: float | None
    low: float | None
    high: float | None
    n: int  # observations (resampling units) behind the estimate

    def as_dict(self) -> dict:
        return {"mean": self.mean, "ci_low": self.low, "ci_high": self.high, "n": self.n}

    def text(self, digits: int = 2) -> str:
        """"3.41 [3.02, 3.77] (n=20)"; "n/a" without data."""
        if self.mean is None:
            return "n/a"
        ci = f" [{self.low:.{digits}f}, {self.high:.{digits}f}]" if self.low is not None else ""
        return f"{self.mean:.{digits}f}{ci} (n={self.n})"


def bootstrap_mean(values: Sequence[float], confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES,
                   seed: int = DEFAULT_SEED, method: str = BOOTSTRAP_METHOD) -> Estimate:
    """Mean of `values` with a two-sided bootstrap CI (`scipy.stats.bootstrap`).

    values: [n] floats (NaN not allowed). All values equal gives the exact interval (v, v)
    (the bootstrap distribution is a point, where scipy would warn and return NaN).
    """
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        return Estimate(None, None, None, 0)
    if not np.all(np.isfinite(x)):
        raise ValueError("bootstrap_mean: values must be finite numbers")
    mean = float(x.mean())
    if x.size < 2:
        return Estimate(mean, None, None, 1)
    if np.all(x == x[0]):
        return Estimate(mean, mean, mean, int(x.size))
    from scipy.stats import bootstrap

    res = bootstrap((x,), np.mean, n_resamples=n_resamples, confidence_level=confidence, method=method,
                    vectorized=True, rng=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return Estimate(mean, low, high, int(x.size))


def reliability_matrix(ratings: Mapping[Hashable, Mapping[Hashable, object]],
                       codes: Mapping[object, float] | None = None) -> tuple[np.ndarray, list, list]:
    """{coder: {unit: value}} -> ([coders, units] float matrix with NaN for missing, coders, units).

    `codes` maps non-numeric values (e.g. preference labels) to numbers; values missing from
    it are an error.
    """
    coders = sorted(ratings, key=str)
    units = sorted({u for per in ratings.values() for u in per}, key=str)
    col = {u: j for j, u in enumerate(units)}
    m = np.full((len(coders), len(units)), np.nan)
    for i, c in enumerate(coders):
        for u, v in ratings[c].items():
            if v is None:
                continue
            m[i, col[u]] = codes[v] if codes is not None else float(v)
    return m, coders, units


def pairable_units(matrix: np.ndarray) -> int:
    """Units with at least two values (the only ones alpha uses)."""
    return int((np.sum(~np.isnan(matrix), axis=0) >= 2).sum()) if matrix.size else 0


def krippendorff_alpha(ratings: Mapping[Hashable, Mapping[Hashable, object]], level: str,
                       value_domain: Sequence | None = None) -> float | None:
    """Krippendorff's alpha of {coder: {unit: value}} at `level` ("nominal", "ordinal", ...).

    Nominal values may be any hashable (coded to integers here); ordinal/interval values must
    be numbers, `value_domain` their ordered scale (ordinal alpha depends on the categories
    in between, e.g. [1, 2, 3, 4, 5]). None when alpha is undefined: no unit rated twice, or
    only one value ever given (no disagreement is expected, so none can be measured).
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    import krippendorff

    codes = None
    domain = None if value_domain is None else list(value_domain)
    if level == "nominal":
        seen = sorted({v for per in ratings.values() for v in per.values() if v is not None}, key=str)
        codes = {v: float(k) for k, v in enumerate(seen)}
        domain = None if domain is None else [codes[v] for v in domain if v in codes] or None
    matrix, _, _ = reliability_matrix(ratings, codes)
    if pairable_units(matrix) == 0:
        return None
    values = matrix[:, np.sum(~np.isnan(matrix), axis=0) >= 2]
    present = np.unique(values[~np.isnan(values)])
    if present.size < 2:
        return None
    if domain is not None:
        domain = sorted(set(domain) | set(present.tolist()))
    try:
        a = float(krippendorff.alpha(reliability_data=matrix, value_domain=domain, level_of_measurement=level))
    except ValueError:  # e.g. a single value in the domain
        return None
    return a if math.isfinite(a) else None
