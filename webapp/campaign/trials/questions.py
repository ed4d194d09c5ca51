"""What a rating page asks, declared by a design's record and shown by the one page builder
(`webapp.campaign.server.page`); and the check of a page's answers, made on the server before
anything is stored.

Library module (no command line)::

    score = Question("score", "Clip {clip}: score (0-100)", low=0, high=100, per_clip=True)
    choice = Question("rating", "Quality of the speech", choices=scale_choices({5: "Excellent", 1: "Bad"}))
    answers = check_answers([score], {"score": [80, 20]}, n_clips=2, tag_words=None)   # {"score": [80.0, 20.0]}

An answer is a JSON object keyed by question name: one value for a page question, a list of one
value per clip for a per-clip question. A question has choices (a radio: one of their values) or
a range (a slider: whole numbers from `low` to `high`). The inline-tag question (`TAG_QUESTION`,
NoVA's: did you hear the laugh, chuckle or sigh the text asks for, and just before which word?)
is asked per clip, only for a prompt holding one tag; it answers `heard` and `where`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evaluation import nova
from webapp.common import UserError
from webapp.ratings import NOT_HEARD, UNSURE_INDEX

HEARD, WHERE = "heard", "where"
TAG_TEXT = ("This text asks for a non-verbal sound (a laugh, a chuckle or a sigh) somewhere. For each clip: did "
            "you hear one? Which, and just before which word?")
HEARD_CHOICES = ((("not heard", NOT_HEARD),) + tuple((c, c) for c in nova.CLASSES))


@dataclass(frozen=True)
class Question:
    """One question of a rating page.

    name: its key in the answers (and its element id, `campaign-<name>[-<clip>]`); label: what the
    page says ("{clip}" stands for the clip's name in a per-clip question); choices: (label, value)
    pairs of a radio, in display order; low/high: a slider's whole-number range instead; per_clip:
    asked once per clip (a list of answers) instead of once per page; missing: the message when it
    is not answered (or not one of the choices); tag: the inline-tag question (module docstring).
    """

    name: str
    label: str
    choices: tuple[tuple[str, object], ...] = ()
    low: int | None = None
    high: int | None = None
    per_clip: bool = False
    missing: str = ""
    tag: bool = False

    @property
    def slider(self) -> bool:
        return self.low is not None

    def label_for(self, clip: str) -> str:
        return self.label.format(clip=clip)

    def message(self, clip: str = "") -> str:
        return (self.missing or f"Answer the question: {self.label}").format(clip=clip)


# NoVA's question: per clip, which sound was heard and just before which word (`where`).
TAG_QUESTION = Question(HEARD, "Clip {clip}: which sound did you hear?", choices=HEARD_CHOICES, per_clip=True,
                        missing="Clip {clip}: say whether you heard a laugh, chuckle or sigh (or 'not heard').",
                        tag=True)
WHERE_MISSING = "Clip {clip}: click the word the sound came just before (or 'unsure where')."


def scale_choices(labels: Mapping[int, str]) -> tuple[tuple[str, int], ...]:
    """A labelled scale's radio choices, best first, as P.808's forms list them ("5  Excellent")."""
    return tuple((f"{value}  {label}", value) for value, label in sorted(labels.items(), reverse=True))


def number_choices(low: int, high: int) -> tuple[tuple[str, int], ...]:
    """Plain numbered choices low..high, in that order ("1" ... "5")."""
    return tuple((str(v), v) for v in range(low, high + 1))


def where_choices(words: Sequence[str]) -> list[tuple[str, int]]:
    """The tag question's word choices: before each word, after the last, or heard but unsure where."""
    return [*((f"“{w}”", i) for i, w in enumerate(words)), ("after the last word", len(words)),
            ("heard it, unsure where", UNSURE_INDEX)]


def _number(value: object) -> float | None:
    """A JSON number (or a numeric string) as a float; None for anything else (true is not a 1)."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _choice(question: Question, value: object, clip: str) -> object:
    """The choice `value` names (numbers compared as numbers); UserError(question.message) if none."""
    values = [v for _, v in question.choices]
    if isinstance(value, str) and value in values:
        return value
    number = _number(value)
    for v in values:
        if not isinstance(v, str) and number is not None and float(v) == number:
            return v
    raise UserError(question.message(clip))


def _slider(question: Question, value: object) -> float:
    number = _number(value)
    low, high = question.low, question.high
    if number is None:
        raise UserError(f"Give every score as a number from {low} to {high}.")
    if not low <= number <= high or not number.is_integer():
        raise UserError(f"Scores on this page go from {low} to {high} in whole steps; {value!r} is not one.")
    return number


def _tag(answers: Mapping, clip_names: Sequence[str], tag_words: Sequence[str] | None) -> dict:
    """The inline-tag answers, checked: heard and where per clip; both None per clip when the
    prompt has no tag (whatever was sent)."""
    n = len(clip_names)
    if tag_words is None:
        return {HEARD: [None] * n, WHERE: [None] * n}
    heard, where = _per_clip(answers, HEARD, n), _per_clip(answers, WHERE, n)
    out: dict[str, list] = {HEARD: [], WHERE: []}
    for clip, sound, place in zip(clip_names, heard, where, strict=True):
        if sound not in (*nova.CLASSES, NOT_HEARD):
            raise UserError(TAG_QUESTION.message(clip))
        index = _number(place)
        if sound != NOT_HEARD and (index is None or not index.is_integer()
                                   or not UNSURE_INDEX <= index <= len(tag_words)):
            raise UserError(WHERE_MISSING.format(clip=clip))
        out[HEARD].append(sound)
        out[WHERE].append(None if sound == NOT_HEARD else int(index))
    return out


def _per_clip(answers: Mapping, name: str, n: int) -> list:
    values = answers.get(name)
    if not isinstance(values, (list, tuple)) or len(values) != n:
        return [None] * n  # each clip then answers "missing", with its own message
    return list(values)


def check_answers(questions: Sequence[Question], answers: object, clip_names: Sequence[str],
                  tag_words: Sequence[str] | None = None) -> dict:
    """`answers` checked against the page's questions: {name: value, or [value per clip]}, numbers
    as floats for sliders and as the choice's value for radios; UserError naming what is missing.
    `clip_names`: the page's clips ("A", "B"; the length sets the per-clip lists);
    `tag_words`: the words of the prompt's inline-tag request, or None (no tag question asked)."""
    if not isinstance(answers, Mapping):
        raise UserError("Send the answers as an object keyed by question (reload the page).")
    out: dict = {}
    for question in questions:
        if question.tag:
            out.update(_tag(answers, clip_names, tag_words))
        elif question.per_clip:
            values = answers.get(question.name)
            if question.slider and (not isinstance(values, (list, tuple)) or len(values) != len(clip_names)):
                raise UserError(f"Give {len(clip_names)} score(s) on this page, each from {question.low} to "
                                f"{question.high}.")
            values = _per_clip(answers, question.name, len(clip_names))
            out[question.name] = [_slider(question, v) if question.slider else _choice(question, v, clip)
                                  for clip, v in zip(clip_names, values, strict=True)]
        else:
            value = answers.get(question.name)
            if value in (None, "") and question.missing:
                raise UserError(question.message())
            out[question.name] = _slider(question, value) if question.slider else _choice(question, value, "")
    return out
