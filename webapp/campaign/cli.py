"""`python -m webapp.campaign`: create a listening-test campaign, add raters, serve it, follow
it, and export its results.

    python -m webapp.campaign create --name pilot --prompts evaluation/prompts/indicemo_style.jsonl \\
        --systems rumik,espeak --setting max_seconds=12 --raters-per-item 3 --rater-slots 6 \\
        --repeat-fraction 0.1 --data-dir outputs/app          # rerun the same line to resume
    python -m webapp.campaign add-rater asha --campaign pilot --data-dir outputs/app   # prints her password once
    python -m webapp.campaign remove-rater asha --data-dir outputs/app   # login gone, her slot free [--drop-ratings]
    RUMIK_ADMIN_PASSWORD=... python -m webapp.campaign serve --name pilot --data-dir outputs/app --port 7870
    python -m webapp.campaign status --name pilot --data-dir outputs/app
    python -m webapp.campaign results --name pilot --data-dir outputs/app
    python -m webapp.campaign judges --name pilot --data-dir outputs/app   # DNSMOS, speaker similarity, rho
    python -m webapp.campaign export --name pilot --data-dir outputs/app --out results/pilot

--data-dir defaults to $RUMIK_APP_DATA, else outputs/app (the app's data dir: campaign
tables live in its ratings database, campaign files under its private campaigns/ folder).
Errors are one line on stderr and exit code 2 (1: clips still missing after `create`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence

from evaluation.report import markdown_table
from rumik_app.cli_args import add_engine_arguments, engine_options
from rumik_app.errors import RumikError, report_user_error
from webapp.access import ADMIN_PASSWORD_ENV, AdminGate
from webapp.campaign.analysis.judges import compute_judges, judges_markdown, judges_path
from webapp.campaign.clips.generate import DEFAULT_BATCH, missing_clips
from webapp.campaign.data.conditions import build_conditions, parse_settings, setting_kinds
from webapp.campaign.data.crowd import LINK_DAYS, MAX_SESSIONS_PER_ID, CrowdLinks
from webapp.campaign.data.crowd_gate import STUDY_STARTS_PER_ADDRESS, TIME_LIMIT_S
from webapp.campaign.data.definition import Campaign, CampaignError, raters_path
from webapp.campaign.data.raters import RatersFile
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.designs import DEFAULT_DESIGN, all_options, get_design, names, plan_of, registry, users
from webapp.campaign.prepare import define_campaign, missing, prepare_campaign
from webapp.campaign.queues import RaterQueues
from webapp.campaign.reports import clip_ratings, export_campaign, results_for
from webapp.guard import ProxyConfigError, trusted_proxies
from webapp.storage import DEFAULT_DATA_DIR, DataLayout

DATA_DIR_ENV = "RUMIK_APP_DATA"
DEFAULT_PORT = 7870
MAX_MISSING_SHOWN = 10


def cmd_create(args: argparse.Namespace) -> int:
    layout = DataLayout(args.data_dir)
    design = get_design(args.design)
    conditions = build_conditions(args.systems.split(","), parse_settings(args.setting),
                                  minimum=design.min_conditions)
    slots = args.rater_slots or args.raters_per_item
    campaign = define_campaign(layout, args.name, args.prompts, conditions, args.raters_per_item, slots,
                               args.repeat_fraction, args.seed, args.limit, design.name,
                               {o.name: getattr(args, o.name) for o in all_options()})
    print(f"campaign {campaign.name} ({campaign.design}): {len(campaign.prompts)} prompts x {len(conditions)} "
          f"conditions ({', '.join(c.id for c in conditions)}); k={campaign.raters_per_item}, "
          f"{campaign.rater_slots} rater slots")
    counts = prepare_campaign(campaign, args.batch_size, args.engine_options)
    for kind, c in counts.items():
        if c:
            print(f"{kind} clips: {c['generated']} generated, {c['kept']} kept from an earlier run, "
                  f"{c['failed']} failed")
    plan = plan_of(campaign)
    if plan is None:
        absent = missing(campaign)
        for rec in absent[:MAX_MISSING_SHOWN]:
            print(f"  missing: {rec['prompt_id']} ({rec['condition_id']}): {rec.get('error')}", file=sys.stderr)
        print(f"error: {len(absent)} clip(s) missing; fix the cause and run the same create command again "
              "(finished clips are kept).", file=sys.stderr)
        return 1
    sizes = sorted({len(q) for q in plan.slots})
    print(f"assignment: {len(plan.slots)} queues of {' or '.join(map(str, sizes))} items (seed {plan.seed}); "
          f"next: add raters with `python -m webapp.campaign add-rater NAME --campaign {campaign.name}`")
    return 0


def cmd_add_rater(args: argparse.Namespace) -> int:
    layout = DataLayout(args.data_dir)
    raters = RatersFile(raters_path(layout))
    password = None
    if args.name not in raters.names() or args.reset_password:
        password = raters.add(args.name, reset=args.reset_password)
    if args.campaign:
        campaign = Campaign.open(layout, args.campaign)
        plan = plan_of(campaign)
        if plan is None:
            raise CampaignError(f"Campaign {campaign.name!r} is not ready (clips missing); finish `create` first.")
        slot = CampaignStore(layout.database).claim_slot(campaign.name, args.name, len(plan.slots))
        if slot is None:
            raise CampaignError(f"Every one of the {len(plan.slots)} rater slots of {campaign.name!r} is taken.")
        print(f"{args.name}: slot {slot} of campaign {campaign.name} ({len(plan.slots[slot])} items)")
    if password is None:
        print(f"{args.name} exists already; password unchanged (--reset-password issues a new one).")
    else:
        print(f"login for {args.name} (shown once; only its hash is stored):\n  user: {args.name}\n"
              f"  password: {password}")
    return 0


def cmd_remove_rater(args: argparse.Namespace) -> int:
    layout = DataLayout(args.data_dir)
    removed = RatersFile(raters_path(layout)).remove(args.name)
    released = CampaignStore(layout.database).release_slots(args.name, drop_ratings=args.drop_ratings)
    if not removed and not released:
        raise CampaignError(f"No rater {args.name!r} here: no login and no slot "
                            "(`python -m webapp.campaign status --name C` lists who holds the slots).")
    print(f"{args.name}: " + ("login removed; their open sessions are refused from the next request on"
                              if removed else "had no login"))
    for r in released:
        fate = "deleted: the next holder rates the whole queue" if args.drop_ratings else \
            "kept, under their name: the next holder continues the queue"
        print(f"  campaign {r['campaign']}: slot {r['slot']} is free ({r['ratings']} rating(s) {fate}); give it to "
              f"someone with `python -m webapp.campaign add-rater NAME --campaign {r['campaign']}`")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    layout = DataLayout(args.data_dir)
    campaign = Campaign.open(layout, args.name)
    clips = campaign.clips()
    expected = len(campaign.prompts) * len(campaign.conditions)
    absent = missing_clips(campaign)
    print(f"campaign {campaign.name}: {len(campaign.prompts)} prompts x {len(campaign.conditions)} conditions; "
          f"clips {expected - len(absent)} / {expected} ({len(clips)} manifest lines)")
    if plan_of(campaign) is None:
        print("assignment: not built yet (clips missing); run create again")
        return 1
    progress = RaterQueues(campaign, CampaignStore(layout.database)).progress()
    done, total = sum(p["done"] for p in progress), sum(p["total"] for p in progress)
    print(f"ratings: {done} / {total}\n")
    print(markdown_table(["slot", "rater", "done", "total", "last rating"],
                         [[p["slot"], p["rater"] or "(free)", p["done"], p["total"], p["last"]] for p in progress]))
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    layout = DataLayout(args.data_dir)
    campaign = Campaign.open(layout, args.name)
    print(results_for(campaign, CampaignStore(layout.database)).markdown())
    return 0


def cmd_judges(args: argparse.Namespace) -> int:
    from webapp.audio_judges import AudioJudges

    layout = DataLayout(args.data_dir)
    campaign = Campaign.open(layout, args.name)
    judges = AudioJudges(speaker_encoder=args.speaker_encoder, device=args.device, operator=True)
    ratings = clip_ratings(campaign, CampaignStore(layout.database))
    saved = compute_judges(campaign, ratings, judges, quality=not args.no_quality, speaker=not args.no_speaker,
                           reference_clip=args.speaker_ref)
    print(judges_markdown(saved))
    print(f"\nwrote {judges_path(campaign)} (shown in the admin's results and included in every export)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    layout = DataLayout(args.data_dir)
    campaign = Campaign.open(layout, args.name)
    files = export_campaign(campaign, CampaignStore(layout.database), args.out)
    print(f"wrote {len(files)} files to {args.out} (bundle: {files[0]})")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from webapp.campaign.server.app import CrowdOptions, build_campaign_app, launch_campaign

    admin = AdminGate.from_sources(args.admin_password)
    crowd = CrowdOptions(args.completion_code, args.max_participants, args.max_sessions, args.time_limit_minutes * 60,
                         args.study_starts_per_address) if args.crowd else None
    demo = build_campaign_app(args.data_dir, args.name, crowd=crowd)
    if crowd is not None:
        print(f"campaign {args.name}: crowd mode (no logins; start links: `python -m webapp.campaign links --name "
              f"{args.name} --base-url URL`)", flush=True)
        launch_campaign(demo, admin, args.host, args.port, args.share, allowed_hosts=tuple(args.allowed_host),
                        forwarded_allow_ips=args.forwarded_allow_ips)
        return 0
    n_raters = len(RatersFile(raters_path(demo.data_layout)).names())
    print(f"campaign {args.name}: {n_raters} rater login(s); admin view: "
          + ("sign in as 'admin' with the admin password" if admin.enabled else
             f"off (no admin password: set ${ADMIN_PASSWORD_ENV}; results: `python -m webapp.campaign results`)"),
          flush=True)
    launch_campaign(demo, admin, args.host, args.port, args.share, allowed_hosts=tuple(args.allowed_host),
                    forwarded_allow_ips=args.forwarded_allow_ips)
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rumik campaign", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        cp = sub.add_parser(name, help=help)
        cp.add_argument("--data-dir", default=os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR),
                        help="the app's private data dir (default: $RUMIK_APP_DATA or %(default)s)")
        return cp

    c = command("create", "define a campaign, pre-generate its clips (resumable), build the assignment")
    c.add_argument("--name", required=True)
    c.add_argument("--prompts", required=True, help="prompt file (JSONL, as evaluation.run reads)")
    c.add_argument("--systems", required=True, help="comma-separated: rumik | rumik:PATH | tiny | espeak | folder:DIR")
    c.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE[,VALUE...]",
                   help=f"{', '.join(setting_kinds())}; several values are crossed with the systems (repeatable)")
    c.add_argument("--raters-per-item", type=int, default=3, help="k distinct raters per pair (default %(default)s)")
    c.add_argument("--rater-slots", type=int, default=None, help="rater queues (default: k, everyone rates all)")
    c.add_argument("--repeat-fraction", type=float, default=0.0,
                   help="share of each queue shown again later, A/B swapped (consistency checks; e.g. 0.1)")
    c.add_argument("--seed", type=int, default=0, help="seed of the clip seeds, the order and the A/B positions")
    add_design_arguments(c)
    c.add_argument("--limit", type=int, default=None, help="only the first K prompts")
    c.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
    add_engine_arguments(c)  # --device --dtype --compile --backend: how rumik systems load
    r = command("add-rater", "create a rater login (prints a one-time password); --campaign also gives a slot")
    r.add_argument("name")
    r.add_argument("--campaign", default=None, help="give the rater the next free slot of this campaign now")
    r.add_argument("--reset-password", action="store_true", help="issue a new password for an existing rater")
    d = command("remove-rater", "delete a rater login and free their slot in every campaign for someone else")
    d.add_argument("name")
    d.add_argument("--drop-ratings", action="store_true",
                   help="also delete their ratings (e.g. a careless rater), so their whole queue is rated again")
    for name, help in (("status", "clips, assignment and progress per rater"),
                       ("results", "scores, win rates with 95 %% CIs, agreement, per-rater statistics")):
        command(name, help).add_argument("--name", required=True)
    j = command("judges", "DNSMOS and speaker similarity per condition beside the human scores, and Spearman's "
                "rho of the ratings with DNSMOS OVRL (saved in the campaign folder; minutes)")
    j.add_argument("--name", required=True)
    j.add_argument("--speaker-ref", default=None, metavar="CLIP", help="one reference voice for every condition "
                   "(default: each condition's system speaking the clip's voice; needed for folder: systems)")
    j.add_argument("--speaker-encoder", default="resemblyzer", help="resemblyzer (default) or hf:MODEL_ID_OR_PATH")
    j.add_argument("--no-quality", action="store_true", help="skip DNSMOS")
    j.add_argument("--no-speaker", action="store_true", help="skip speaker similarity")
    j.add_argument("--device", default=None, help="cpu or cuda (default: DNSMOS on CUDA if available)")
    e = command("export", "results, charts, ratings, IndicEmo judgments and NoVA transcripts to a folder")
    e.add_argument("--name", required=True)
    e.add_argument("--out", required=True)
    s = command("serve", "the rating server: raters and the admin sign in (Gradio login page)")
    s.add_argument("--name", required=True)
    s.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    s.add_argument("--port", type=int, default=DEFAULT_PORT)
    s.add_argument("--share", action="store_true")
    s.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name raters reach this server by besides this machine's own (repeatable; "
                        "*.example.org for a domain); other Host headers are refused (DNS rebinding)")
    s.add_argument("--admin-password", default=None,
                   help=f"the admin login's password (default: ${ADMIN_PASSWORD_ENV}; prefer the variable)")
    s.add_argument("--forwarded-allow-ips", default=None, metavar="ADDRESSES",
                   help="your reverse proxies (comma-separated addresses or networks): their X-Forwarded-For names "
                        "the rater's address (sign-in counts, queue shares). Default: nobody's; on a Hugging Face "
                        "Space the platform's private ranges")
    crowd_designs = ", ".join(d.name for d in registry().values() if d.crowd)
    s.add_argument("--crowd", action="store_true", help=f"crowdsourcing mode ({crowd_designs}): no logins; "
                   "participants start from signed links (`links`) and get a completion code at the end")
    s.add_argument("--completion-code", default=None, help="crowd: the study's completion code as set in Prolific "
                   "(default: one generated once per campaign)")
    s.add_argument("--max-participants", type=int, default=None, help="crowd: participants (default: rater slots)")
    s.add_argument("--max-sessions", type=int, default=MAX_SESSIONS_PER_ID,
                   help="crowd: starts per participant id, reloads included (default %(default)s)")
    s.add_argument("--time-limit-minutes", type=float, default=TIME_LIMIT_S / 60,
                   help="crowd: a participant's time from starting to the completion code; after it an unfinished "
                        "participant's place goes to someone else (default %(default)s; at least Prolific's maximum "
                        "time allowed)")
    s.add_argument("--study-starts-per-address", type=int, default=STUDY_STARTS_PER_ADDRESS,
                   help="crowd: new participant ids one network address may start from the study link an hour "
                        "(default %(default)s)")
    k = command("links", "crowd mode: the signed start link of each participant id, or the one Prolific study link")
    k.add_argument("--name", required=True)
    k.add_argument("--base-url", required=True, help="the campaign server's public address, e.g. https://rate.example.org/")
    k.add_argument("--participant", action="append", default=[], metavar="ID", help="a participant id (repeatable)")
    k.add_argument("--study", action="store_true", help="the Prolific study link (Prolific fills in the id)")
    k.add_argument("--valid-days", type=float, default=LINK_DAYS,
                   help="the links admit participants for this many days (default %(default)s)")
    args = p.parse_args(argv)
    if args.command == "serve":
        try:
            args.forwarded_allow_ips = trusted_proxies(args.forwarded_allow_ips)
        except ProxyConfigError as exc:
            s.error(str(exc))
    if args.command == "create":
        args.engine_options = engine_options(c, args)
    return args


def add_design_arguments(parser: argparse.ArgumentParser) -> None:
    """--design and every design's own flags (`Design.options`), each saying which designs read it."""
    parser.add_argument("--design", choices=names(), default=DEFAULT_DESIGN,
                        help="; ".join(f"{d.name}: {d.summary}" + (" (default)" if d.name == DEFAULT_DESIGN else "")
                                       for d in registry().values()))
    for option in all_options():
        help = f"{', '.join(users(option))}: {option.help}"
        if option.turns_off:
            parser.add_argument(option.flag, dest=option.name, action="store_false", help=help)
        else:
            parser.add_argument(option.flag, dest=option.name, type=option.type, default=option.default,
                                metavar=option.metavar, help=help)


def cmd_links(args: argparse.Namespace) -> int:
    layout = DataLayout(args.data_dir)
    campaign = Campaign.open(layout, args.name)
    links = CrowdLinks.for_layout(layout, campaign.name)
    if not args.participant and not args.study:
        raise CampaignError("Give --participant ID (repeatable) or --study.")
    expires_at = int(time.time() + args.valid_days * 86400)
    if args.study:
        print("study link (give it to Prolific only: it admits any Prolific id until "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(expires_at))}): "
              f"{links.study_link(args.base_url, expires_at)}")
    for pid in args.participant:
        print(f"{pid}\t{links.participant_link(args.base_url, pid, expires_at)}")
    return 0


COMMANDS = {"links": cmd_links,
            "create": cmd_create, "add-rater": cmd_add_rater, "remove-rater": cmd_remove_rater, "status": cmd_status,
            "results": cmd_results, "judges": cmd_judges, "export": cmd_export, "serve": cmd_serve}


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except RumikError as exc:
        return report_user_error(exc)
