"""Annotation campaigns: fixed listening tests (blind A/B pairs, MOS by ITU-T P.808, CMOS, SMOS,
MUSHRA by ITU-R BS.1534) with pre-generated clips, per-rater queues behind their own logins or
signed crowd links, and results with confidence intervals, screening and agreement.

    python -m webapp.campaign create|add-rater|serve|links|status|results|export ...   (see cli.py)

Modules: `design` (conditions, the A/B assignment), `designs` (the other designs' trial plans),
`definition` (the campaign folder), `generate` and `extras` (clips, references, anchors, gold and
trapping clips, resumable), `stimuli` (how the extra clips are made), `raters` (logins), `crowd`
(signed participant links), `store` and `trial_store` (SQLite tables), `queues` and `trials` (what
a rater may do), `results`, `trial_results`, `export` and `formats` (statistics and files), `ui`,
`trial_ui` and `trial_app` (the server).
"""
