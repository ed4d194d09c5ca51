"""The live arena: battles made from a visitor's text, votes stored once, the leaderboard read from them.

    arena = Arena({"tiny": load_system("tiny"), "espeak": load_system("espeak")}, Path("data/arena.sqlite3"),
                  write_clip=served.write_wav)
    battle = arena.new_battle("Hello there.", "en", session="s1", address="10.0.0.1")
    battle.clip_a, battle.clip_b, battle.seconds   # same rate, same length, loudness within 1 LU, random names
    reveal = arena.vote(battle.id, "a", session="s1", address="10.0.0.1", played=(True, True))
    votes = arena.votes()                          # [Vote]: evaluation.arena.votes' export rows
    boards, counts = arena.leaderboard()           # evaluation.arena.leaderboard.board, overall and per language

A battle: the pair comes from `PairSampler` (informative pairs favoured, refitted after every
vote); both systems speak the same request (the text checked by `build_request`, at most
MAX_PROMPT_CHARS characters, the language given); each clip is brought to 24 kHz mono,
TARGET_LUFS (ITU-R BS.1770 integrated loudness, pyloudnorm; one common gain keeps both under full
scale) and padded with silence to the longer one's length, so neither the rate, the length, the
loudness nor the file name (the caller's `write_clip`, e.g. the app's random-name folder) tells a
side. A system that fails is skipped for that battle and counted (`failures`), never shown as a
loss; another pair is tried, MAX_ATTEMPTS in all.

A vote needs both clips played to the end (`played`, what the page reports); a battle takes one
vote (a repeat is stored once and answered with the same reveal); a vote sooner than both clips
can play (PLAY_SHARE of their total length since they were shown) screens its session: all of that
session's votes, before and after, stay in the export, marked, and out of the leaderboard. Budgets per session and per
client address over the last hour bound battles (each makes two clips) and votes.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluation.arena.bradley_terry import Battles
from evaluation.arena.leaderboard import board, report, write_outputs
from evaluation.arena.sampling import PairSampler
from evaluation.arena.votes import VOTES, Vote, write_votes
from evaluation.systems.base import SynthesisError, conform
from rumik_app.audio import SAMPLE_RATE
from rumik_app.errors import RumikError
from rumik_app.request import build_request
from rumik_app.sqlite import SQLiteStore

log = logging.getLogger(__name__)

TARGET_LUFS = -23.0  # EBU R128's programme loudness
PEAK = 0.98
MAX_PROMPT_CHARS = 300
MAX_SECONDS = 20.0  # per clip
MAX_ATTEMPTS = 3
PAIR_DRAWS = 200  # draws to find a pair without a failed system (every pair has weight >= FLOOR)
PLAY_SHARE = 0.9  # a vote sooner than this share of both clips' length after they were shown is screened
HOUR_S = 3600.0
OUTPUT_FILES = ("leaderboard.md", "leaderboard.csv", "leaderboard.json", "win_rate.png", "battles.png")
BUDGETS = {"battles_per_session": 30, "battles_per_address": 120, "votes_per_session": 60, "votes_per_address": 240}


# Votes the leaderboard counts (a session screened once is left out whole: Arena.votes), grouped; ordered by
# first vote so that systems outside `systems` keep the order of their first appearance.
COUNTED_GROUPS = """
    SELECT system_a, system_b, vote, COUNT(*) FROM arena_battles
    WHERE vote IS NOT NULL AND session NOT IN (SELECT session FROM arena_battles WHERE screened = 1)
    GROUP BY system_a, system_b, vote ORDER BY MIN(voted_at)
"""


class ArenaError(RumikError, ValueError):
    """What a visitor did that the arena refuses; the message says what to do."""


@dataclass(frozen=True)
class Battle:
    id: str
    clip_a: Path
    clip_b: Path
    seconds: float


class ArenaStore(SQLiteStore):
    SCHEMA = """
    CREATE TABLE IF NOT EXISTS arena_battles (
        id TEXT PRIMARY KEY, session TEXT NOT NULL, address TEXT, prompt TEXT NOT NULL, language TEXT NOT NULL,
        system_a TEXT NOT NULL, system_b TEXT NOT NULL, clip_a_sha256 TEXT NOT NULL, clip_b_sha256 TEXT NOT NULL,
        seconds REAL NOT NULL, shown_at REAL NOT NULL, vote TEXT, voted_at REAL, screened INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX IF NOT EXISTS arena_by_session ON arena_battles (session, shown_at);
    CREATE INDEX IF NOT EXISTS arena_by_address ON arena_battles (address, shown_at);
    """
    SCHEMA_KEY = "arena_schema"


class Arena:
    """Battles, votes and the leaderboard over `systems` ({name: Synthesizer}); see the module docstring."""

    def __init__(self, systems: Mapping[str, object], database: Path, write_clip: Callable[[np.ndarray, int], Path],
                 budgets: Mapping[str, int] | None = None, seed: int | None = None, max_seconds: float = MAX_SECONDS,
                 clock: Callable[[], float] = time.time):
        if len(systems) < 2:
            raise ArenaError("An arena needs at least two systems (e.g. --system espeak --system tiny).")
        self.systems, self.write_clip = dict(systems), write_clip
        self.budgets = {**BUDGETS, **(budgets or {})}
        self.max_seconds, self.clock = max_seconds, clock
        self.store = ArenaStore(Path(database))
        self.sampler = PairSampler(list(self.systems), seed=seed)
        self.failures: Counter[str] = Counter()
        self._lock = threading.Lock()  # the sampler's refit
        self._refit()

    # ------------------------------------------------------------------ battles
    def new_battle(self, text: str, language: str, session: str, address: str | None = None) -> Battle:
        """Two systems speak `text`; ArenaError for a text, a budget or systems that all fail."""
        request = self._request(text, language)
        self._check_budget("battles", session, address, "vote")
        failed: set[str] = set()
        for _ in range(MAX_ATTEMPTS):
            pair = self._pair(failed)
            if pair is None:
                break
            clips = [self._speak(name, request) for name in pair]
            failed.update(name for name, clip in zip(pair, clips, strict=True) if clip is None)
            if all(clip is not None for clip in clips):
                return self._store_battle(request, pair, clips, session, address)
        raise ArenaError("The systems could not speak this text just now; try another text, or again in a minute.")

    def _pair(self, failed: set[str]) -> tuple[str, str] | None:
        """The sampler's next pair without a system that failed this battle (None: no such pair left)."""
        if len(set(self.systems) - failed) < 2:
            return None
        with self._lock:
            for _ in range(PAIR_DRAWS):
                pair = self.sampler.sample()
                if not failed.intersection(pair):
                    return pair
        return None

    def _request(self, text: str, language: str):
        text = (text or "").strip()
        if len(text) > MAX_PROMPT_CHARS:
            raise ArenaError(f"An arena prompt is at most {MAX_PROMPT_CHARS} characters; it has {len(text):,}.")
        try:
            return build_request({"text": text, "language": language or None, "max_seconds": self.max_seconds})
        except RumikError as exc:
            raise ArenaError(str(exc)) from None

    def _speak(self, name: str, request) -> np.ndarray | None:
        """One system's clip at 24 kHz mono, or None (counted) when it fails."""
        try:
            return conform(self.systems[name].synthesize(request)).samples.astype(np.float32)
        except (SynthesisError, RumikError, OSError) as exc:
            self.failures[name] += 1
            log.warning("arena: %s failed (%s); skipped for this battle", name, exc)
            return None

    def _store_battle(self, request, names: tuple[str, str], clips: list[np.ndarray], session: str,
                      address: str | None) -> Battle:
        clip_a, clip_b = level_and_pad(*clips)
        path_a, path_b = self.write_clip(clip_a, SAMPLE_RATE), self.write_clip(clip_b, SAMPLE_RATE)
        battle = Battle("battle_" + secrets.token_hex(12), Path(path_a), Path(path_b), len(clip_a) / SAMPLE_RATE)
        with self.store._transaction() as con:
            con.execute("INSERT INTO arena_battles (id, session, address, prompt, language, system_a, system_b, "
                        "clip_a_sha256, clip_b_sha256, seconds, shown_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (battle.id, opaque(session), address, request.text, request.language or "", *names,
                         sha256_of(path_a), sha256_of(path_b), battle.seconds, self.clock()))
        return battle

    # ------------------------------------------------------------------ votes
    def vote(self, battle_id: str, choice: str, session: str, address: str | None = None,
             played: tuple[bool, bool] = (False, False)) -> dict:
        """Store `choice` (a, b, tie, both_bad) once; returns {"system_a", "system_b", "vote", "screened"}."""
        if choice not in VOTES:
            raise ArenaError(f"A vote is one of {', '.join(VOTES)}; not {str(choice)[:20]!r}.")
        if not all(played):
            raise ArenaError("Play both clips to the end before voting.")
        row = self._battle(battle_id, session)
        if row["vote"] is None:
            self._check_budget("votes", session, address, "battle")
            screened = self.clock() - row["shown_at"] < PLAY_SHARE * 2 * row["seconds"]
            with self.store._transaction() as con:  # only the first vote of a battle is kept
                con.execute("UPDATE arena_battles SET vote = ?, voted_at = ?, screened = ? "
                            "WHERE id = ? AND vote IS NULL", (choice, self.clock(), int(screened), battle_id))
            self._refit()
            row = self._battle(battle_id, session)
        return {"system_a": row["system_a"], "system_b": row["system_b"], "vote": row["vote"],
                "screened": bool(row["screened"])}

    def _battle(self, battle_id: str, session: str) -> dict:
        with self.store._connect() as con:
            con.row_factory = _dict_row
            row = con.execute("SELECT * FROM arena_battles WHERE id = ? AND session = ?",
                              (str(battle_id)[:64], opaque(session))).fetchone()
        if row is None:
            raise ArenaError("That battle is not yours or no longer open; start a new battle.")
        return row

    def _check_budget(self, what: str, session: str, address: str | None, then: str) -> None:
        column = "shown_at" if what == "battles" else "voted_at"
        since = self.clock() - HOUR_S
        with self.store._connect() as con:
            for who, value in (("session", opaque(session)), ("address", address)):
                if value is None:
                    continue
                used = con.execute(f"SELECT COUNT(*) FROM arena_battles WHERE {who} = ? AND {column} > ?",  # noqa: S608
                                   (value, since)).fetchone()[0]
                if used >= self.budgets[f"{what}_per_{who}"]:
                    raise ArenaError(f"{used} {what} from this {'browser' if who == 'session' else 'address'} in the "
                                     f"last hour, the most the arena takes; come back later.")

    # ------------------------------------------------------------------ results
    def votes(self) -> list[Vote]:
        """Every voted battle as the export's rows (evaluation.arena.votes.Vote), oldest first."""
        with self.store._connect() as con:
            con.row_factory = _dict_row
            rows = con.execute("SELECT * FROM arena_battles WHERE vote IS NOT NULL ORDER BY voted_at").fetchall()
        fast = {row["session"] for row in rows if row["screened"]}  # a session that voted too fast once: all of it
        return [Vote(row["id"], row["prompt"], row["language"], row["system_a"], row["system_b"],
                     row["clip_a_sha256"], row["clip_b_sha256"], row["vote"], iso(row["shown_at"]),
                     iso(row["voted_at"]), row["session"], row["session"] in fast) for row in rows]

    def leaderboard(self, rounds: int = 1000, seed: int = 0) -> tuple[dict[str, list[dict]], dict]:
        votes = self.votes()
        counts = {"counted": sum(not vote.screened for vote in votes), "screened": sum(vote.screened for vote in votes),
                  "repeats": 0, "rounds": rounds, "seed": seed, "failures": dict(self.failures)}
        return board(votes, list(self.systems), rounds, seed), counts

    def export(self, folder: Path, rounds: int = 1000, seed: int = 0) -> list[Path]:
        """votes.jsonl, votes.csv (the export's rows, screened ones marked), leaderboard.md/.csv/.json and the
        win-rate and battle-count pictures under `folder`; `rumik arena leaderboard votes.jsonl` gives the
        same table again."""
        votes = self.votes()
        boards, counts = self.leaderboard(rounds, seed)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        written = [write_votes(folder / "votes.jsonl", votes), write_votes(folder / "votes.csv", votes)]
        write_outputs(folder, votes, list(self.systems), boards, report(boards, counts))
        return written + [folder / name for name in OUTPUT_FILES]

    def counted_battles(self) -> Battles:
        """The leaderboard's battles (every vote of a session never screened) for the pair sampler, counted
        by SQLite in one grouped scan: a vote's refit costs a scan, not a Python object per stored vote.
        Equals `to_battles(self.votes(), systems)` up to the order of the battles."""
        with self.store._connect() as con:
            groups = con.execute(COUNTED_GROUPS).fetchall()
        names = list(dict.fromkeys([*self.systems, *(name for a, b, *_ in groups for name in (a, b))]))
        return Battles.of_counts(names, ((a, b, VOTES[vote], count) for a, b, vote, count in groups))

    def _refit(self) -> None:
        battles = self.counted_battles()
        with self._lock:
            self.sampler.update(battles)


def level_and_pad(clip_a: np.ndarray, clip_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both at TARGET_LUFS (one common gain keeps the louder peak under PEAK), the shorter padded with
    silence to the longer's length."""
    import pyloudnorm

    meter = pyloudnorm.Meter(SAMPLE_RATE)
    length = max(len(clip_a), len(clip_b), int(0.5 * SAMPLE_RATE))  # the meter needs 400 ms
    padded = [np.pad(clip, (0, length - len(clip))).astype(np.float64) for clip in (clip_a, clip_b)]
    leveled = []
    for clip in padded:
        loudness = meter.integrated_loudness(clip)
        gain = 10 ** ((TARGET_LUFS - loudness) / 20) if np.isfinite(loudness) else 1.0
        leveled.append(clip * gain)
    peak = max(float(np.max(np.abs(clip))) for clip in leveled)
    common = PEAK / peak if peak > PEAK else 1.0
    return leveled[0].astype(np.float32) * common, leveled[1].astype(np.float32) * common


def opaque(session: str) -> str:
    """A session as stored and exported: a hash, never the id the browser holds."""
    return hashlib.sha256(b"rumik-arena\0" + str(session).encode()).hexdigest()[:24]


def sha256_of(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="seconds")


def _dict_row(cursor, row) -> dict:
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}
