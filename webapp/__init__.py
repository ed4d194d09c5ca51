"""webapp: helpers behind `app.py`, the Gradio demo of rumik-oss-1 (docs/ARCHITECTURE.md §1).

Run the app with `python app.py`; annotation campaigns have their own command and server,
`python -m webapp.campaign` (the `campaign` subpackage).

- `systems`: the system selector's back-ends, loaded once per process (rumik-oss-1, the
  espeak-ng classical baseline, the tiny random-weight checkpoint) and the startup banner.
- `synth_tab`: the Synthesise tab and the `/synthesize` API.
- `ratings`: the SQLite store of blind A/B ratings, its IndicEmo and NoVA exports.
- `rate_tab`: the Compare & rate tab for annotators.
- `scoring` / `evaluate_tab`: the Evaluate tab (WER/CER/GCER, NoVA verdicts, chart).
- `storage`: the private data-dir layout and the one folder visitors' files are served from.
- `access`: the admin password for results and exports, and `--auth` logins.
- `campaign`: listening tests with pre-generated blind pairs, per-rater queues behind their
  own logins, and results with bootstrap CIs and Krippendorff's alpha.

Nothing here does model math: it builds `SynthesisRequest`s, calls `rumik_app` and
`evaluation`, and turns their errors into one readable message each.
"""
