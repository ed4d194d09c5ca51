"""Checkpoints in the published format (docs/ARCHITECTURE.md §2): find, fetch, load, save, build.

    from rumik_app.checkpoint.load import resolve_checkpoint, load_model, save_checkpoint
    path = resolve_checkpoint("rumik-ai/rumik-oss-1")     # a folder, a hub id, or "tiny"
    from rumik_app.checkpoint.tiny import build_tiny_checkpoint
    build_tiny_checkpoint("/tmp/tiny")                    # random weights, the exact format

Modules: `load` (resolve, load and save, never remote code), `hub` (the one short probe
before any hub download), `tiny` (random checkpoints for tests and `--model tiny`).
"""
