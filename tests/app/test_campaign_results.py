"""Campaign results and exports on a small campaign rated by a script whose answers are known,
so every figure is checked against arithmetic done here by hand; and the command line.

Run: .venv/bin/python -m pytest tests/app/test_campaign_results.py -q
"""

from __future__ import annotations

import json
import zipfile
from fractions import Fraction

import pytest

from evaluation import indicemo
from evaluation.listening_stats import bootstrap_mean, krippendorff_alpha
from evaluation.report import read_jsonl
from tests.app.campaign_fixtures import folder_system, make_campaign, write_prompts
from webapp.campaign import cli
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.designs import design_of
from webapp.campaign.queues import RaterQueues
from webapp.campaign.reports import export_campaign, results_for
from webapp.storage import ServedFolder

# Per rater and prompt: scores of condition 0 and 1, the preferred condition (None = no
# preference), and for the tagged prompt what was heard in each condition's clip.
SCRIPT = {
    "asha": {"p_happy": (5, 2, 0), "p_sad": (4, 3, 0), "p_tag": (2, 4, 1)},
    "ben": {"p_happy": (4, 2, 0), "p_sad": (4, 4, None), "p_tag": (3, 3, 1)},
}
HEARD = {"asha": {0: ("laugh", 4), 1: ("none", None)}, "ben": {0: ("laugh", 2), 1: ("chuckle", 4)}}
REPEAT = {"asha": "same", "ben": "flip"}  # asha answers her repeat as before; ben flips and scores 1, 1


def answer(trial, condition_ids: list[str], rater: str, repeat: bool) -> dict:
    """The rater's answers to an A/B trial: the script's scores of its clips A and B, in their order."""
    s0, s1, pref = SCRIPT[rater][trial.prompt_id]
    scores = {0: s0, 1: s1}
    if repeat and REPEAT[rater] == "flip":
        scores, pref = {0: 1, 1: 1}, (1 - pref if pref is not None else 0)
    left, right = (condition_ids.index(c) for c in trial.conditions)  # condition indices played as A and B
    side = {left: "A", right: "B"}
    out = {"score": [scores[left], scores[right]], "preference": "none" if pref is None else side[pref]}
    if trial.prompt_id == "p_tag":
        out.update(heard=[HEARD[rater][left][0], HEARD[rater][right][0]],
                   where=[HEARD[rater][left][1], HEARD[rater][right][1]])
    return out


@pytest.fixture(scope="module")
def rated(tmp_path_factory):
    """Two raters, three prompts, two conditions, k = 2 (both rate every pair), one repeat each."""
    tmp = tmp_path_factory.mktemp("campaign")
    layout, campaign = make_campaign(tmp, raters_per_item=2, rater_slots=2, repeat_fraction=0.34)
    store = CampaignStore(layout.database, layout=design_of(campaign))
    queues = RaterQueues(campaign, store, ServedFolder(tmp / "served"))
    ids = [c.id for c in campaign.conditions]
    for rater in ("asha", "ben"):
        while (shown := queues.next_trial(rater)) is not None:
            trial = shown.trial
            assert queues.submit(rater, shown.entry_id, answer(trial, ids, rater, trial.repeat_of is not None))
    return layout, campaign, store, tmp


def test_scores_and_win_rates_are_per_prompt_means_with_a_bootstrap_over_prompts(rated):
    _, campaign, store, _ = rated
    res = results_for(campaign, store)
    assert (res.ratings, res.first_hearings, res.expected) == (8, 6, 8)
    c0, c1 = res.conditions
    # Condition 0: prompt means (5+4)/2, (4+4)/2, (2+3)/2 -> 4.5, 4, 2.5; condition 1: 2, 3.5, 3.5.
    # (Repeats are left out: ben's repeat scored 1 and 1.)
    assert c0.score.mean == pytest.approx(11 / 3) and c1.score.mean == pytest.approx(3.0)
    assert c0.score == bootstrap_mean([4.5, 4.0, 2.5], seed=campaign.seed)  # prompts resampled (sorted by id)
    # Wins of condition 0: happy (1 + 1)/2, sad (1 + 0.5)/2, tag 0 -> mean 1.75/3.
    assert c0.win_rate.mean == pytest.approx(1.75 / 3) and c1.win_rate.mean == pytest.approx(1 - 1.75 / 3)
    (pair,) = res.pairs
    assert (pair.wins_a, pair.wins_b, pair.ties) == (3, 2, 1) and pair.win_rate_a.mean == pytest.approx(1.75 / 3)
    assert c0.score.low <= c0.score.mean <= c0.score.high and c0.score.n == 3


def test_agreement_matches_the_hand_computed_alpha(rated):
    _, campaign, store, _ = rated
    res = results_for(campaign, store)
    # Preferences (unit = pair): asha c0, c0, c1; ben c0, none, c1. n = 6 (c0: 3, c1: 2, none: 1);
    # D_o = 2/6 (one disagreeing unit, both orders); D_e = 2 (3*2 + 3*1 + 2*1) / 30; alpha = 1 - D_o/D_e = 6/11.
    assert res.alpha_preferences == pytest.approx(float(Fraction(6, 11)))
    # Scores (unit = one clip of one pair), the same data krippendorff gets: ordinal on 1..5.
    c = [cond.id for cond in campaign.conditions]
    by_hand = {r: {f"{p}/0-1|{c[k]}": scores[k] for p, scores in SCRIPT[r].items() for k in (0, 1)} for r in SCRIPT}
    assert res.alpha_scores == pytest.approx(krippendorff_alpha(by_hand, "ordinal", [1, 2, 3, 4, 5]))


def test_per_rater_statistics(rated):
    _, campaign, store, _ = rated
    raters = {r.rater: r for r in results_for(campaign, store).raters}
    for name in ("asha", "ben"):
        r = raters[name]
        assert (r.done, r.total, r.repeats) == (4, 4, 1)
        assert r.preference_agreement == pytest.approx(2 / 3)  # they differ on p_sad only
        assert r.score_deviation == pytest.approx(4 / 6)  # |5-4|, |2-2|, |4-4|, |3-4|, |2-3|, |4-3|
        assert r.median_seconds is not None and r.median_seconds >= 0
        assert r.score_alpha_without is None  # one rater left: no agreement to measure
    assert (raters["asha"].repeat_same_preference, raters["asha"].repeat_score_change) == (1.0, 0.0)
    assert raters["ben"].repeat_same_preference == 0.0 and raters["ben"].repeat_score_change > 0
    rows = store.rows(campaign.name)
    a_share = sum(r["preference"] == "A" for r in rows if r["rater"] == "asha") / sum(
        r["preference"] in "AB" for r in rows if r["rater"] == "asha")
    assert raters["asha"].chose_a == pytest.approx(a_share)


def test_exports_reaggregate_with_indicemo_and_nova(rated, tmp_path):
    _, campaign, store, _ = rated
    files = export_campaign(campaign, store, tmp_path / "export")
    names = {p.name for p in files}
    assert {"campaign_export.zip", "results.md", "results.json", "scores.png", "win_rate.png", "ratings.csv",
            "indicemo_judgments.jsonl", "nova_prompts.jsonl", "clips_manifest.jsonl", "campaign.json",
            "manifest.json"} <= names
    with zipfile.ZipFile(files[0]) as zf:
        assert "nova_transcripts" in " ".join(zf.namelist()) and "ratings.csv" in zf.namelist()
    judgments = read_jsonl(tmp_path / "export" / "indicemo_judgments.jsonl")
    assert {j["judge_id"] for j in judgments} == {"panel1", "panel2"} and {j["rater"] for j in judgments} == set(SCRIPT)
    assert {j["prompt_id"] for j in judgments} == {"p_happy", "p_sad"}  # the tagged prompt has no delivery
    # Through evaluation.indicemo's command line: consensus = median of the two panels.
    csv_path = tmp_path / "indicemo.csv"
    assert indicemo.main(["aggregate", "--judgments", str(tmp_path / "export" / "indicemo_judgments.jsonl"),
                          "--csv", str(csv_path)]) == 0
    emo = indicemo.aggregate(judgments)
    c0, c1 = (cond.id for cond in campaign.conditions)
    by_system = {s.system: s for s in emo.systems}
    assert by_system[c0].per_delivery["Happy"] == 4.5 and by_system[c0].per_delivery["Sad"] == 4.0
    assert by_system[c1].all_five == pytest.approx((2.0 + 3.5) / 2)
    numbers = json.loads((tmp_path / "export" / "results.json").read_text())
    assert numbers["indicemo"][c0]["all_five"] == pytest.approx(4.25)
    # NoVA: asha heard the laugh where asked in condition 0 (rendered), ben one word early (misplaced);
    # in condition 1 asha heard nothing and ben a chuckle at the word (laughter in the 2-class view).
    # S = (laughter + sigh) / 2 per listener, sigh never asked = 0: scores (0.5 + 0) / 2 for both.
    assert numbers["nova"][c0]["score"] == pytest.approx(0.25) and numbers["nova"][c1]["score"] == pytest.approx(0.25)
    prompts = read_jsonl(tmp_path / "export" / "nova_prompts.jsonl")
    assert prompts == [{"id": "p_tag", "text": "That was so funny I cannot stop",
                        "text_with_mark": "That was so funny <laugh> I cannot stop", "nvv": "laugh",
                        "requested_index": 4, "n_words": 7}]
    assert "Krippendorff" in (tmp_path / "export" / "results.md").read_text()


def test_command_line(tmp_path, capsys):
    data = str(tmp_path / "data")
    prompts = write_prompts(tmp_path / "prompts.jsonl")
    systems = ",".join(folder_system(tmp_path / "systems", n, f) for n, f in (("a", 220.0), ("b", 330.0)))
    create = ["create", "--name", "cli", "--prompts", str(prompts), "--systems", systems, "--raters-per-item", "1",
              "--rater-slots", "2", "--data-dir", data]
    assert cli.main(create) == 0
    assert "6 generated" in capsys.readouterr().out
    assert cli.main(create) == 0 and "0 generated, 6 kept" in capsys.readouterr().out  # resumable
    assert cli.main(["add-rater", "asha", "--campaign", "cli", "--data-dir", data]) == 0
    out = capsys.readouterr().out
    assert "slot 0 of campaign cli" in out and "password: " in out
    assert cli.main(["add-rater", "asha", "--data-dir", data]) == 0
    assert "password unchanged" in capsys.readouterr().out
    assert cli.main(["status", "--name", "cli", "--data-dir", data]) == 0
    out = capsys.readouterr().out
    assert "clips 6 / 6" in out and "ratings: 0 / 3" in out and "| 0 | asha | 0 | 2 |" in out
    assert cli.main(["results", "--name", "cli", "--data-dir", data]) == 0
    assert "# Campaign cli" in capsys.readouterr().out
    assert cli.main(["export", "--name", "cli", "--data-dir", data, "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "campaign_export.zip").is_file()
    capsys.readouterr()
    assert cli.main(["status", "--name", "nope", "--data-dir", data]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No campaign 'nope'") and err.count("\n") == 1
    assert cli.main([*create[:-2], "--raters-per-item", "2", "--data-dir", data]) == 2  # a changed design
    assert "already exists with a different" in capsys.readouterr().err
