"""A design is one module: a toy design (a 3-point preference, "A better / same / B better") is
written as one new file in `webapp/campaign/designs/` of a copy of the packages, no other file
edited, and a fresh interpreter creates a campaign with it through the command line, serves it,
has two raters rate their queues through the campaign server's API (every clip fetched and
played, a bad answer refused), and gets its results and export.

Run: .venv/bin/python -m pytest tests/app/test_campaign_toy_design.py -q
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.app.campaign_fixtures import folder_system, write_prompts
from tests.servers import ROOT

pytestmark = pytest.mark.slow
PACKAGES = ("rumik_app", "evaluation", "webapp")
TOY = textwrap.dedent('''
    """A 3-point preference between two clips of one prompt: A better, the same, B better."""

    from __future__ import annotations

    import random
    from dataclasses import dataclass

    from evaluation.listening_tests import Scoring
    from webapp.campaign.analysis.scores import ScoreChart
    from webapp.campaign.designs.record import SCORE, ScaleDesign
    from webapp.campaign.trials import balance
    from webapp.campaign.trials.dealing import Alternation, deal_blocks
    from webapp.campaign.trials.plan import TEST, TrialPlan, clip_key, make_trial, renumber
    from webapp.campaign.trials.questions import Question

    CHOICES = (("A better", 1), ("The same", 0), ("B better", -1))


    @dataclass(frozen=True)
    class Preference3(ScaleDesign):
        def build_plan(self, campaign) -> TrialPlan:
            rng = random.Random(campaign.seed)
            dealt = deal_blocks([p["id"] for p in campaign.prompts], campaign.raters_per_item, campaign.rater_slots,
                                rng)
            ids = [c.id for c in campaign.conditions]
            pairs = [(a, b) for i, a in enumerate(ids) for b in ids[i + 1:]]
            sides, slots = Alternation(pairs, rng), []
            for s, prompts in enumerate(dealt):
                units = [(p, pair) for p in prompts for pair in pairs]
                rng.shuffle(units)
                queue = []
                for prompt, (a, b) in units:
                    order = (a, b) if sides.first((a, b)) else (b, a)
                    queue.append(make_trial(s, f"{prompt}/{a}~{b}", prompt, TEST, [clip_key(prompt, c) for c in order],
                                            [TEST, TEST], order, reference=b))
                sides.end_slot()
                slots.append(renumber(s, queue))
            return TrialPlan(self.name, campaign.seed, campaign.raters_per_item, slots)

        def check_balance(self, plan, campaign) -> list[str]:
            return balance.coverage(plan)

        def rows(self, trial, answers, clips) -> list[dict]:
            first = trial.conditions[0] != trial.reference  # the pair's first condition played as A
            raw = answers[SCORE]
            at = 0 if first else 1
            return [{"design": self.name, "stimulus": at, "role": TEST, "condition": trial.conditions[at],
                     "reference": trial.reference, "clip_id": clips[trial.stimuli[at]]["clip_id"],
                     "score": raw if first else -raw, "raw_score": raw, "side": "AB"[at]}]


    DESIGN = Preference3(
        name="pref3", title="Preference (3-point)", summary="A better / same / B better",
        intro="Listen to both clips and say which is better.",
        instructions="**Which clip is better?** Play both in full first.",
        questions=(Question(SCORE, "Which clip is better?", choices=CHOICES,
                            missing="Choose A better, the same or B better."),),
        min_conditions=2, max_clips=2, clip_names=("A", "B"), clips_side_by_side=True,
        scoring=Scoring("pref3", "Preference", "ordinal", domain=(-1, 0, 1), against_reference=True),
        chart=ScoreChart((-1.1, 1.1), reference=0.0))
''')
# Run in the copy: the command line, the server and its API, the results and the export.
RUN = textwrap.dedent('''
    import contextlib, csv, io, json, socket, sys
    from urllib.parse import quote
    import httpx
    from datetime import datetime, timezone
    from pathlib import Path
    from gradio_client import Client
    from gradio_client.exceptions import AppError
    from webapp.access import AdminGate
    from webapp.campaign import cli
    from webapp.campaign.data import store
    from webapp.campaign.data.definition import Campaign, raters_path
    from webapp.campaign.data.raters import RatersFile
    from webapp.campaign.data.store import CampaignStore
    from webapp.campaign.designs import plan_of
    from webapp.campaign.server.app import build_campaign_app, launch_campaign
    from webapp.storage import DataLayout

    prompts, systems, data, out = sys.argv[1:5]
    clock = iter(range(10**6))  # the stores' clock, 4 s a call: a page takes longer than its clips
    store.now_iso = lambda: datetime.fromtimestamp(1.7e9 + 4 * next(clock), timezone.utc).isoformat()
    out_help = io.StringIO()
    with contextlib.redirect_stdout(out_help), contextlib.suppress(SystemExit):
        cli.parse_args(["create", "--help"])
    assert cli.main(["create", "--name", "toy", "--design", "pref3", "--prompts", prompts, "--systems", systems,
                     "--raters-per-item", "2", "--rater-slots", "2", "--data-dir", data]) == 0
    layout = DataLayout(data)
    campaign = Campaign.open(layout, "toy")
    plan = plan_of(campaign)
    passwords = {name: RatersFile(raters_path(layout)).add(name) for name in ("asha", "ben")}
    demo = build_campaign_app(data, "toy")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, url, _ = launch_campaign(demo, AdminGate("toy-admin-secret-0123"), port=port, prevent_thread_lock=True)
    refused = []
    try:
        for name, answers in (("asha", [1, 0, 1]), ("ben", [-1, 0, -1])):  # varied: no straight-lining
            client = Client(url, auth=(name, passwords[name]), verbose=False, download_files=False)
            page = client.predict("", api_name="/campaign_item")
            while page["mode"] == "trial":
                answer = answers[page["done"]]
                for clip in page["clips"]:  # fetched as the page's players do: a play counts only then
                    httpx.get(url.rstrip("/") + "/gradio_api/file=" + quote(clip), cookies=client.cookies,
                              timeout=60).raise_for_status()
                for i in range(len(page["clips"])):
                    client.predict("", page["entry"], i, api_name="/campaign_played")
                for bad in ({"score": 2}, {"score": "A better"}, {}) if page["done"] == 0 else ():
                    try:
                        client.predict("", page["entry"], bad, api_name="/campaign_submit")
                    except AppError as exc:
                        refused.append(str(exc))
                page = client.predict("", page["entry"], {"score": answer}, api_name="/campaign_submit")
        admin = Client(url, auth=("admin", "toy-admin-secret-0123"), verbose=False, download_files=False)
        progress, markdown, chart = admin.predict(api_name="/campaign_results")
    finally:
        demo.close()
    assert cli.main(["export", "--name", "toy", "--data-dir", data, "--out", out]) == 0
    with open(Path(out) / "ratings.csv", newline="", encoding="utf-8") as fh:
        exported = list(csv.DictReader(fh))
    print(json.dumps({"help": out_help.getvalue(), "queues": [len(q) for q in plan.slots], "refused": refused,
                      "progress": progress["data"], "markdown": markdown, "chart": bool(chart),
                      "stored": CampaignStore(layout.database).rows("toy"), "exported": exported,
                      "results": json.loads((Path(out) / "results.json").read_text()),
                      "files": sorted(p.name for p in Path(out).iterdir())}))
''')


def test_a_design_added_as_one_module_is_created_rated_summarised_and_exported(tmp_path):
    tree = tmp_path / "tree"
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "webapp" / "campaign" / "designs" / "pref3.py").write_text(TOY, encoding="utf-8")  # the one edit
    changed = filecmp.dircmp(ROOT / "webapp" / "campaign" / "designs", tree / "webapp" / "campaign" / "designs",
                             ignore=["__pycache__"])
    assert changed.right_only == ["pref3.py"] and not changed.left_only and not changed.diff_files
    prompts = write_prompts(tmp_path / "prompts.jsonl")
    systems = ",".join(folder_system(tmp_path / "systems", f"sys{k}", 220.0 * (k + 1)) for k in range(2))
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", RUN, str(prompts), systems, str(tmp_path / "data"),
                           str(tmp_path / "export")], cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])

    words = " ".join(got["help"].split())  # --design's choices and help come from the registry
    assert "{ab,cmos,mos,mushra,pref3,smos}" in words and "pref3: A better / same / B better" in words
    assert got["queues"] == [3, 3]  # 3 prompts x 1 pair, k = 2 raters in 2 slots: both rate everything
    assert len(got["refused"]) == 3 * 2  # out of the scale, not a choice, no answer: each rater's tries refused
    assert all("Choose A better, the same or B better" in r for r in got["refused"])
    assert sorted(row[1:4] for row in got["progress"]) == [["asha", 3, 3], ["ben", 3, 3]]
    assert "Preference ± 95 % CI" in got["markdown"] and " vs " in got["markdown"] and got["chart"]
    # asha: A better or the same; ben: B better or the same. Stored as the pair's first condition against its second.
    stored = got["stored"]
    assert len(stored) == 6 and {r["design"] for r in stored} == {"pref3"}
    for r in stored:
        assert r["raw_score"] in ({1, 0} if r["rater"] == "asha" else {-1, 0})
        assert r["score"] == (r["raw_score"] if r["side"] == "A" else -r["raw_score"])
    assert "2 raters; 0 excluded by screening" in got["markdown"]  # both pass P.808's screening
    assert [(r["rater"], r["entry_id"], float(r["score"])) for r in got["exported"]] == [
        (r["rater"], r["entry_id"], r["score"]) for r in stored]
    assert got["results"]["design"] == "pref3" and len(got["results"]["conditions"]) == 1
    assert {"campaign_export.zip", "results.md", "results.json", "ratings.csv", "campaign.json",
            "clips_manifest.jsonl", "manifest.json"} <= set(got["files"])
