"""Statistics of listening tests (absolute ratings, comparisons against a reference, MUSHRA-style
pages with a hidden reference) over rating rows.

Library module (no command line), pure: one dict per rated stimulus, the `campaign_scores` rows of
`webapp.campaign.data.store` (keys: rater, prompt_id, item_id, entry_id, kind, role, condition,
reference, score, ...); no webapp import and no design names: a `Scoring` says what the scores
are (a campaign design's record holds one)::

    from evaluation.listening_screening import screen
    from evaluation.listening_tests import Scoring, analyse, mushra_boxplot, publication_table, results_numbers
    mos = Scoring("mos", "MOS", "ordinal", domain=(1, 2, 3, 4, 5))
    analysis = analyse(rows, mos, screening=screen(rows, "p808", "mos"), seed=0)
    print(publication_table(analysis))        # markdown: condition, N ratings, N raters, score ± CI, letters
    numbers = results_numbers(analysis)       # JSON-able dict of every figure
    mushra_boxplot(mushra_rows, "out/mushra.png")

Figures: `p808_ci` is ITU-T P.808's MOS interval (mean ± t(0.975, N-1)·s/√N over the N ratings);
`two_way_bootstrap` resamples prompts and raters independently (a rating counts as often as its
prompt times its rater were drawn), so the interval reflects both sources of variation.
Conditions are compared pairwise with the Wilcoxon signed-rank test (`scipy.stats.wilcoxon`,
zero_method "pratt": a zero difference, or a CMOS "about the same", is an answer; Pratt (1959) ranks
it with the others and then leaves its rank out of the sums, where "wilcox" drops the zeros before
ranking, as if they had never been given), paired by rating unit,
Holm-corrected (written out below: scipy's `false_discovery_control` has only BH/BY), and shown as
a compact letter display (Piepho 2004: conditions sharing a letter are not significantly different).
Agreement is Krippendorff's alpha (`evaluation.listening_stats.krippendorff_alpha`).
Only test trials (kind "test") count; gold and trap trials are for screening.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import string
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from evaluation.listening_screening import Screening, apply_screening
from evaluation.listening_stats import CONFIDENCE, DEFAULT_SEED, LEVELS, Estimate, krippendorff_alpha
from evaluation.report import markdown_table
from rumik_app.errors import RumikError

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_CHUNK_CELLS = 4_000_000  # resamples x ratings weights held at once (32 MB of int64)
SIGNIFICANCE = 0.05
ZERO_METHOD = "pratt"
# The two-sided exact signed-rank test cannot reach p < 0.05 below 6 pairs (2/2^5 = 0.0625): with
# fewer paired units the pairs are made of prompt means instead.
MIN_PAIRED_UNITS = 6
TEST, REFERENCE, ANCHOR = "test", "reference", "anchor"
HIDDEN_ROLES = (TEST, REFERENCE, ANCHOR)  # a MUSHRA-style page rates its hidden reference and anchor too
LETTERS = string.ascii_lowercase + string.ascii_uppercase


class ListeningTestError(RumikError, ValueError):
    """Rows or arguments the listening-test statistics cannot use; the message names the fix."""


@dataclass(frozen=True)
class Scoring:
    """What the statistics need to know about a test's scores (a campaign design's record holds one).

    name: the test, in `results_numbers` ("mos"); label: the score's name in tables ("MOS");
    level, domain: Krippendorff's level of measurement and, for "ordinal", the ordered scale;
    against_reference: each score rates a test condition against a reference (CMOS): a table per
    (condition, reference) with a Wilcoxon test against 0 instead of letters; roles: the roles
    rated as conditions (a MUSHRA page adds its hidden reference and anchor); paired_by_trial:
    every condition is on one page, so pairwise tests pair per trial, not per prompt and rater.
    """

    name: str
    label: str
    level: str
    domain: tuple[float, ...] | None = None
    against_reference: bool = False
    roles: tuple[str, ...] = (TEST,)
    paired_by_trial: bool = False

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ListeningTestError(f"Scoring {self.name!r}: level {self.level!r}; use one of {', '.join(LEVELS)}.")
        if not set(self.roles) <= set(HIDDEN_ROLES) or TEST not in self.roles:
            raise ListeningTestError(f"Scoring {self.name!r}: roles {self.roles!r}; rate {TEST!r} and optionally "
                                     f"{REFERENCE!r} and {ANCHOR!r}.")


@dataclass(frozen=True)
class ConditionScore:
    """One condition's figures: `ci` the P.808 t interval, `bootstrap` the two-way bootstrap one."""

    condition: str
    role: str  # "test", or "reference"/"anchor" in MUSHRA
    n_ratings: int
    n_raters: int
    mean: float | None
    ci: Estimate
    bootstrap: Estimate
    median: float | None
    q25: float | None
    q75: float | None
    letters: str = ""

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ci"], d["bootstrap"] = self.ci.as_dict(), self.bootstrap.as_dict()
        return d


@dataclass(frozen=True)
class CmosScore:
    """A test condition against its reference: CMOS mean with the P.808-style t interval, and the
    Wilcoxon signed-rank p-value of the ratings against 0."""

    condition: str
    reference: str
    n_ratings: int
    n_raters: int
    ci: Estimate
    bootstrap: Estimate
    p_wilcoxon: float
    p_holm: float | None = None  # p_wilcoxon Holm-corrected over the campaign's test conditions

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ci"], d["bootstrap"] = self.ci.as_dict(), self.bootstrap.as_dict()
        return d


@dataclass(frozen=True)
class PairTest:
    """Wilcoxon signed-rank test of a - b over `n_pairs` paired units (`paired_by`), Holm-corrected."""

    a: str
    b: str
    n_pairs: int
    paired_by: str  # "trial", "prompt & rater" or "prompt means"
    p_raw: float
    p_holm: float
    significant: bool


@dataclass(frozen=True)
class Analysis:
    """Everything `publication_table` and `results_numbers` print, for one campaign."""

    scoring: Scoring
    scores: list  # ConditionScore (mos, smos, mushra) or CmosScore (cmos)
    pairs: list[PairTest]
    alpha: float | None
    n_ratings: int
    n_raters: int
    screening: Screening | None = None
    seed: int = DEFAULT_SEED


def trial_rows(rows: Iterable[Mapping], roles: Sequence[str] = ("test",)) -> list[Mapping]:
    """The rows of test trials (kind "test") whose rated clip has one of `roles`."""
    return [r for r in rows if r["kind"] == "test" and r["role"] in roles]


def p808_ci(scores: Iterable[float], confidence: float = CONFIDENCE) -> Estimate:
    """Mean of the N ratings with ITU-T P.808's interval mean ± t((1+confidence)/2, N-1)·s/√N,
    s the sample standard deviation (ddof=1); low/high None when N < 2."""
    from scipy.stats import t

    x = np.asarray(list(scores), dtype=np.float64)
    if x.size == 0:
        return Estimate(None, None, None, 0)
    mean = float(x.mean())
    if x.size < 2:
        return Estimate(mean, None, None, 1)
    half = float(t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return Estimate(mean, mean - half, mean + half, int(x.size))


def _codes(labels: Sequence) -> np.ndarray:
    """Labels -> 0-based integer codes."""
    return np.unique(np.asarray([str(v) for v in labels]), return_inverse=True)[1].reshape(-1)


def two_way_resample_means(rows: Sequence[Mapping], value: str = "score", seed: int = DEFAULT_SEED,
                           n_resamples: int = BOOTSTRAP_RESAMPLES) -> np.ndarray:
    """[<= n_resamples] bootstrap means of `value`: each resample draws P of the P prompts and R of
    the R raters with replacement, independently (seeded `numpy.random.Generator`), and a rating
    counts (draws of its prompt) x (draws of its rater) times. A resample in which no drawn
    prompt-rater pair has a rating has no mean and is left out. Rows whose `value` is None are skipped."""
    rated = [r for r in rows if r.get(value) is not None]
    if not rated:
        return np.empty(0)
    v = np.array([float(r[value]) for r in rated])
    prompt, rater = _codes([r["prompt_id"] for r in rated]), _codes([r["rater"] for r in rated])
    n_p, n_r = int(prompt.max()) + 1, int(rater.max()) + 1
    rng = np.random.default_rng(seed)
    drawn_p = rng.multinomial(n_p, np.full(n_p, 1 / n_p), size=n_resamples)  # [B, P] draws of each prompt
    drawn_r = rng.multinomial(n_r, np.full(n_r, 1 / n_r), size=n_resamples)  # [B, R]
    means = np.empty(n_resamples)
    step = max(1, BOOTSTRAP_CHUNK_CELLS // v.size)
    for s in range(0, n_resamples, step):
        w = drawn_p[s:s + step, prompt] * drawn_r[s:s + step, rater]  # [b, N] multiplicity of each rating
        with np.errstate(invalid="ignore", divide="ignore"):
            means[s:s + step] = (w @ v) / w.sum(axis=1)
    return means[np.isfinite(means)]


def two_way_bootstrap(rows: Sequence[Mapping], value: str = "score", seed: int = DEFAULT_SEED,
                      n_resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE) -> Estimate:
    """Mean of `value` over `rows` with the percentile interval of `two_way_resample_means`
    (prompts and raters resampled independently); n is the number of ratings. One rating: no
    interval; all values equal: the exact interval (v, v)."""
    v = np.array([float(r[value]) for r in rows if r.get(value) is not None])
    if v.size == 0:
        return Estimate(None, None, None, 0)
    mean = float(v.mean())
    if v.size < 2:
        return Estimate(mean, None, None, 1)
    if np.all(v == v[0]):
        return Estimate(mean, mean, mean, int(v.size))
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(two_way_resample_means(rows, value, seed, n_resamples), [tail, 100 - tail])
    return Estimate(mean, float(low), float(high), int(v.size))


def wilcoxon_p(differences: Iterable[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value of `differences` against 0 (`scipy.stats.wilcoxon`,
    zero_method ZERO_METHOD, scipy's default method: exact for small samples without ties);
    1.0 when there is nothing to test (no data or every difference 0)."""
    from scipy.stats import wilcoxon

    d = np.asarray(list(differences), dtype=np.float64)
    if d.size == 0 or not np.any(d):
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(wilcoxon(d, zero_method=ZERO_METHOD).pvalue)
    return p if math.isfinite(p) else 1.0


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: sorted ascending, the k-th (0-based)
    of m becomes max over j <= k of min(1, (m - j)·p_(j))."""
    p = np.asarray(pvalues, dtype=np.float64)
    if p.size == 0:
        return []
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((p.size - np.arange(p.size)) * p[order]))
    out = np.empty_like(p)
    out[order] = adjusted
    return out.tolist()


def compact_letters(conditions: Sequence[str], different: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Compact letter display (Piepho 2004, insert-and-absorb): `conditions` in display order (best
    mean first), `different` the significantly different pairs. Two conditions share a letter iff
    they are not significantly different; letters run a, b, ... from the first condition."""
    pos = {c: i for i, c in enumerate(conditions)}
    pairs = {frozenset(p) for p in different}
    if any(len(p) != 2 or not p <= pos.keys() for p in pairs):
        raise ListeningTestError("compact_letters: every different pair must name two of the conditions given.")
    columns = [frozenset(conditions)] if conditions else []
    for a, b in sorted((tuple(sorted(p, key=pos.get)) for p in pairs), key=lambda ab: (pos[ab[0]], pos[ab[1]])):
        split = []
        for col in columns:  # insert: a column holding both is split into one without a, one without b
            split.extend([col - {a}, col - {b}] if a in col and b in col else [col])
        columns = [c for c in set(split) if not any(c < other for other in split)]  # absorb
    columns.sort(key=lambda col: sorted(pos[c] for c in col))
    if len(columns) > len(LETTERS):
        raise ListeningTestError(f"compact_letters: {len(columns)} letter groups; at most {len(LETTERS)} fit.")
    return {c: "".join(LETTERS[k] for k, col in enumerate(columns) if c in col) for c in conditions}


def _unit_means(rows: Iterable[Mapping], unit: Callable[[Mapping], object]) -> dict[object, float]:
    """{unit: mean score} of the rows."""
    acc: dict[object, list[float]] = defaultdict(list)
    for r in rows:
        acc[unit(r)].append(float(r["score"]))
    return {u: float(np.mean(v)) for u, v in acc.items()}


def paired_differences(rows: Sequence[Mapping], a: str, b: str, by_trial: bool = False) -> tuple[np.ndarray, str]:
    """(score of a - score of b per paired unit, what pairs them): a trial (`by_trial`: every
    condition is on one page), else a (prompt, rater); with fewer than MIN_PAIRED_UNITS such units,
    the prompt means."""
    ra = [r for r in rows if r["condition"] == a]
    rb = [r for r in rows if r["condition"] == b]
    if by_trial:
        unit, label = (lambda r: r["entry_id"]), "trial"
    else:
        unit, label = (lambda r: (r["prompt_id"], r["rater"])), "prompt & rater"
    ma, mb = _unit_means(ra, unit), _unit_means(rb, unit)
    if len(ma.keys() & mb.keys()) < MIN_PAIRED_UNITS:
        label = "prompt means"
        ma, mb = _unit_means(ra, lambda r: r["prompt_id"]), _unit_means(rb, lambda r: r["prompt_id"])
    common = sorted(ma.keys() & mb.keys(), key=str)
    return np.array([ma[u] - mb[u] for u in common]), label


def pairwise_tests(rows: Sequence[Mapping], conditions: Sequence[str], by_trial: bool = False,
                   alpha: float = SIGNIFICANCE) -> list[PairTest]:
    """Every pair of `conditions` (test rows), Wilcoxon signed-rank on paired differences
    (`paired_differences`), Holm-corrected."""
    rows = trial_rows(rows, HIDDEN_ROLES)
    raw = []
    for a, b in itertools.combinations(conditions, 2):
        d, by = paired_differences(rows, a, b, by_trial)
        raw.append((a, b, d.size, by, wilcoxon_p(d)))
    adjusted = holm([t[4] for t in raw])
    return [PairTest(a, b, n, by, p, ph, ph < alpha) for (a, b, n, by, p), ph in zip(raw, adjusted, strict=True)]


def _score(condition: str, role: str, rows: Sequence[Mapping], seed: int, n_resamples: int) -> ConditionScore:
    x = np.array([float(r["score"]) for r in rows])
    q25, med, q75 = (float(q) for q in np.percentile(x, [25, 50, 75])) if x.size else (None, None, None)
    ci = p808_ci(x)
    return ConditionScore(condition, role, int(x.size), len({r["rater"] for r in rows}), ci.mean, ci,
                          two_way_bootstrap(rows, seed=seed, n_resamples=n_resamples), med, q25, q75)


def _with_letters(scores: list[ConditionScore], pairs: Sequence[PairTest]) -> list[ConditionScore]:
    """Scores sorted by mean (best first), test conditions given their compact letters."""
    scores = sorted(scores, key=lambda s: -math.inf if s.mean is None else -s.mean)
    tested = [s.condition for s in scores if s.role == "test"]
    letters = compact_letters(tested, [(p.a, p.b) for p in pairs if p.significant])
    return [replace(s, letters=letters.get(s.condition, "")) for s in scores]


def mos_table(rows: Sequence[Mapping], conditions: Sequence[str] | None = None, seed: int = DEFAULT_SEED,
              n_resamples: int = BOOTSTRAP_RESAMPLES, by_trial: bool = False) -> list[ConditionScore]:
    """A mean opinion score per test condition (all in the rows when `conditions` is None), best
    mean first, with the P.808 and two-way bootstrap intervals and the compact letters of the
    Holm-corrected pairwise Wilcoxon tests (pairs by prompt & rater, or by trial)."""
    rows = trial_rows(rows)
    conditions = sorted({r["condition"] for r in rows}) if conditions is None else list(conditions)
    by = defaultdict(list)
    for r in rows:
        by[r["condition"]].append(r)
    scores = [_score(c, "test", by[c], seed, n_resamples) for c in conditions]
    return _with_letters(scores, pairwise_tests(rows, conditions, by_trial))


def cmos_table(rows: Sequence[Mapping], seed: int = DEFAULT_SEED,
               n_resamples: int = BOOTSTRAP_RESAMPLES) -> list[CmosScore]:
    """CMOS per (test condition, reference), best mean first: mean with the P.808-style t interval
    and the two-way bootstrap one, and the Wilcoxon signed-rank p-value of the ratings against 0."""
    by = defaultdict(list)
    for r in trial_rows(rows):
        by[(r["condition"], r["reference"])].append(r)
    out = []
    for (cond, ref), rs in sorted(by.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        x = [float(r["score"]) for r in rs]
        out.append(CmosScore(cond, ref, len(x), len({r["rater"] for r in rs}), p808_ci(x),
                             two_way_bootstrap(rs, seed=seed, n_resamples=n_resamples), wilcoxon_p(x)))
    corrected = holm([s.p_wilcoxon for s in out])  # several conditions each tested against 0
    out = [dataclasses.replace(s, p_holm=p) for s, p in zip(out, corrected, strict=True)]
    return sorted(out, key=lambda s: -s.ci.mean)


def mushra_table(rows: Sequence[Mapping], seed: int = DEFAULT_SEED, n_resamples: int = BOOTSTRAP_RESAMPLES,
                 roles: Sequence[str] = HIDDEN_ROLES) -> list[ConditionScore]:
    """MUSHRA per condition, hidden reference and anchor (`roles`) included: mean, t interval,
    median, IQR (25th/75th percentile), N; test conditions lettered by Holm-corrected Wilcoxon
    tests paired by trial."""
    rows = trial_rows(rows, roles)
    by = defaultdict(list)
    for r in rows:
        by[(r["condition"], r["role"])].append(r)
    scores = [_score(c, role, rs, seed, n_resamples) for (c, role), rs in sorted(by.items())]
    tested = sorted(s.condition for s in scores if s.role == "test")
    return _with_letters(scores, pairwise_tests(rows, tested, by_trial=True))


def mushra_boxplot(rows: Sequence[Mapping], path: str | Path, title: str = "MUSHRA scores") -> Path:
    """PNG box plot (matplotlib, Agg) of the MUSHRA scores per condition, best median first, hidden
    reference and anchor included; the house chart style of `evaluation.charts`. Returns the path."""
    from evaluation.charts import FIGURE_HEIGHT_IN, MAX_FIGURE_WIDTH_IN, MIN_FIGURE_WIDTH_IN, _finish, plt

    by = defaultdict(list)
    for r in trial_rows(rows, HIDDEN_ROLES):
        by[r["condition"]].append(float(r["score"]))
    if not by:
        raise ListeningTestError("mushra_boxplot: no MUSHRA test ratings; pass the campaign's rating rows.")
    names = sorted(by, key=lambda c: -float(np.median(by[c])))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    width = min(MAX_FIGURE_WIDTH_IN, max(MIN_FIGURE_WIDTH_IN, 1.0 * len(names) + 2))
    fig, ax = plt.subplots(figsize=(width, FIGURE_HEIGHT_IN))
    try:
        ax.boxplot([by[c] for c in names], tick_labels=names, showmeans=True)
        if len(names) > 3:
            plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
        _finish(fig, ax, path, title, "score (0-100)", (0, 100))
    finally:
        plt.close(fig)
    return path


def agreement(rows: Sequence[Mapping], level: str, domain: Sequence[float] | None = None) -> float | None:
    """Krippendorff's alpha of the test ratings at `level` ("ordinal" over the ordered `domain`,
    "interval", ...): unit = stimulus (item_id, condition), coder = rater. A rater's repeat of a
    stimulus: the first rating counts. None when alpha is undefined."""
    if level not in LEVELS:
        raise ListeningTestError(f"agreement: level {level!r}; use one of {', '.join(LEVELS)}.")
    ratings: dict[str, dict[tuple, float]] = defaultdict(dict)
    for r in trial_rows(rows):
        ratings[r["rater"]].setdefault((r["item_id"], r["condition"]), float(r["score"]))
    return krippendorff_alpha(ratings, level, value_domain=domain)


def analyse(rows: Sequence[Mapping], scoring: Scoring, screening: Screening | None = None, seed: int = DEFAULT_SEED,
            n_resamples: int = BOOTSTRAP_RESAMPLES) -> Analysis:
    """The scoring's table, pairwise tests and agreement over the rows the screening keeps (all
    rows when `screening` is None)."""
    if not isinstance(scoring, Scoring):
        raise ListeningTestError(f"analyse: give a Scoring (what the scores are), not {scoring!r}.")
    kept = list(rows) if screening is None else apply_screening(rows, screening)
    if scoring.against_reference:
        scores, pairs = cmos_table(kept, seed, n_resamples), []
    else:
        if scoring.roles == (TEST,):
            scores = mos_table(kept, seed=seed, n_resamples=n_resamples, by_trial=scoring.paired_by_trial)
        else:
            scores = mushra_table(kept, seed, n_resamples, roles=scoring.roles)
        pairs = pairwise_tests(kept, sorted(s.condition for s in scores if s.role == TEST), scoring.paired_by_trial)
    counted = trial_rows(kept, scoring.roles)
    return Analysis(scoring, scores, pairs, agreement(kept, scoring.level, scoring.domain), len(counted),
                    len({r["rater"] for r in counted}), screening, seed)


def _pm(est: Estimate, digits: int) -> str:
    """"3.41 ± 0.12" (the half-width of a symmetric interval); "n/a" without data."""
    if est.mean is None:
        return "n/a"
    return f"{est.mean:.{digits}f}" if est.low is None else f"{est.mean:.{digits}f} ± {est.high - est.mean:.{digits}f}"


def publication_table(analysis: Analysis, digits: int = 2) -> str:
    """Markdown table over the screened rows: condition, N ratings, N raters, score ± 95 % CI
    (P.808 t interval), letters; against a reference the condition is "test vs reference" and the
    last columns the Wilcoxon p-value against 0 (raw and Holm-corrected) instead of letters."""
    if analysis.scoring.against_reference:
        return markdown_table(["condition", "N ratings", "N raters", f"{analysis.scoring.label} ± 95 % CI",
                               "p (Wilcoxon vs 0)",
                               "p (Holm)"],
                              [[f"{s.condition} vs {s.reference}", s.n_ratings, s.n_raters, _pm(s.ci, digits),
                                f"{s.p_wilcoxon:.3g}", f"{s.p_holm:.3g}"] for s in analysis.scores])
    return markdown_table(["condition", "N ratings", "N raters", f"{analysis.scoring.label} ± 95 % CI", "letters"],
                          [[s.condition, s.n_ratings, s.n_raters, _pm(s.ci, digits), s.letters]
                           for s in analysis.scores])


def results_numbers(analysis: Analysis) -> dict:
    """Every figure of the analysis as a JSON-able dict."""
    return {"design": analysis.scoring.name, "seed": analysis.seed, "confidence": CONFIDENCE,
            "n_ratings": analysis.n_ratings, "n_raters": analysis.n_raters,
            "screening": None if analysis.screening is None else analysis.screening.as_dict(),
            "conditions": [s.as_dict() for s in analysis.scores],
            "pairs": [asdict(p) for p in analysis.pairs],
            "significance": SIGNIFICANCE, "zero_method": ZERO_METHOD,
            "alpha": {"value": analysis.alpha, "level": analysis.scoring.level}}
