"""Annotation campaigns: fixed listening tests (blind A/B pairs, MOS by ITU-T P.808, CMOS, SMOS,
MUSHRA by ITU-R BS.1534, and any design added as one module of `designs/`) with pre-generated
clips, per-rater queues behind their own logins or signed crowd links, and results with
confidence intervals, screening and agreement.

    python -m webapp.campaign create|add-rater|remove-rater|serve|links|status|results|judges|export ...  (cli.py)

Layers, lowest first (a module imports its own layer and the ones below, never one above):

1. `data/`: conditions and settings, the campaign folder, the one store, rater logins, crowd links;
2. `trials/`, `clips/`, `analysis/`: plans and their shared mechanisms (dealing, balance,
   questions); the clips (test, extra, stimuli); result helpers (scores, pairs, file formats,
   audio judges);
3. `designs/`: one `Design` record per design, found by looking (docs/campaigns.md);
4. `queues`, `prepare`, `reports`: what a rater can do, a campaign's clips and plan, its
   results and export, each asking the campaign's record;
5. `server/`: the rating page and the app;
6. `cli`, `__main__`: the command line.
"""
