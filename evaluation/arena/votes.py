"""The arena's vote export: one row per battle (JSONL or CSV), read back bounded and checked.

    votes = read_votes("votes.jsonl")                 # [Vote], one per battle id (the first kept)
    battles = to_battles(votes)                       # Battles of the unscreened votes
    write_votes("votes.csv", votes)                   # the same columns as CSV

Columns (VOTE_FIELDS): battle_id, prompt, language, system_a, system_b, clip_a_sha256, clip_b_sha256,
vote (a, b, tie, both_bad), shown_at and voted_at (ISO 8601), session (an opaque hash) and screened
(true for a session the arena screened out: it is kept in the export, left out of the leaderboard and
counted). A battle id seen twice is one battle: the first row is kept and the repeats are counted.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from evaluation.arena.bradley_terry import Battles
from rumik_app.errors import RumikError
from rumik_app.files import atomic_write

VOTES = {"a": 1.0, "b": 0.0, "tie": 0.5, "both_bad": 0.5}  # the outcome for system_a (LMArena: both bad is a tie)
MAX_VOTE_FILE_BYTES = 512 * 2**20
MAX_VOTES = 2_000_000
MAX_FIELD_CHARS = 4000


class VoteFileError(RumikError, ValueError):
    """A vote file that cannot be read; the message names the row and the fix."""


@dataclass(frozen=True)
class Vote:
    """One battle and its vote (the module docstring's columns)."""

    battle_id: str
    prompt: str
    language: str
    system_a: str
    system_b: str
    clip_a_sha256: str
    clip_b_sha256: str
    vote: str
    shown_at: str
    voted_at: str
    session: str
    screened: bool = False

    @property
    def outcome(self) -> float:
        """system_a's result: 1 won, 0.5 tie or both bad, 0 lost."""
        return VOTES[self.vote]


VOTE_FIELDS = tuple(f.name for f in fields(Vote))


def parse_vote(row: dict, where: str) -> Vote:
    """A Vote from one exported row (JSON or CSV strings); VoteFileError naming `where`."""
    missing = [name for name in VOTE_FIELDS[:-1] if name not in row]
    if missing:
        raise VoteFileError(f"{where}: missing {', '.join(missing)}; a vote row has {', '.join(VOTE_FIELDS)}.")
    values = {name: row[name] for name in VOTE_FIELDS[:-1]}
    if not all(isinstance(value, str) and len(value) <= MAX_FIELD_CHARS for value in values.values()):
        raise VoteFileError(f"{where}: every column but screened is text of at most {MAX_FIELD_CHARS} characters.")
    screened = row.get("screened", False)
    screened = {"true": True, "false": False}.get(screened.strip().lower(), screened) if isinstance(screened, str) \
        else screened
    if not isinstance(screened, bool):
        raise VoteFileError(f"{where}: screened is true or false, not {screened!r}.")
    vote = Vote(**values, screened=screened)
    if vote.vote not in VOTES:
        raise VoteFileError(f"{where}: vote is one of {', '.join(VOTES)}, not {vote.vote[:20]!r}.")
    if not vote.system_a or vote.system_a == vote.system_b:
        raise VoteFileError(f"{where}: a battle is between two different named systems.")
    return vote


def _rows(path: Path) -> Iterable[tuple[dict, str]]:
    if path.suffix.lower() == ".csv":
        with path.open(encoding="utf-8", newline="") as handle:
            for number, row in enumerate(csv.DictReader(handle), start=2):
                yield row, f"{path.name} line {number}"
        return
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise VoteFileError(f"{path.name} line {number} is not JSON ({exc.msg}).") from None
                if not isinstance(row, dict):
                    raise VoteFileError(f"{path.name} line {number} is not a JSON object.")
                yield row, f"{path.name} line {number}"


def read_votes(path: str | Path) -> tuple[list[Vote], int]:
    """(votes, repeats): one Vote per battle id, in file order, and how many repeated rows were dropped."""
    path = Path(path)
    if not path.is_file():
        raise VoteFileError(f"{path}: no such vote file (export one from the arena, or `rumik arena export`).")
    if path.stat().st_size > MAX_VOTE_FILE_BYTES:
        raise VoteFileError(f"{path} is over {MAX_VOTE_FILE_BYTES // 2**20} MB; split it by date.")
    seen: dict[str, Vote] = {}
    repeats = 0
    for row, where in _rows(path):
        vote = parse_vote(row, where)
        if vote.battle_id in seen:
            repeats += 1
            continue
        if len(seen) >= MAX_VOTES:
            raise VoteFileError(f"{path} holds over {MAX_VOTES:,} battles; split it by date.")
        seen[vote.battle_id] = vote
    return list(seen.values()), repeats


def write_votes(path: str | Path, votes: Sequence[Vote]) -> Path:
    """The votes as JSONL (or CSV for a .csv path), written atomically."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=VOTE_FIELDS)
        writer.writeheader()
        writer.writerows(asdict(vote) for vote in votes)
        return atomic_write(path, buffer.getvalue())
    return atomic_write(path, "".join(json.dumps(asdict(vote), ensure_ascii=False) + "\n" for vote in votes))


def to_battles(votes: Sequence[Vote], systems: Sequence[str] = ()) -> Battles:
    """Battles of the unscreened votes; `systems` first (listed even without a battle), then the rest
    in order of first appearance."""
    names = list(dict.fromkeys([*systems, *(name for v in votes for name in (v.system_a, v.system_b))]))
    return Battles.of(names, ((v.system_a, v.system_b, v.outcome) for v in votes if not v.screened))
