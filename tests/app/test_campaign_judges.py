"""Audio judges beside a campaign's listeners (webapp.campaign.analysis.judges): on a small synthetic
campaign of real espeak-ng speech (two voices, four prompts) rated by a script, the saved
per-clip DNSMOS and speaker similarity equal the judges run by hand, Spearman's rho equals
scipy's, values are reused on a rerun, the section says when ratings came in since, and the
export carries it; then the admin's button on the campaign server, and the command line.

Run: .venv/bin/python -m pytest tests/app/test_campaign_judges.py -q
"""

from __future__ import annotations

import json
import os
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from scipy import stats

from evaluation.audio_io import LOCAL_MAX_SECONDS, load_audio
from evaluation.quality import DNSMOS
from evaluation.speaker import ResemblyzerEncoder, cosine
from evaluation.systems import EspeakSystem
from evaluation.voice_ref import VoiceReferences
from rumik_app.audio import SAMPLE_RATE
from tests.app.campaign_fixtures import write_prompts
from tests.app.conftest import free_port
from tests.evaluation.conftest import espeak_wav
from webapp.access import AdminGate
from webapp.audio_judges import AudioJudges
from webapp.campaign import cli
from webapp.campaign.analysis.judges import JUDGES_FILE, compute_judges, judges_markdown, judges_path, load_judges
from webapp.campaign.clips.generate import generate_clips
from webapp.campaign.data.conditions import build_conditions, parse_settings
from webapp.campaign.data.definition import Campaign, raters_path
from webapp.campaign.data.raters import RatersFile
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.designs import design_of
from webapp.campaign.prepare import define_campaign, ensure_plan
from webapp.campaign.queues import RaterQueues
from webapp.campaign.reports import clip_ratings, export_campaign
from webapp.storage import DataLayout, ServedFolder

pytestmark = pytest.mark.slow  # DNSMOS and resemblyzer on 8 real clips, and the voices' references

PROMPTS = [{"id": f"p{k}", "text": text, "language": "en"} for k, text in enumerate((
    "The train to the coast leaves at seven in the morning.",
    "Please remember to water the plants while I am away.",
    "We walked along the river until the sun went down.",
    "My brother cooked dinner for the whole family last night."))]
# Each rater's 1-5 score of (Ira's clip, Aisha's clip) per prompt: varied, so the ranks mean something.
SCORES = {"asha": {"p0": (5, 2), "p1": (4, 3), "p2": (2, 4), "p3": (3, 1)},
          "ben": {"p0": (4, 2), "p1": (5, 2), "p2": (3, 5), "p3": (2, 2)}}


def rate(queues: RaterQueues, campaign: Campaign, rater: str, limit: int | None = None) -> None:
    """Submit `rater`'s SCORES for their queue (the first `limit` items)."""
    ids = [c.id for c in campaign.conditions]
    done = 0
    while (shown := queues.next_trial(rater)) is not None and (limit is None or done < limit):
        score = dict(zip(ids, SCORES[rater][shown.trial.prompt_id], strict=True))
        a, b = (score[c] for c in shown.trial.conditions)  # clips A and B
        queues.submit(rater, shown.entry_id, {"score": [a, b], "preference": "A" if a >= b else "B"})
        done += 1


@pytest.fixture(scope="module")
def rated(tmp_path_factory):
    """espeak-ng in two voices (Ira, Aisha) on four prompts, both raters rating every pair but ben's last."""
    tmp = tmp_path_factory.mktemp("campaign-judges")
    layout = DataLayout(tmp / "data")
    conditions = build_conditions(["espeak"], parse_settings(["voice=Ira,Aisha"]))
    campaign = define_campaign(layout, "judged", write_prompts(tmp / "prompts.jsonl", PROMPTS), conditions, 2, 2,
                               0.0, 0)
    generate_clips(campaign)
    assert ensure_plan(campaign)
    store = CampaignStore(layout.database, layout=design_of(campaign))
    queues = RaterQueues(campaign, store, ServedFolder(tmp / "served"))
    rate(queues, campaign, "asha")
    rate(queues, campaign, "ben", limit=3)
    return SimpleNamespace(tmp=tmp, layout=layout, campaign=campaign, store=store, queues=queues)


@pytest.fixture(scope="module")
def judged(rated):
    judges = AudioJudges()
    return judges, compute_judges(rated.campaign, clip_ratings(rated.campaign, rated.store), judges)


def clip_means(campaign: Campaign, store: CampaignStore) -> dict[tuple[str, str], float]:
    """Each clip's mean first-hearing score, computed here from the stored rows."""
    scores: dict[tuple[str, str], list[int]] = {}
    for r in store.rows(campaign.name):
        for cond, score in ((r["condition_a"], r["score_a"]), (r["condition_b"], r["score_b"])):
            scores.setdefault((r["prompt_id"], cond), []).append(score)
    return {k: float(np.mean(v)) for k, v in scores.items()}


def test_saved_values_equal_the_judges_run_by_hand(rated, judged):
    _, saved = judged
    encoder, dnsmos, espeak = ResemblyzerEncoder(), DNSMOS(p808=False), EspeakSystem()
    refs = VoiceReferences(encoder, system=espeak)
    records = {(r["prompt_id"], r["condition_id"]): r for r in rated.campaign.clips().values()}
    entries = {(e["prompt"], e["condition"]): e for e in saved["clips"]}
    assert set(entries) == set(records) and len(entries) == 8
    for key, rec in records.items():
        audio = load_audio(rated.campaign.clip_file(rec), max_seconds=LOCAL_MAX_SECONDS)
        [q] = dnsmos.score([audio], SAMPLE_RATE)
        values = entries[key]["values"]
        assert values["dnsmos_ovrl"] == pytest.approx(q.ovrl, abs=1e-5) and 1 <= values["dnsmos_ovrl"] <= 5
        assert values["dnsmos_sig"] == pytest.approx(q.sig, abs=1e-5)
        assert values["dnsmos_bak"] == pytest.approx(q.bak, abs=1e-5)
        sim = cosine(refs.get(rec["request"]["voice"]), encoder.embed([audio], SAMPLE_RATE)[0])
        assert values["speaker_sim"] == pytest.approx(sim, abs=1e-5)
        assert entries[key]["sha256"] == rec["sha256"]
    assert saved["judges"]["references"] == {c.id: "espeak's own voice" for c in rated.campaign.conditions}


def test_rho_equals_scipy_and_the_table_sits_beside_the_human_scores(rated, judged):
    ratings = clip_ratings(rated.campaign, rated.store)
    saved = compute_judges(rated.campaign, ratings, judged[0])  # over the ratings stored now
    human = clip_means(rated.campaign, rated.store)
    ovrl = {(e["prompt"], e["condition"]): e["values"]["dnsmos_ovrl"] for e in saved["clips"]}
    keys = sorted(human)
    theirs = stats.spearmanr([human[k] for k in keys], [ovrl[k] for k in keys])
    agreement = saved["results"]["spearman_human_vs_dnsmos_ovrl"]
    assert agreement["n"] == 8 and agreement["rho"] == pytest.approx(theirs.statistic, abs=1e-12)
    assert agreement["p_value"] == pytest.approx(theirs.pvalue)
    assert agreement["low"] < agreement["rho"] < agreement["high"]  # ties: the CI of the defined resamples
    ira = rated.campaign.conditions[0].id
    by_prompt = [human[(p["id"], ira)] for p in PROMPTS]
    assert saved["results"]["systems"][ira]["human_score"]["mean"] == pytest.approx(np.mean(by_prompt))
    assert set(saved["results"]["systems"][ira]) == {"human_score", "dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak",
                                                     "speaker_sim"}
    assert json.loads(judges_path(rated.campaign).read_text()) == saved == load_judges(rated.campaign)
    assert "| espeak [voice=Ira] |" in saved["markdown"] and "Spearman's rho" in saved["markdown"]


def test_a_rerun_reuses_the_clips_values_and_new_ratings_show_as_pending(rated, judged, monkeypatch):
    judges, saved = judged

    def refuse(*args, **kwargs):
        raise AssertionError("a clip was judged again although it did not change")

    monkeypatch.setattr(judges.quality(), "score", refuse)
    monkeypatch.setattr(judges.encoder(), "embed", refuse)
    again = compute_judges(rated.campaign, clip_ratings(rated.campaign, rated.store), judges)
    assert again["clips"] == saved["clips"] and again["results"] == saved["results"]
    rate(rated.queues, rated.campaign, "ben")  # ben's last item
    stored = 2 * len(rated.store.rows(rated.campaign.name))
    section = judges_markdown(load_judges(rated.campaign), stored)
    assert f"{stored} clip ratings are stored now: compute the audio judges again" in section
    newer = compute_judges(rated.campaign, clip_ratings(rated.campaign, rated.store), judges)
    assert newer["clip_ratings"] == stored and "stored now" not in judges_markdown(newer, stored)


def test_the_export_carries_the_audio_judges(rated, judged, tmp_path):
    files = export_campaign(rated.campaign, rated.store, tmp_path / "export")
    assert tmp_path / "export" / JUDGES_FILE in files
    saved = load_judges(rated.campaign)
    assert json.loads((tmp_path / "export" / JUDGES_FILE).read_text()) == saved
    numbers = json.loads((tmp_path / "export" / "results.json").read_text())
    assert numbers["audio_judges"]["results"] == saved["results"]
    md = (tmp_path / "export" / "results.md").read_text()
    assert "## Audio judges beside the listeners" in md and "Spearman's rho" in md and "# Campaign judged" in md
    with zipfile.ZipFile(files[0]) as zf:
        assert JUDGES_FILE in zf.namelist()


def test_the_admins_button_on_the_campaign_server(rated, judged):
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from webapp.campaign.server.app import build_campaign_app, launch_campaign

    secret = "campaign-judges-admin-0123"
    password = RatersFile(raters_path(rated.layout)).add("asha", reset=True)
    demo = build_campaign_app(rated.layout.root, rated.campaign.name)
    _, url, _ = launch_campaign(demo, AdminGate(secret), port=free_port(), prevent_thread_lock=True)
    try:
        admin = Client(url, auth=("admin", secret), verbose=False, download_files=False)
        section = admin.predict(api_name="/campaign_judges")
        assert section.startswith("## Audio judges beside the listeners") and "Spearman's rho" in section
        assert "espeak's own voice" in section and "stored now" not in section
        _, results_md, *_ = admin.predict(api_name="/campaign_results")
        assert "## Audio judges beside the listeners" in results_md and "# Campaign judged" in results_md
        rater = Client(url, auth=("asha", password), verbose=False, download_files=False)
        with pytest.raises(AppError, match="admin view"):
            rater.predict(api_name="/campaign_judges")
    finally:
        demo.close()


def test_command_line_with_one_reference_clip(rated, judged, capsys, tmp_path, monkeypatch):
    """A new speaker reference judges speaker similarity again and reuses every clip's DNSMOS."""
    ref = espeak_wav(tmp_path / "ref.wav", "en-us+m3", "A male voice reads this sentence as the reference.")
    before = judges_path(rated.campaign).read_bytes()  # the systems' own voices, put back for other tests

    def refuse(*args, **kwargs):
        raise AssertionError("DNSMOS ran again although no clip changed")

    monkeypatch.setattr(DNSMOS, "score", refuse)
    args = ["judges", "--name", rated.campaign.name, "--data-dir", str(rated.layout.root), "--speaker-ref", str(ref)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "Spearman's rho" in out and "clip ref.wav" in out and f"wrote {judges_path(rated.campaign)}" in out
    saved = load_judges(rated.campaign)
    assert set(saved["judges"]["references"].values()) == {"clip ref.wav"}
    dnsmos_before = {(e["prompt"], e["condition"]): {k: v for k, v in e["values"].items() if k.startswith("dnsmos")}
                     for e in json.loads(before)["clips"]}
    assert {(e["prompt"], e["condition"]): {k: v for k, v in e["values"].items() if k.startswith("dnsmos")}
            for e in saved["clips"]} == dnsmos_before and len(dnsmos_before) == 8
    encoder = ResemblyzerEncoder()
    male = encoder.embed([ref])[0]  # the 22.05 kHz file, converted once to the encoder's 16 kHz
    entry = saved["clips"][0]
    rec = next(r for r in rated.campaign.clips().values()
               if (r["prompt_id"], r["condition_id"]) == (entry["prompt"], entry["condition"]))
    clip = encoder.embed([load_audio(rated.campaign.clip_file(rec), max_seconds=60)], SAMPLE_RATE)[0]
    assert entry["values"]["speaker_sim"] == pytest.approx(cosine(male, clip), abs=1e-5)
    assert cli.main(["judges", "--name", rated.campaign.name, "--data-dir", str(rated.layout.root),
                     "--speaker-ref", str(tmp_path / "missing.wav")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no such audio file" in err and err.count("\n") == 1
    judges_path(rated.campaign).write_bytes(before)
