"""Arena pair sampling against uniform pairs: battles until the top 3 is known, in simulation.

    python benchmarks/arena_sampling.py                  # 6 systems, 40 simulated arenas per sampler
    python benchmarks/arena_sampling.py --runs 4 --json out.json

Votes are drawn from known strengths (evaluation.arena.simulate: 6 systems at log-odds 1.0, 0.6,
0.3, 0.0, -0.4, -0.9, ties 10 %). Every 20 battles the leaderboard is refitted; an arena is done
when its fitted top 3 is the true top 3, in order, with 95 % intervals (300 bootstrap rounds) that
do not overlap. The same seeds drive both samplers. Printed: battles needed (mean, median, 90th
percentile) for uniform pairs and for evaluation.arena.sampling.PairSampler, and the ratio
informative / uniform of the means (below 1 is the goal).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from evaluation.arena.sampling import PairSampler
from evaluation.arena.simulate import Truth, until_top3_separated
from evaluation.report import markdown_table

STRENGTHS = (1.0, 0.6, 0.3, 0.0, -0.4, -0.9)


def measure(runs: int, seed: int) -> dict:
    truth = Truth(tuple(f"system-{k}" for k in range(len(STRENGTHS))), np.array(STRENGTHS))
    results = {}
    for mode in ("uniform", "informative"):
        start, needed = time.perf_counter(), []
        for run in tqdm(range(runs), desc=mode, unit="arena"):
            sampler = PairSampler(truth.systems, seed=seed + run) if mode == "informative" else None
            needed.append(until_top3_separated(truth, sampler, np.random.default_rng(seed + run)))
        results[mode] = {"mean": float(np.mean(needed)), "median": float(np.median(needed)),
                         "p90": float(np.percentile(needed, 90)), "runs": needed,
                         "seconds": round(time.perf_counter() - start, 1)}
    results["ratio"] = results["informative"]["mean"] / results["uniform"]["mean"]
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40, help="simulated arenas per sampler (default 40)")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    results = measure(args.runs, args.seed)
    rows = [[mode, results[mode]["mean"], results[mode]["median"], results[mode]["p90"], results[mode]["seconds"]]
            for mode in ("uniform", "informative")]
    print(markdown_table(["sampler", "battles (mean)", "median", "90th pct", "simulation s"], rows, digits=0))
    print(f"\ninformative / uniform battles (means): {results['ratio']:.2f} over {args.runs} arenas each")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
