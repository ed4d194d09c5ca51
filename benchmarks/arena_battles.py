"""Battles served per minute by the arena on this machine, against the syntheses they are made of.

    python benchmarks/arena_battles.py                         # espeak-ng and tiny, 20 battles
    python benchmarks/arena_battles.py --battles 50 --system espeak --system rumik --json out.json

One process, one visitor at a time: `Arena.new_battle` on prompts of the app's example set (the
pair sampler, both syntheses, loudness matching, padding, writing both clips, the battle's row),
then a vote after each. The reference, measured in the same run: the same systems synthesising the
same prompts with nothing else (`Synthesizer.synthesize`). Printed: battles per minute, and the
arena's overhead as the ratio of its time per battle to the two syntheses' (1.0 = no overhead).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from evaluation.arena.battles import Arena
from evaluation.report import markdown_table
from evaluation.systems import load_system
from rumik_app.request import build_request

PROMPTS = ["Good morning, the train to Chennai leaves at nine.", "Please call me back when you reach home.",
           "The results will be announced on Friday evening.", "I cannot believe how quickly the year went by."]


def measure(specs: list[str], battles: int, max_seconds: float) -> dict:
    systems = {}
    for spec in specs:
        system = load_system(spec)
        systems[system.name] = system
    with tempfile.TemporaryDirectory(prefix="arena-bench-") as folder:
        root = Path(folder)
        clips = iter(range(10**9))

        def write_clip(samples, rate):
            import soundfile as sf

            path = root / f"{next(clips)}.wav"
            sf.write(path, samples, rate, subtype="PCM_16")
            return path

        arena = Arena(systems, root / "arena.sqlite3", write_clip, max_seconds=max_seconds, seed=0,
                      budgets={"battles_per_session": 10**9, "votes_per_session": 10**9})
        for system in systems.values():  # loaded and warm before either clock starts
            system.synthesize(build_request({"text": PROMPTS[0], "language": "en", "max_seconds": max_seconds}))
        start = time.perf_counter()
        pairs = []
        for k in tqdm(range(battles), desc="battles", unit="battle"):
            battle = arena.new_battle(PROMPTS[k % len(PROMPTS)], "en", session="bench")
            row = arena.vote(battle.id, "tie", "bench", played=(True, True))
            pairs.append((row["system_a"], row["system_b"]))
        arena_s = time.perf_counter() - start
        start = time.perf_counter()
        for k, pair in enumerate(tqdm(pairs, desc="syntheses alone", unit="pair")):
            for name in pair:
                systems[name].synthesize(build_request({"text": PROMPTS[k % len(PROMPTS)], "language": "en",
                                                        "max_seconds": max_seconds}))
        alone_s = time.perf_counter() - start
    return {"systems": list(systems), "battles": battles, "arena_s": round(arena_s, 2), "alone_s": round(alone_s, 2),
            "battles_per_minute": round(60 * battles / arena_s, 1), "overhead": round(arena_s / alone_s, 3)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--system", action="append", default=None, metavar="SPEC", help="default: espeak and tiny")
    p.add_argument("--battles", type=int, default=20)
    p.add_argument("--max-seconds", type=float, default=5.0, help="the cap on each clip")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    result = measure(args.system or ["espeak", "tiny"], args.battles, args.max_seconds)
    print(markdown_table(["systems", "battles", "arena s", "syntheses alone s", "battles / min", "arena / alone"],
                        [[", ".join(result["systems"]), result["battles"], result["arena_s"], result["alone_s"],
                          result["battles_per_minute"], result["overhead"]]]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
