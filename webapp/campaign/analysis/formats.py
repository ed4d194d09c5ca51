"""Exports of a campaign's rating rows in the CSV layouts of the reference tools, so analysis
scripts written for those tools read our campaigns unchanged.

Library module, no command line; a design's record says which layout it exports in::

    paths = write_p808("acr", rows, out_dir, clip_urls={clip_id: url, ...})
    # acr -> p808_acr_<N>q_batch_results.csv + p808_acr_<N>q_result_parser.cfg (one pair per HIT size N)
    # ccr -> p808_ccr_<N>q_batch_results.csv + p808_ccr_<N>q_result_parser.cfg
    paths = write_webmushra(rows, out_dir)             # webmushra_mushra.csv
    paths = write_smos(rows, out_dir)                  # smos_ratings.csv

`rows` are rating rows of one campaign (one dict per rated stimulus, the `campaign_scores` layout
of webapp/campaign/data/store.py). `clip_urls` maps a clip id to the URL (or path) to print for
it, as a mapping or a function; by default `clips/<clip id>.wav`, the campaign folder's layout.
Nothing rated: no files.

ACR (absolute ratings, MOS) and CCR (comparisons, CMOS): the P.808 toolkit (microsoft/P.808).
Its `src/result_parser.py` reads the answer CSV Amazon Mechanical Turk gives for a batch
("Batch_<n>_batch_results.csv": one row per assignment,
`Input.<name>` for the HIT's inputs and `Answer.<name>` for the page's form fields, written by
`src/P808Template/ACR_template.html` and `CCR_template.html`). Our mapping:

- one row (HIT and assignment) per rater session, i.e. per (rater, slot): HITId
  `<campaign>/slot-<slot>`, AssignmentId `<HITId>/<rater>`, WorkerId the rater, AssignmentStatus
  "Submitted", AcceptTime/SubmitTime the session's first shown_at and last submitted_at (ISO, UTC);
- the session's trials in queue order are the questions q1..qN (trap and gold trials among them,
  where they were played, as the toolkit shuffles its trap and gold into the page):
  `Answer.Q<i>_URL` the rated clip's URL (CCR: the processed = test clip), `Answer.q<i>` the answer
  as an integer (ACR 1..5; CCR -3..3, the test clip relative to the reference, which is the
  toolkit's sign-corrected answer too), `Answer.Q<i>_order` (CCR) "pr" when the test clip played
  first, else "rp", and `Answer.audio_n_play_*`/`audio_n_finish_*` 1 (an answer implies a play;
  plays are not in the rating rows);
- inputs: ACR `Input.Q0..` the test clips, CCR `Input.Q<j>_P`/`Input.Q<j>_R` test and reference
  clip URLs (the reference's URL needs `clip_ids_by_key`); `Input.TP`/`Input.TP_ANS` the first
  trapping clip of the session and its answer, `Input.gold_clips`/`Input.gold_clips_ans` (and
  `Input.gold_clips_2`) the first (second) gold clip and its expected answer. Further trap or
  gold trials stay plain questions (the toolkit has one trap and at most two gold per HIT);
- the toolkit's setup parts we do not run (math question, pair comparisons, qualification,
  WorkTimeInSeconds/Reward) are absent; `Answer.2_birth_year`, `Answer.Math` and `Answer.t1` are
  present and empty because `calc_stats` looks them up. WorkTimeInSeconds is left out on purpose:
  with it, `calc_payment_stat` needs a Reward and a session with the qualification shown.

The parser takes one number of questions per HIT (`number_of_questions_in_rating` in its
config), so sessions are written to one batch file per length N, each with the parser config
for it: `python result_parser.py --cfg p808_acr_12q_result_parser.cfg --method acr --answers
p808_acr_12q_batch_results.csv`. Its ACR check needs a gold clip in every HIT (a campaign made
with --gold-rate 0 cannot be screened by it); trap checks are switched off in the config when a
HIT has no trap (CCR campaigns have none).

webMUSHRA (audiolabs/webMUSHRA `service/write.php`, `results/<testId>/mushra.csv`): one
row per rated stimulus, `session_test_id` the campaign, then the participant fields (ours:
`rater`), `session_uuid` (a UUID per rater session), `trial_id` the page (our item, the prompt
id), `rating_stimulus` the condition id with webMUSHRA's names for the hidden reference
("reference") and the 3.5 kHz anchor ("anchor35"), `rating_score` 0..100, `rating_time` the time
on the page in milliseconds (webMUSHRA's `MushraPage.time`), `rating_comment` empty.

Speaker similarity (SMOS): no reference tool exists; `smos_ratings.csv` is our own layout, one
row per rating (SMOS_HEADER), with the clip's and the speaker reference's URLs.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.report import write_csv
from rumik_app.errors import RumikError
from rumik_app.files import atomic_write
from webapp.campaign.trials.plan import ANCHOR, REFERENCE, clip_key

ClipUrls = Mapping[str, str] | Callable[[str], str] | None
DEFAULT_CLIP_URL = "clips/{clip_id}.wav"
P808_METHODS = ("acr", "ccr")
# MTurk's batch-results columns we can fill (result_parser reads HITId, WorkerId, AssignmentId, AssignmentStatus)
P808_META = ("HITId", "AssignmentId", "WorkerId", "AssignmentStatus", "AcceptTime", "SubmitTime")
P808_STATS = ("Answer.2_birth_year", "Answer.Math", "Answer.t1")  # looked up by result_parser.calc_stats
MTURK_REVIEW = ("Approve", "Reject")
STATUS_SUBMITTED = "Submitted"
PLAYED = 1
CCR_TEST_FIRST, CCR_REFERENCE_FIRST = "pr", "rp"
# webMUSHRA's mushra.csv (service/write.php)
WEBMUSHRA_FIELDS = ("session_uuid", "trial_id", "rating_stimulus", "rating_score", "rating_time", "rating_comment")
WEBMUSHRA_PARTICIPANT = ("rater",)
WEBMUSHRA_NAMES = {REFERENCE: "reference", ANCHOR: "anchor35"}
SESSION_NAMESPACE = uuid.UUID("6f1c3a52-8d0e-4b7a-9c55-2f3e8a1d7b40")  # uuid5 namespace of our session ids
SMOS_HEADER = ("campaign", "rater", "slot", "position", "entry_id", "item_id", "prompt_id", "kind", "condition",
               "clip_url", "reference_url", "score", "expected", "seconds", "shown_at", "submitted_at")
MS_PER_S = 1000


class FormatError(RumikError, ValueError):
    """Rows that cannot be written in a tool's layout; the message says what to change."""


def clip_url_of(clip_urls: ClipUrls) -> Callable[[str], str]:
    """A function clip id -> URL from `clip_urls` (see the module docstring)."""
    if clip_urls is None:
        return lambda clip_id: DEFAULT_CLIP_URL.format(clip_id=clip_id)
    if callable(clip_urls):
        return clip_urls

    def lookup(clip_id: str) -> str:
        if clip_id not in clip_urls:
            raise FormatError(f"No URL for clip {clip_id!r}: add it to clip_urls (or pass none for clips/<id>.wav).")
        return clip_urls[clip_id]

    return lookup


def _number(value: float | None) -> int | float | None:
    """A score as the tools print it: whole numbers without ".0"."""
    if value is None:
        return None
    return int(round(value)) if float(value).is_integer() else float(value)


# ---------------------------------------------------------------- P.808 (ACR, CCR)

@dataclass
class Hit:
    """One rater session as an MTurk assignment: its rows (one per question) in play order."""

    campaign: str
    slot: int
    rater: str
    questions: list[dict] = field(default_factory=list)

    @property
    def hit_id(self) -> str:
        return f"{self.campaign}/slot-{self.slot}"

    @property
    def assignment_id(self) -> str:
        return f"{self.hit_id}/{self.rater}"

    def of_kind(self, kind: str) -> list[dict]:
        return [q for q in self.questions if q["kind"] == kind]

    def tests(self) -> list[dict]:
        return [q for q in self.questions if q["kind"] not in ("trap", "gold")]

    def meta(self) -> list[object]:
        shown = [q["shown_at"] for q in self.questions if q.get("shown_at")]
        submitted = [q["submitted_at"] for q in self.questions if q.get("submitted_at")]
        return [self.hit_id, self.assignment_id, self.rater, STATUS_SUBMITTED, min(shown or submitted, default=None),
                max(submitted, default=None)]


def sessions(rows: Iterable[Mapping]) -> list[Hit]:
    """Rows grouped into rater sessions (rater, slot), sorted by slot and rater; questions by
    position, then stimulus."""
    grouped: dict[tuple[int, str], Hit] = {}
    for row in rows:
        key = (int(row["slot"]), str(row["rater"]))
        hit = grouped.setdefault(key, Hit(str(row["campaign"]), key[0], key[1]))
        hit.questions.append(dict(row))
    for hit in grouped.values():
        hit.questions.sort(key=lambda q: (int(q["position"]), int(q["stimulus"])))
    return [grouped[key] for key in sorted(grouped)]


def p808_header(method: str, n_questions: int, n_tests: int) -> list[str]:
    """The batch-results header for `method` ("acr" or "ccr"), N questions, `n_tests` test clips."""
    if method == "acr":
        inputs = [f"Input.Q{j}" for j in range(n_tests)] + ["Input.TP", "Input.TP_ANS", "Input.gold_clips",
                                                            "Input.gold_clips_ans", "Input.gold_clips_2"]
        per_q = ("Answer.Q{i}_URL", "Answer.audio_n_finish_q{i}", "Answer.audio_n_play_q{i}", "Answer.q{i}")
    elif method == "ccr":
        inputs = [c for j in range(n_tests) for c in (f"Input.Q{j}_P", f"Input.Q{j}_R")] + ["Input.TP"]
        per_q = ("Answer.Q{i}_URL", "Answer.Q{i}_order", "Answer.audio_n_finish_q_{i}", "Answer.audio_n_play_q_{i}",
                 "Answer.q{i}")
    else:
        raise FormatError(f"P.808 method {method!r}: use 'acr' (absolute ratings) or 'ccr' (comparisons).")
    answers = [name.format(i=i) for i in range(1, n_questions + 1) for name in per_q]
    return [*P808_META, *inputs, *answers, *P808_STATS, *MTURK_REVIEW]


def _extra(questions: Sequence[dict], index: int, url: Callable[[str], str], answer: bool) -> list[object]:
    if index >= len(questions):
        return [None, None] if answer else [None]
    q = questions[index]
    return [url(q["clip_id"]), _number(q.get("expected"))] if answer else [url(q["clip_id"])]


def p808_row(method: str, hit: Hit, n_tests: int, url: Callable[[str], str],
             reference_url: Callable[[dict], str | None]) -> list[object]:
    """One batch-results row for `hit` under `p808_header(method, len(hit.questions), n_tests)`."""
    tests, traps, golds = hit.tests(), hit.of_kind("trap"), hit.of_kind("gold")
    blanks = n_tests - len(tests)
    if method == "acr":
        inputs = [url(q["clip_id"]) for q in tests] + [None] * blanks
        inputs += _extra(traps, 0, url, True) + _extra(golds, 0, url, True) + _extra(golds, 1, url, False)
        answers = [c for q in hit.questions for c in (url(q["clip_id"]), PLAYED, PLAYED, _number(q["score"]))]
    else:
        inputs = [c for q in tests for c in (url(q["clip_id"]), reference_url(q))] + [None, None] * blanks
        inputs += _extra(traps, 0, url, False)
        answers = [c for q in hit.questions
                   for c in (url(q["clip_id"]), CCR_TEST_FIRST if q.get("side") == "A" else CCR_REFERENCE_FIRST,
                             PLAYED, PLAYED, _number(q["score"]))]
    return [*hit.meta(), *inputs, *answers, *[None] * len(P808_STATS), *[None] * len(MTURK_REVIEW)]


def p808_parser_config(method: str, n_questions: int, hits: Sequence[Hit]) -> str:
    """The toolkit's result_parser config for one batch (after its acr/dcr_ccr templates in
    src/assets_master_script/): N questions, trap/gold checks on only where every HIT has one."""
    every_trap = all(h.of_kind("trap") for h in hits)
    every_gold = all(h.of_kind("gold") for h in hits)
    per_worker = Counter(h.rater for h in hits)
    votes = Counter(q["clip_id"] for h in hits for q in h.questions)
    lines = [
        f"# P.808 toolkit result_parser.py config ({method}), written with the rumik campaign export:",
        f"# python result_parser.py --cfg THIS_FILE --method {method} --answers {p808_batch_name(method, n_questions)}",
        "[general]", f"number_of_questions_in_rating: {n_questions}",
        f"expected_votes_per_file: {max(votes.values(), default=1)}", "",
        "[math]", "math1.wav = 3", "math2.wav = 7", "math3.wav = 6", "",
        "[trapping]", "url_found_in: input.tp"]
    if method == "acr":
        lines += ["ans_found_in: input.tp_ans", "", "[gold_question]", "url_found_in: input.gold_clips",
                  "ans_found_in: input.gold_clips_ans", "variance: 1"]
        if not every_gold:
            lines.append("# a HIT without a gold clip stops result_parser.py (it needs one per HIT for acr)")
    else:  # transform() reads this section for every method; a column whose value is in no clip URL
        lines += ["", "[gold_question]", "# no gold clips in CCR; result_parser.py reads this section all the same",
                  "url_found_in: assignmentid"]
    lines += ["", "[acceptance_criteria]", "all_audio_played_equal: 1", "correct_math_bigger_equal: 1",
              f"correct_tps_bigger_equal: {int(every_trap)}",
              f"allowedMaxHITsInProject: {max(per_worker.values(), default=1)}",
              "rejection_feedback: Answer to this assignment did not pass the quality control check.", "",
              "[accept_and_use]", "variance_bigger_equal: 0.1"]
    if method == "acr":
        lines.append(f"gold_standard_bigger_equal: {int(every_gold)}")
    lines += ["correct_cmp_bigger_equal: 2", "", "[bonus]", f"quantity_hits_more_than: {len(hits) + 1}",
              "quantity_bonus: 0", "quality_top_percentage: 0", "quality_bonus: 0", "quality_min_pcc: 0.7", ""]
    return "\n".join(lines)


def p808_batch_name(method: str, n_questions: int) -> str:
    return f"p808_{method}_{n_questions}q_batch_results.csv"


def write_p808(method: str, rows: Iterable[Mapping], out_dir: str | Path, clip_urls: ClipUrls = None,
               clip_ids_by_key: Mapping[str, str] | None = None, design: str | None = None) -> list[Path]:
    """The P.808 batch file(s) and parser config(s) of an ACR or CCR campaign's rows ([] without
    rows). clip_ids_by_key maps clip keys ("<prompt id>|<condition id>", `clip_key`) to clip ids:
    CCR uses it for the reference clips' URLs (Input.Q<j>_R), which the rating rows do not hold;
    without it those cells are empty. `design`: the campaign's design, which every row must have."""
    if method not in P808_METHODS:
        raise FormatError(f"P.808 method {method!r}: use 'acr' (absolute ratings) or 'ccr' (comparisons).")
    rows = _one_campaign(rows, design)
    if not rows:
        return []
    out_dir, url = Path(out_dir), clip_url_of(clip_urls)

    def reference_url(q: dict) -> str | None:
        clip_id = (clip_ids_by_key or {}).get(clip_key(q["prompt_id"], q["reference"] or ""))
        return url(clip_id) if clip_id else None

    by_size: dict[int, list[Hit]] = defaultdict(list)
    for hit in sessions(rows):
        by_size[len(hit.questions)].append(hit)
    paths = []
    for n_questions, hits in sorted(by_size.items()):
        n_tests = max(len(h.tests()) for h in hits)
        body = [p808_row(method, h, n_tests, url, reference_url) for h in hits]
        paths.append(write_csv(out_dir / p808_batch_name(method, n_questions),
                               p808_header(method, n_questions, n_tests), body))
        paths.append(atomic_write(out_dir / f"p808_{method}_{n_questions}q_result_parser.cfg",
                                  p808_parser_config(method, n_questions, hits)))
    return paths


# ---------------------------------------------------------------- webMUSHRA (mushra), SMOS

def session_uuid(campaign: str, slot: int, rater: str) -> str:
    """A stable UUID for a rater session (webMUSHRA's session_uuid is a UUID per session)."""
    return str(uuid.uuid5(SESSION_NAMESPACE, f"{campaign}\x00{slot}\x00{rater}"))


def webmushra_header(participant: Sequence[str] = WEBMUSHRA_PARTICIPANT) -> list[str]:
    """mushra.csv's header: session_test_id, the participant fields, then WEBMUSHRA_FIELDS."""
    return ["session_test_id", *participant, *WEBMUSHRA_FIELDS]


def webmushra_rows(rows: Iterable[Mapping]) -> list[list[object]]:
    """mushra.csv rows, session by session, trial by trial, stimuli in play order."""
    out = []
    for hit in sessions(rows):
        sid = session_uuid(hit.campaign, hit.slot, hit.rater)
        for q in hit.questions:
            ms = None if q.get("seconds") is None else int(round(float(q["seconds"]) * MS_PER_S))
            stimulus = WEBMUSHRA_NAMES.get(q["condition"], q["condition"])
            out.append([hit.campaign, hit.rater, sid, q["item_id"], stimulus, _number(q["score"]), ms, None])
    return out


def smos_rows(rows: Iterable[Mapping], url: Callable[[str], str]) -> list[list[object]]:
    """smos_ratings.csv rows (SMOS_HEADER), session by session in queue order."""
    return [[q["campaign"], q["rater"], q["slot"], q["position"], q["entry_id"], q["item_id"], q["prompt_id"],
             q["kind"], q["condition"], url(q["clip_id"]), url(q["reference"]) if q.get("reference") else None,
             _number(q["score"]), _number(q.get("expected")), q.get("seconds"), q.get("shown_at"),
             q["submitted_at"]] for hit in sessions(rows) for q in hit.questions]


def _one_campaign(rows: Iterable[Mapping], design: str | None) -> list[Mapping]:
    """The rows as a list; FormatError when they mix designs (rows of several campaigns) or are
    not of `design` (when given)."""
    rows = list(rows)
    found = {str(r["design"]) for r in rows}
    others = sorted(found - {design}) if design is not None else (sorted(found) if len(found) > 1 else [])
    if others:
        raise FormatError(f"Rows of design {', '.join(others)} given to the {design or 'one'} export: pass one "
                          "campaign's rows.")
    return rows


def write_webmushra(rows: Iterable[Mapping], out_dir: str | Path, design: str | None = None) -> list[Path]:
    """webmushra_mushra.csv of a campaign's rows under `out_dir` ([] without rows)."""
    rows = _one_campaign(rows, design)
    return [write_csv(Path(out_dir) / "webmushra_mushra.csv", webmushra_header(), webmushra_rows(rows))] if rows else []


def write_smos(rows: Iterable[Mapping], out_dir: str | Path, clip_urls: ClipUrls = None,
               design: str | None = None) -> list[Path]:
    """smos_ratings.csv of a campaign's rows under `out_dir` ([] without rows)."""
    rows = _one_campaign(rows, design)
    if not rows:
        return []
    return [write_csv(Path(out_dir) / "smos_ratings.csv", SMOS_HEADER, smos_rows(rows, clip_url_of(clip_urls)))]
