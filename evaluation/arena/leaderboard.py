"""Ranks the systems of an arena's vote export: Bradley–Terry ratings with bootstrap 95 % intervals.

    rumik arena leaderboard votes.jsonl                         # the table, overall and per language
    rumik arena leaderboard votes.csv --out board/ --rounds 1000 --seed 0 --systems rumik-oss-1,espeak,tiny

Reproducible from the export alone: the same file, rounds and seed give the same table. Screened
votes and repeated battle ids are left out and counted. `--out DIR` writes leaderboard.md, .csv and
.json (overall and per language) and two pictures: win_rate.png (row's win rate over column, ties
as half) and battles.png (battles per pair). The method: evaluation.arena.bradley_terry, docs/arena.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from evaluation.arena.bradley_terry import ROUNDS, leaderboard, matrices
from evaluation.arena.votes import Vote, read_votes, to_battles
from evaluation.report import markdown_table, write_csv
from rumik_app.errors import user_errors
from rumik_app.files import atomic_write

HEADERS = ("rank", "system", "rating", "95% CI", "battles", "win rate")
CSV_HEADERS = ("language", "rank", "system", "rating", "ci_low", "ci_high", "battles", "win_rate")
MAX_ROUNDS = 10_000
OVERALL = "all"


def board(votes: Sequence[Vote], systems: Sequence[str], rounds: int, seed: int) -> dict[str, list[dict]]:
    """{"all": rows, language: rows, ...}: the leaderboard overall and for each language with votes."""
    languages = sorted({vote.language for vote in votes if not vote.screened})
    boards = {OVERALL: leaderboard(to_battles(votes, systems), rounds, seed)}
    for language in languages:
        own = [vote for vote in votes if vote.language == language]
        boards[language] = leaderboard(to_battles(own, systems), rounds, seed)
    return boards


def table(rows: list[dict]) -> str:
    """The Markdown table of one board (unranked systems show "unranked")."""
    def line(row: dict) -> list:
        if row["rank"] is None:
            return ["-", row["system"], "unranked", "", 0, ""]
        return [row["rank"], row["system"], f"{row['rating']:.0f}",
                f"{row['ci_low']:.0f} to {row['ci_high']:.0f}", row["battles"], f"{row['win_rate']:.1%}"]
    return markdown_table(HEADERS, [line(row) for row in rows])


def report(boards: dict[str, list[dict]], counts: dict) -> str:
    """The whole Markdown report: how many votes counted and were left out, then each board."""
    head = (f"{counts['counted']} battles counted; left out: {counts['screened']} from screened sessions, "
            f"{counts['repeats']} repeated battle ids. Bradley–Terry ratings (Elo scale, 1000 = mean), "
            f"95 % intervals from {counts['rounds']} bootstrap rounds (seed {counts['seed']}).")
    parts = [head, "", "## All languages", "", table(boards[OVERALL])]
    for language, rows in boards.items():
        if language != OVERALL:
            parts += ["", f"## {language}", "", table(rows)]
    return "\n".join(parts) + "\n"


def write_outputs(out: Path, votes: Sequence[Vote], systems: Sequence[str], boards: dict, text: str) -> None:
    """leaderboard.md/.csv/.json and the two pictures under `out`."""
    from evaluation.charts import matrix_chart

    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "leaderboard.md", text)
    rows = [[language, *(row[key] for key in CSV_HEADERS[1:])] for language, board_rows in boards.items()
            for row in board_rows]
    write_csv(out / "leaderboard.csv", CSV_HEADERS, rows)
    atomic_write(out / "leaderboard.json", json.dumps(boards, indent=1, ensure_ascii=False) + "\n")
    battles = to_battles(votes, systems)
    win_rate, played = matrices(battles)
    matrix_chart(out / "win_rate.png", "Win rate of row over column (ties count half)", battles.systems, win_rate)
    matrix_chart(out / "battles.png", "Battles per pair", battles.systems, played, "{:.0f}", cmap="Blues")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rumik arena leaderboard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("votes", help="the arena's vote export (.jsonl or .csv)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"bootstrap rounds (default {ROUNDS})")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    parser.add_argument("--systems", default="", help="comma-separated systems to list even without a vote")
    parser.add_argument("--out", help="a folder for leaderboard.md/.csv/.json, win_rate.png and battles.png")
    return parser


def main(argv: Sequence[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 100 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be 100 to {MAX_ROUNDS:,}")
    with user_errors(OSError):
        votes, repeats = read_votes(args.votes)
        systems = [name.strip() for name in args.systems.split(",") if name.strip()]
        boards = board(votes, systems, args.rounds, args.seed)
        screened = sum(vote.screened for vote in votes)
        counts = {"counted": len(votes) - screened, "screened": screened, "repeats": repeats,
                  "rounds": args.rounds, "seed": args.seed}
        text = report(boards, counts)
        sys.stdout.write(text)
        if args.out:
            write_outputs(Path(args.out), votes, systems, boards, text)
    return {"boards": boards, **counts}


if __name__ == "__main__":
    main()
