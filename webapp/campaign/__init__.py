"""Annotation campaigns: fixed listening tests with pre-generated blind pairs, per-rater
queues behind their own logins, and results with confidence intervals and agreement.

    python -m webapp.campaign create|add-rater|serve|status|results|export ...   (see cli.py)

Modules: `design` (conditions, balanced assignment), `definition` (the campaign folder),
`generate` (clips, resumable), `raters` (logins), `store` (SQLite tables), `queues` (what a
signed-in rater may do), `results` and `export` (statistics and files), `ui` (the server).
"""
