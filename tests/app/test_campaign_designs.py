"""The MOS, CMOS, SMOS and MUSHRA designs end to end on campaigns made in the test (tone
`folder:` systems, the espeak system for gold clips and trapping questions): create, rate
through the campaign server's API as three raters (one good, one careless, one who fails the
trapping questions or the hidden reference), read the results and export. Screening must remove
exactly the planted raters, with the rule named; bad input is refused; the balance rules hold;
the MUSHRA anchor is a 3.5 kHz low-pass; crowd mode refuses forged, reused and expired links
and shows the completion code only once the queue is done; a play counts only for audio the
page fetched, and a submit no sooner than its clips last; study-link starts are bounded per
address, and places of failed or late participants go to others.

Run: .venv/bin/python -m pytest tests/app/test_campaign_designs.py -q
"""

from __future__ import annotations

import csv
import itertools
import os
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qsl, quote, urlsplit

import httpx
import numpy as np
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from scipy.signal import welch

from evaluation.audio_io import load_audio
from tests.app.campaign_fixtures import fetch_clips, folder_system, write_prompts
from tests.app.conftest import free_port
from webapp.access import AdminGate
from webapp.campaign.cli import main
from webapp.campaign.data import store as campaign_store
from webapp.campaign.data.conditions import Condition
from webapp.campaign.data.crowd import CrowdLinks
from webapp.campaign.data.crowd_gate import TIME_LIMIT_S
from webapp.campaign.data.definition import Campaign, raters_path
from webapp.campaign.data.raters import RatersFile
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.designs import get_design, option_values, plan_of
from webapp.campaign.server.app import CrowdOptions
from webapp.storage import DataLayout

pytestmark = pytest.mark.slow
ADMIN = "designs-admin-secret-0123"
SCALE = {"mos": (1, 5), "smos": (1, 5), "cmos": (-3, 3), "mushra": (0, 100)}
PLANTED = {"mos": {"careless": "gold", "trapper": "trap"}, "smos": {"careless": "variance", "trapper": "trap"},
           "cmos": {"careless": "variance"}, "mushra": {"careless": "reference", "trapper": "anchor"}}


class FakeClock:
    """now_iso for the stores: `step` (4 s) later at every call, so a rater's time per trial exceeds
    the clips' 0.3 s and P.808's speed rule passes the planted raters for the right reason only."""

    def __init__(self):
        self.t, self.step = 1.7e9, 4.0

    def __call__(self) -> str:
        from datetime import datetime, timezone

        self.t += self.step
        return datetime.fromtimestamp(self.t, timezone.utc).isoformat(timespec="milliseconds")


def query(link: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(link).query))


def create(tmp: Path, design: str, slots: int = 3) -> tuple[DataLayout, Campaign]:
    systems = [folder_system(tmp / "systems", f"sys{k}", 220.0 * (k + 1)) for k in range(2)]
    reference = folder_system(tmp / "systems", "ref", 3000.0)
    extra = {"mos": [], "cmos": ["--reference-condition", systems[0]], "smos": ["--speaker-ref-system", reference],
             "mushra": ["--reference", reference]}[design]
    data = tmp / "data"
    assert main(["create", "--name", design, "--design", design, "--prompts", str(write_prompts(tmp / "p.jsonl")),
                 "--systems", ",".join(systems), "--raters-per-item", str(slots), "--rater-slots", str(slots),
                 "--trap-rate", "0.2", "--data-dir", str(data), *extra]) == 0
    layout = DataLayout(data)
    return layout, Campaign.open(layout, design)


def answers(design: str, trial, rater: str) -> list:
    """What each planted rater gives: `good` follows the conditions, `careless` straight-lines or
    misses gold / the hidden reference, `trapper` ignores what the trap clip asks or the anchor."""
    low, high = SCALE[design]
    if design == "mushra":
        good = {"reference": 100, "anchor": 15}
        out = [good.get(role, 40 + 10 * k) for k, role in enumerate(trial.roles)]
        if rater == "careless":
            out = [60 if role == "reference" else v for role, v in zip(trial.roles, out, strict=True)]
        if rater == "trapper":
            out = [95 if role == "anchor" else v for role, v in zip(trial.roles, out, strict=True)]
        return out
    if trial.kind in ("gold", "trap") and trial.expected is not None:
        right = int(trial.expected)
        wrong = {"gold": 5 if right <= 2 else 1, "trap": right % 5 + 1}[trial.kind]
        bad = (rater == "careless" and trial.kind == "gold") or (rater == "trapper" and trial.kind == "trap")
        return [wrong if bad else right]
    if rater == "careless":
        return [high]
    cond = trial.conditions[trial.roles.index("test")]
    if design == "cmos":
        return [(3, 2, 1)[trial.position % 3]]
    return [high - (1 if cond.endswith("sys0") else 0) - trial.position % 2]  # varied, and sys1 above sys0


def hearing_answers(campaign: Campaign, rater: str) -> list[str]:
    """The digits of the hearing-check clips dealt to `rater` (their login or crowd rater name)."""
    extras = campaign.extra_clips()
    drawn = CampaignStore(campaign.layout.database).hearing_draws(campaign.name)[rater]
    return [extras[key]["answer"] for key in drawn]


def rate_all(client: Client, campaign: Campaign, rater: str, token: str = "", url: str = "",
             who: str | None = None) -> dict:
    """Rate the rater's whole queue through the API, fetching each page's clips from `url` as its
    players do before reporting them played; returns the last page. `who`: the rater name the
    server knows them by (default `rater`, their login)."""
    plan = plan_of(campaign)
    page = client.predict(token, api_name="/campaign_item")
    if page["mode"] == "qualify":
        page = client.predict(token, hearing_answers(campaign, who or rater), api_name="/campaign_qualify")
    while page["mode"] == "trial":
        trial = plan.entries()[page["entry"]]
        fetch_clips(client, url, page["clips"])
        for i in range(len(trial.stimuli)):
            client.predict(token, trial.entry_id, i, api_name="/campaign_played")
        scores = answers(campaign.design, trial, rater)
        sent = {"score": scores} if campaign.design == "mushra" else {"score": scores[0]}
        page = client.predict(token, trial.entry_id, sent, api_name="/campaign_submit")
    return page


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(campaign_store, "now_iso", fake)
    return fake


def serve(layout: DataLayout, campaign: Campaign, crowd: CrowdOptions | None = None):
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from webapp.campaign.server.app import build_campaign_app, launch_campaign

    demo = build_campaign_app(layout.root, campaign.name, crowd=crowd)
    _, url, _ = launch_campaign(demo, AdminGate(ADMIN), port=free_port(), prevent_thread_lock=True)
    return demo, url


@pytest.mark.parametrize("design", ["mos", "cmos", "smos", "mushra"])
def test_each_design_end_to_end_through_the_server(design, tmp_path, clock):
    layout, campaign = create(tmp_path, design)
    raters = RatersFile(raters_path(layout))
    names = ["good", "careless", "trapper"]
    passwords = {n: raters.add(n) for n in names}
    demo, url = serve(layout, campaign)
    try:
        for name in names:
            client = Client(url, auth=(name, passwords[name]), verbose=False, download_files=False)
            last = rate_all(client, campaign, name, url=url)
            assert last["mode"] == "done" and last["done"] == last["total"] > 0 and last["code"] is None
        admin = Client(url, auth=("admin", ADMIN), verbose=False, download_files=False)
        progress, markdown, _chart = admin.predict(api_name="/campaign_results")
        files = [f["path"] if isinstance(f, dict) else f for f in admin.predict(api_name="/campaign_export")]
    finally:
        demo.close()
    assert all(row[2] == row[3] for row in progress["data"])
    planted = {r: rule for r, rule in PLANTED[design].items()}
    for rater, rule in planted.items():  # each planted rater is excluded, by the rule planted for them
        line = next(ln for ln in markdown.splitlines() if ln.startswith(f"- **{rater}** excluded"))
        assert f"{rule}:" in line, line
    assert "- **good** excluded" not in markdown
    if design == "cmos":
        assert "- **trapper** excluded" not in markdown  # no traps in cmos: a good rater by every rule
    header = {"mos": "MOS ± 95 % CI", "cmos": "CMOS ± 95 % CI", "smos": "SMOS ± 95 % CI",
              "mushra": "MUSHRA ± 95 % CI"}[design]
    assert header in markdown
    names_out = {Path(f).name for f in files}
    expected_file = {"mos": "p808_acr", "cmos": "p808_ccr", "smos": "smos_ratings.csv",
                     "mushra": "webmushra_mushra.csv"}[design]
    assert any(n.startswith(expected_file) for n in names_out), names_out
    ratings = next(Path(f) for f in files if Path(f).name == "ratings.csv")
    with open(ratings, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    excluded = {r["rater"] for r in rows if r["excluded"] == "1"}
    assert excluded == set(planted)  # excluded raters stay in the export, marked, with the reason
    assert all(r["exclusion_reason"] for r in rows if r["excluded"] == "1")


def test_bad_input_is_refused_and_nothing_is_stored(tmp_path, clock):
    layout, campaign = create(tmp_path, "mushra", slots=2)
    raters = RatersFile(raters_path(layout))
    passwords = {n: raters.add(n) for n in ("asha", "ben")}
    demo, url = serve(layout, campaign)
    try:
        asha, ben = (Client(url, auth=(n, passwords[n]), verbose=False, download_files=False) for n in passwords)
        page, other = asha.predict("", api_name="/campaign_item"), ben.predict("", api_name="/campaign_item")
        trial = plan_of(campaign).entries()[page["entry"]]
        good = [50] * len(trial.stimuli)
        with pytest.raises(AppError, match="Play every clip"):
            asha.predict("", trial.entry_id, {"score": good}, api_name="/campaign_submit")
        fetch_clips(asha, url, page["clips"])
        for i in range(len(trial.stimuli)):
            asha.predict("", trial.entry_id, i, api_name="/campaign_played")
        for bad in ([101] + good[1:], [-1] + good[1:], good[:-1], ["x"] + good[1:], [50.5] + good[1:],
                    [True] + good[1:]):
            with pytest.raises(AppError):
                asha.predict("", trial.entry_id, {"score": bad}, api_name="/campaign_submit")
        for bad in (good, None, {"scores": good}, "50"):  # not an answers object, or no scores in it
            with pytest.raises(AppError):
                asha.predict("", trial.entry_id, bad, api_name="/campaign_submit")
        with pytest.raises(AppError, match="not in your queue"):
            asha.predict("", other["entry"], {"score": good}, api_name="/campaign_submit")
        with pytest.raises(AppError, match="not in your queue"):
            asha.predict("", other["entry"], 0, api_name="/campaign_played")
        assert CampaignStore(layout.database).rows(campaign.name) == []
        asha.predict("", trial.entry_id, {"score": good}, api_name="/campaign_submit")
        assert len(CampaignStore(layout.database).rows(campaign.name)) == len(trial.stimuli)
    finally:
        demo.close()


def start(client: Client, participant: str, link: dict, saved: str = "") -> str:
    """/campaign_start as the page calls it, with the query parameters of a participant or study link."""
    return client.predict(participant, link.get("sig", ""), link.get("expires", ""), link.get("study", ""), "", "",
                          saved, api_name="/campaign_start")


def test_crowd_mode_refuses_forged_and_reused_links_and_shows_the_code_only_at_the_end(tmp_path, clock):
    layout, campaign = create(tmp_path, "smos", slots=2)
    demo, url = serve(layout, campaign, CrowdOptions(completion_code="RUMIK2026", max_sessions=1))
    links = CrowdLinks.for_layout(layout, campaign.name)
    try:
        client = Client(url, verbose=False, download_files=False)
        link = query(links.participant_link(url, "worker01"))
        with pytest.raises(AppError, match="not valid"):
            start(client, "worker01", {**link, "sig": "0" * len(link["sig"])})
        with pytest.raises(AppError, match="not valid"):
            start(client, "worker02", link)  # worker01's signature
        token = start(client, "worker01", link)
        # A reload of the tab sends the token it kept: the same session, no new one counted (max 1 here).
        assert start(client, "worker01", link, saved=token) == token
        with pytest.raises(AppError, match="used already"):  # a new start of the same link (no kept token)
            start(client, "worker01", link)
        with pytest.raises(AppError, match="not valid"):
            client.predict(token[:-1] + ("0" if token[-1] != "0" else "1"), api_name="/campaign_item")
        first = client.predict(token, api_name="/campaign_item")
        assert first["mode"] == "trial" and "RUMIK2026" not in str(first)
        last = rate_all(client, campaign, "good", token, url=url, who=links.rater_name("worker01"))
        assert last["mode"] == "done" and last["code"] == "RUMIK2026"
        with pytest.raises(AppError, match="expired"):  # a genuine link past its expiry
            start(client, "worker03", query(links.participant_link(url, "worker03", expires_at=int(time.time()) - 1)))
    finally:
        demo.close()
    rows = CampaignStore(layout.database).rows(campaign.name)
    assert {r["rater"] for r in rows} == {links.rater_name("worker01")}


@pytest.mark.parametrize("design", ["mos", "mushra"])
def test_a_play_counts_only_for_fetched_audio_and_a_submit_waits_for_the_clips(design, tmp_path, clock):
    """A participant who reports every clip played without fetching its audio (or only its first
    bytes), or who submits sooner than the page's clips last, stores nothing and gets no code."""
    layout, campaign = create(tmp_path, design, slots=1)
    demo, url = serve(layout, campaign, CrowdOptions(completion_code="RUMIK2026"))
    links = CrowdLinks.for_layout(layout, campaign.name)
    store = CampaignStore(layout.database)
    clock.step = 0.0  # the store's clock stands still until the test moves it
    try:
        client = Client(url, verbose=False, download_files=False)
        token = start(client, "worker01", query(links.participant_link(url, "worker01")))
        rater = links.rater_name("worker01")
        page = client.predict(token, api_name="/campaign_item")
        if page["mode"] == "qualify":
            page = client.predict(token, hearing_answers(campaign, rater), api_name="/campaign_qualify")
        trial = plan_of(campaign).entries()[page["entry"]]
        answer = {"score": [50] * len(trial.stimuli)} if design == "mushra" else {"score": 4}
        for i in range(len(trial.stimuli)):
            with pytest.raises(AppError, match="has not loaded"):
                client.predict(token, trial.entry_id, i, api_name="/campaign_played")
        first_clip = f"{url.rstrip('/')}/gradio_api/file={quote(page['clips'][0])}"
        head = httpx.get(first_clip, headers={"Range": "bytes=0-99"}, timeout=60)
        assert head.status_code == 206 and len(head.content) == 100
        with pytest.raises(AppError, match="has not loaded"):  # the first bytes are not the clip
            client.predict(token, trial.entry_id, 0, api_name="/campaign_played")
        with pytest.raises(AppError, match="Play every clip"):
            client.predict(token, trial.entry_id, answer, api_name="/campaign_submit")
        assert store.played(campaign.name, trial.entry_id) == set() and store.rows(campaign.name) == []
        fetch_clips(client, url, page["clips"])
        for i in range(len(trial.stimuli)):
            client.predict(token, trial.entry_id, i, api_name="/campaign_played")
        with pytest.raises(AppError, match="Listen to every clip"):  # no time passed since the page was shown
            client.predict(token, trial.entry_id, answer, api_name="/campaign_submit")
        assert store.rows(campaign.name) == []
        clock.t += 60.0
        client.predict(token, trial.entry_id, answer, api_name="/campaign_submit")
        assert {r["entry_id"] for r in store.rows(campaign.name)} == {trial.entry_id}
    finally:
        demo.close()


def test_study_starts_are_bounded_per_address_and_places_come_back(tmp_path, clock):
    """Made-up ids from the study link: an address starts only its share; a place held by an id
    that fails the hearing check, or does not finish in time, goes to a real participant; each
    participant hears their own hearing-check clips."""
    layout, campaign = create(tmp_path, "mos", slots=2)
    demo, url = serve(layout, campaign, CrowdOptions(completion_code="RUMIK2026", study_starts_per_address=2))
    links = CrowdLinks.for_layout(layout, campaign.name)
    store, study = CampaignStore(layout.database), query(links.study_link(url))
    made_up, real, late = [f"{k:024x}" for k in (1, 2, 3)], "5f8a1b2c3d4e5f6a7b8c9d0e", "A1B2C3D4E5F6G7"
    try:
        client = Client(url, verbose=False, download_files=False)
        first, second = start(client, made_up[0], study), start(client, made_up[1], study)  # both places taken
        with pytest.raises(AppError, match="network address"):
            start(client, made_up[2], study)
        real_link = query(links.participant_link(url, real))
        with pytest.raises(AppError, match="full"):
            start(client, real, real_link)
        assert [client.predict(t, api_name="/campaign_item")["mode"] for t in (first, second)] == ["qualify"] * 2
        draws = store.hearing_draws(campaign.name)
        keys = [draws[links.rater_name(pid)] for pid in made_up[:2]]
        assert len(keys[0]) == len(keys[1]) == 3 and set(keys[0]).isdisjoint(keys[1])
        with pytest.raises(AppError, match="hearing check"):
            client.predict(first, ["000", "000", "000"], api_name="/campaign_qualify")
        real_token = start(client, real, real_link)  # the failed id's place and slot went back
        assert client.predict(real_token, api_name="/campaign_item")["mode"] == "qualify"
        assert links.rater_name(made_up[0]) not in store.slots(campaign.name).values()
        with pytest.raises(AppError, match="ran out"):
            start(client, made_up[0], study)
        page = client.predict(second, hearing_answers(campaign, links.rater_name(made_up[1])),
                              api_name="/campaign_qualify")
        assert page["mode"] == "trial" and set(store.slots(campaign.name).values()) == {links.rater_name(made_up[1])}
        late_link = query(links.participant_link(url, late))
        with pytest.raises(AppError, match="full"):  # the real participant and the second made-up id hold both
            start(client, late, late_link)
        demo.crowd_gate.clock = lambda: time.time() + TIME_LIMIT_S + 60  # nobody finished in time
        with pytest.raises(AppError, match="ran out"):
            client.predict(second, api_name="/campaign_item")
        late_token = start(client, late, late_link)
        assert client.predict(late_token, api_name="/campaign_item")["mode"] == "qualify"
        page = client.predict(late_token, hearing_answers(campaign, links.rater_name(late)),
                              api_name="/campaign_qualify")
        assert page["mode"] == "trial" and set(store.slots(campaign.name).values()) == {links.rater_name(late)}
    finally:
        demo.close()


def planned(design: str, k: int, slots: int, seed: int) -> SimpleNamespace:
    """What a design's plan reads of a campaign (7 prompts, 3 conditions, gold and trapping clips in
    the manifest), without clips on disk."""
    options = option_values({"reference_condition": "b", "reference": "espeak", "speaker_ref_system": "espeak"})
    extras = {"p0|gold:espeak": {"role": "gold"}, "p1|gold:degraded": {"role": "gold"},
              "p0|trap:0": {"role": "trap", "expected": 3.0}, "p1|trap:1": {"role": "trap", "expected": 5.0}}
    return SimpleNamespace(prompts=[{"id": f"p{n}"} for n in range(7)], conditions=[Condition(c, c) for c in "abc"],
                           raters_per_item=k, rater_slots=slots, seed=seed, options=options,
                           definition={"repeat_fraction": 0.2}, extra_clips=lambda: extras)


@pytest.mark.parametrize("design", ["ab", "mos", "cmos", "smos", "mushra"])
def test_balance_rules_hold_and_a_broken_plan_is_caught(design):
    record = get_design(design)
    for seed, (k, slots) in itertools.product(range(5), [(1, 1), (2, 3), (3, 5)]):
        campaign = planned(design, k, slots, seed)
        plan = record.build_plan(campaign)
        assert record.check_balance(plan, campaign) == [], (seed, k, slots)
    campaign = planned(design, 2, 3, 0)
    plan = record.build_plan(campaign)
    broken = plan.slots[0][0]
    plan.slots[1].append(broken.__class__(**{**broken.__dict__, "slot": 1, "entry_id": "x" * 24}))
    assert record.check_balance(plan, campaign)


def test_the_mushra_anchor_is_a_3500_hz_low_pass_of_the_reference(tmp_path):
    layout, campaign = create(tmp_path, "mushra", slots=1)
    extras = campaign.extra_clips()
    for prompt in campaign.prompts:
        ref = load_audio(campaign.clip_file(extras[f"{prompt['id']}|reference"]), 24000, max_seconds=60)
        anchor = load_audio(campaign.clip_file(extras[f"{prompt['id']}|anchor"]), 24000, max_seconds=60)
        assert extras[f"{prompt['id']}|anchor"]["source"] == extras[f"{prompt['id']}|reference"]["clip_id"]
        # The reference is a 3 kHz tone: below the cut-off, so the anchor keeps it (the 40 dB stop band
        # above 4 kHz is measured on noise in test_campaign_stimuli.py).
        f, p_ref = welch(ref, 24000, nperseg=1024)
        _, p_anchor = welch(anchor, 24000, nperseg=1024)
        keep = (f > 2900) & (f < 3100)
        assert 10 * np.log10(p_anchor[keep].sum() / p_ref[keep].sum()) > -1.0


def test_a_design_needs_its_reference_flags(tmp_path, capsys):
    systems = [folder_system(tmp_path / "systems", f"sys{k}", 220.0 * (k + 1)) for k in range(2)]
    prompts = str(write_prompts(tmp_path / "p.jsonl"))
    for design, message in (("cmos", "--reference-condition"), ("mushra", "--reference SYSTEM"),
                            ("smos", "--speaker-ref")):
        assert main(["create", "--name", design, "--design", design, "--prompts", prompts, "--systems",
                     ",".join(systems), "--data-dir", str(tmp_path / "data")]) == 2
        assert message in capsys.readouterr().err
    assert main(["create", "--name", "r", "--design", "mos", "--prompts", prompts, "--systems", systems[0],
                 "--repeat-fraction", "0.1", "--data-dir", str(tmp_path / "data")]) == 2
    assert "--repeat-fraction is for A/B" in capsys.readouterr().err


def test_mos_qualification_failure_ends_the_session_politely(tmp_path, clock):
    layout, campaign = create(tmp_path, "mos", slots=1)
    raters = RatersFile(raters_path(layout))
    password = raters.add("deaf")
    demo, url = serve(layout, campaign)
    try:
        client = Client(url, auth=("deaf", password), verbose=False, download_files=False)
        page = client.predict("", api_name="/campaign_item")
        assert page["mode"] == "qualify" and len(page["clips"]) == 3
        with pytest.raises(AppError, match="hearing check"):
            client.predict("", ["000", "111", "222"], api_name="/campaign_qualify")
        with pytest.raises(AppError, match="hearing check"):  # no second try, no trials
            client.predict("", api_name="/campaign_item")
    finally:
        demo.close()
    assert CampaignStore(layout.database).qualifications(campaign.name) == {"deaf": False}

