"""IndicEmo: aggregate blind 1-5 expressive-delivery ratings across judges (docs/ARCHITECTURE.md §8).

Command line::

    python -m evaluation.indicemo aggregate --judgments J.jsonl [MORE.jsonl ...] [--csv OUT.csv]

Python API (used by the app's results view): `aggregate(records) -> IndicEmoResult`, with
`.markdown()`, `.csv_headers()`, `.csv_rows()`.

Each judgment line: `prompt_id, judge_id, system_id, expression_quality_score,
target_delivery` and optionally `strict_common_set`. Rules:

- Systems = every `system_id` in the input; judges = every `judge_id`.
- A score is valid when it is a finite number (JSON number, not a boolean, or a string
  that parses as one) with 1 <= score <= 5; fractional scores are allowed. If the same
  (prompt, judge, system) appears more than once, the last line wins (a re-rating
  replaces the earlier one).
- A prompt is valid for a judge when that judge gave a valid score to every system.
  A prompt counts only if it is valid for every judge (the common set); otherwise it is
  excluded, with the reason listed in the report.
- `strict_common_set`: the producer's mark that a prompt belongs to the common set. If any
  line of a prompt says false (false, 0, "false", "no"), the prompt is excluded; absent or
  true changes nothing. The validity rule above is applied either way.
- `target_delivery` is matched case-insensitively to Happy, Sad, Angry, Excited,
  Professional; it must be the same on every line of a prompt (else an error).
- Consensus = median over judges per (prompt, system) (mean of the two middle scores for
  an even number of judges). Per delivery: mean over its valid prompts. "All five" and
  "four emotions" (Professional excluded) are equal-weight means over the deliveries that
  have at least one valid prompt; missing deliveries are named in the report.
- Mean rank and win rate per system over all valid prompts (each prompt weighs the
  same): rank 1 = highest consensus, tied systems share the mean of their ranks (a 2-way
  tie for first gives both 1.5), and the win of a prompt is split equally between the
  systems tied at the top (0.5 each for a 2-way tie).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean, median

from evaluation.report import markdown_table, read_jsonl, write_csv
from rumik_app.errors import RumikError, report_user_error

DELIVERIES = ("Happy", "Sad", "Angry", "Excited", "Professional")
EMOTIONS = ("Happy", "Sad", "Angry", "Excited")
MIN_SCORE, MAX_SCORE = 1.0, 5.0
FALSE_FLAGS = {"false", "0", "no"}
MAX_EXCLUDED_SHOWN = 20
# The score itself may be missing or null: that makes the judgment invalid, not the file.
REQUIRED_FIELDS = ("prompt_id", "judge_id", "system_id", "target_delivery")
_DELIVERY_BY_KEY = {d.casefold(): d for d in DELIVERIES}


def parse_score(value: object) -> float | None:
    """The score as a float if valid (finite, 1..5), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if MIN_SCORE <= value <= MAX_SCORE else None


def canonical_delivery(name: object) -> str:
    """`"happy"`, `" HAPPY "` -> `"Happy"`; ValueError for anything else."""
    found = _DELIVERY_BY_KEY.get(str(name).strip().casefold())
    if found is None:
        raise ValueError(f"Unknown target_delivery {name!r}; expected one of {', '.join(DELIVERIES)}.")
    return found


def _is_false(flag: object) -> bool:
    if isinstance(flag, str):
        return flag.strip().lower() in FALSE_FLAGS
    return flag is not None and not flag


@dataclass(frozen=True)
class SystemResult:
    system: str
    per_delivery: dict[str, float | None]  # None: no valid prompt of that delivery
    all_five: float | None
    four_emotions: float | None
    mean_rank: float | None
    win_rate: float | None


@dataclass(frozen=True)
class IndicEmoResult:
    systems: list[SystemResult]  # best "all five" first
    judges: list[str]
    valid_prompts: list[str]
    excluded: dict[str, str]  # prompt_id -> reason
    prompts_per_delivery: dict[str, int]
    consensus: dict[tuple[str, str], float]  # (prompt_id, system_id) -> median score

    @property
    def missing_deliveries(self) -> list[str]:
        return [d for d in DELIVERIES if not self.prompts_per_delivery[d]]

    def csv_headers(self) -> list[str]:
        return ["system", *DELIVERIES, "all_five", "four_emotions", "mean_rank", "win_rate", "prompts"]

    def csv_rows(self) -> list[list[object]]:
        n = len(self.valid_prompts)
        return [
            [
                s.system,
                *(s.per_delivery[d] for d in DELIVERIES),
                s.all_five,
                s.four_emotions,
                s.mean_rank,
                s.win_rate,
                n,
            ]
            for s in self.systems
        ]

    def markdown(self) -> str:
        total = len(self.valid_prompts) + len(self.excluded)
        head = ["system", *DELIVERIES, "all five", "four emotions", "mean rank", "win rate"]
        rows = [row[:-1] for row in self.csv_rows()]
        counts = ", ".join(f"{d} {self.prompts_per_delivery[d]}" for d in DELIVERIES)
        lines = [
            "## IndicEmo",
            "",
            f"{len(self.judges)} judge(s); {len(self.valid_prompts)} of {total} prompts valid for every judge "
            f"({counts}).",
            "Consensus = median over judges; delivery means, then equal-weight means over deliveries.",
            "",
            markdown_table(head, rows),
        ]
        if self.missing_deliveries:
            lines += ["", f"No valid prompt for: {', '.join(self.missing_deliveries)} (left out of the means)."]
        if self.excluded:
            shown = sorted(self.excluded.items())[:MAX_EXCLUDED_SHOWN]
            lines += ["", f"Excluded prompts ({len(self.excluded)}):"] + [f"- {pid}: {why}" for pid, why in shown]
            if len(self.excluded) > MAX_EXCLUDED_SHOWN:
                lines.append(f"- ... and {len(self.excluded) - MAX_EXCLUDED_SHOWN} more")
        return "\n".join(lines)


def _ranks(scores: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """Average ranks (1 = best) and split wins for one prompt."""
    ranks = {}
    for s, v in scores.items():
        higher = sum(o > v for o in scores.values())
        tied = sum(o == v for o in scores.values())
        ranks[s] = higher + (tied + 1) / 2
    top = max(scores.values())
    winners = [s for s, v in scores.items() if v == top]
    return ranks, {s: (1 / len(winners) if s in winners else 0.0) for s in scores}


def _mean_or_none(values: Sequence[float]) -> float | None:
    return mean(values) if values else None


def aggregate(records: Iterable[Mapping]) -> IndicEmoResult:
    """Aggregate judgment records (dicts with the fields in the module docstring)."""
    scores: dict[tuple[str, str, str], object] = {}
    delivery: dict[str, str] = {}
    flagged_out: set[str] = set()
    systems: dict[str, None] = {}
    judges: dict[str, None] = {}
    for n, r in enumerate(records, 1):
        missing = [k for k in REQUIRED_FIELDS if r.get(k) is None]
        if missing:
            raise ValueError(f"Judgment {n} lacks {', '.join(missing)}: {dict(r)!r}")
        pid, judge, system = str(r["prompt_id"]), str(r["judge_id"]), str(r["system_id"])
        d = canonical_delivery(r["target_delivery"])
        if delivery.setdefault(pid, d) != d:
            raise ValueError(f"Prompt {pid!r} has target_delivery {delivery[pid]} and {d}.")
        if _is_false(r.get("strict_common_set")):
            flagged_out.add(pid)
        systems[system] = judges[judge] = None
        scores[(pid, judge, system)] = r.get("expression_quality_score")

    excluded: dict[str, str] = {}
    consensus: dict[tuple[str, str], float] = {}
    for pid in delivery:
        if pid in flagged_out:
            excluded[pid] = "strict_common_set is false"
            continue
        bad = [(j, s) for j in judges for s in systems if parse_score(scores.get((pid, j, s))) is None]
        if bad:
            j, s = bad[0]
            got = repr(scores[(pid, j, s)]) if (pid, j, s) in scores else "no line"
            excluded[pid] = f"judge {j} has no valid 1-5 score for system {s} ({got})" + (
                f" and {len(bad) - 1} more" if len(bad) > 1 else ""
            )
            continue
        for s in systems:
            consensus[(pid, s)] = median(parse_score(scores[(pid, j, s)]) for j in judges)
    valid = [pid for pid in delivery if pid not in excluded]
    by_delivery = {d: [p for p in valid if delivery[p] == d] for d in DELIVERIES}

    rank_sum = dict.fromkeys(systems, 0.0)
    win_sum = dict.fromkeys(systems, 0.0)
    for pid in valid:
        ranks, wins = _ranks({s: consensus[(pid, s)] for s in systems})
        for s in systems:
            rank_sum[s] += ranks[s]
            win_sum[s] += wins[s]

    results = []
    for s in systems:
        per = {d: _mean_or_none([consensus[(p, s)] for p in by_delivery[d]]) for d in DELIVERIES}
        results.append(
            SystemResult(
                system=s,
                per_delivery=per,
                all_five=_mean_or_none([per[d] for d in DELIVERIES if per[d] is not None]),
                four_emotions=_mean_or_none([per[d] for d in EMOTIONS if per[d] is not None]),
                mean_rank=rank_sum[s] / len(valid) if valid else None,
                win_rate=win_sum[s] / len(valid) if valid else None,
            )
        )
    results.sort(key=lambda r: (-(r.all_five if r.all_five is not None else -math.inf), r.system))
    return IndicEmoResult(
        systems=results,
        judges=list(judges),
        valid_prompts=valid,
        excluded=excluded,
        prompts_per_delivery={d: len(by_delivery[d]) for d in DELIVERIES},
        consensus=consensus,
    )


def read_judgments(paths: Iterable[str | Path]) -> list[dict]:
    """Judgment records from JSONL files, in file order (blank lines skipped)."""
    return [record for path in paths for record in read_jsonl(path)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.indicemo", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ag = sub.add_parser("aggregate", help="consensus scores, delivery means, ranks and win rates")
    ag.add_argument("--judgments", required=True, nargs="+", help="judgment JSONL file(s)")
    ag.add_argument("--csv", help="also write the table as CSV")
    args = parser.parse_args(argv)
    try:
        result = aggregate(read_judgments(args.judgments))
    except (RumikError, OSError, ValueError, KeyError) as exc:
        return report_user_error(exc)
    print(result.markdown())
    if args.csv:
        write_csv(args.csv, result.csv_headers(), result.csv_rows())
    return 0


if __name__ == "__main__":
    sys.exit(main())
