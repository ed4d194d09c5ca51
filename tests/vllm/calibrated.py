"""A tiny float32 checkpoint (head size 64) whose greedy rows end in all three ways.

Random weights never stop by themselves (the tiny stop head's bias is -20, and `</audio>`
is one row among 2,049). Tests of the stop rules need rows that end by the stop head, by
`</audio>` and at max_new_tokens, at known frame boundaries, so this module edits two
things of a tiny checkpoint, measured on the engine backend (CPU, float32):

1. The stop head's output bias: the largest stop logit over every frame boundary of the
   three prompts gets +margin, all others stay below 0 (so exactly one row, the one that
   holds that maximum, stops there).
2. The `</audio>` row of the tied embedding: orthogonal to the final hidden state at every
   other boundary (its logit there is ~0, below the best unit's), aligned with the hidden
   state at the chosen boundary of the `</audio>` row, and scaled to win there by 1 logit.

Neither edit changes any token before a row's end (`</audio>` is never an input, and the
stop head does not feed the network), so the engine's greedy rows are as planned; the
fixture checks that with the engine before any vLLM test uses the checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rumik_app import SynthesisRequest, TTSEngine
from rumik_app.checkpoint.load import save_checkpoint
from rumik_app.checkpoint.tiny import TinySpec, build_tiny_checkpoint

# Head size 256 / 4 = 64: vLLM's CPU attention supports it (the default tiny's 16 is not).
SPEC = TinySpec(hidden=256, heads=4, kv_heads=2, ffn=512, layers=2)
MAX_NEW_TOKENS = 64  # 8 frames: boundaries 8, 16, ..., 56
END_BOUNDARY = 32  # where the `</audio>` row ends
STOP_MARGIN_MIN = 1e-3
END_MARGIN = 1.0
ROLE_TEXTS = (
    ("Hello there, how are you today?", "Ira"),
    ("नमस्ते दोस्तों, आज मौसम बहुत अच्छा है।", "Aisha"),
    ("<laugh> That was really funny.", "Siya"),
)


def greedy_requests() -> list[SynthesisRequest]:
    return [SynthesisRequest(text, voice=voice, seed=i, temperature=0.0, max_new_tokens=MAX_NEW_TOKENS)
            for i, (text, voice) in enumerate(ROLE_TEXTS)]


@torch.no_grad()
def _boundary_hidden(engine: TTSEngine, req: SynthesisRequest, tokens: list[int]) -> dict[int, torch.Tensor]:
    """Final hidden states that predict each frame boundary t >= Q of a greedy row: {t: [h]}."""
    prompt = engine.prompt_ids(req)
    ids = torch.tensor([prompt + tokens[:-1]])
    hidden = engine.model.body(input_ids=ids, use_cache=False).last_hidden_state[0]
    q = engine.layout.num_quantizers
    return {t: hidden[len(prompt) - 1 + t] for t in range(q, len(tokens), q)}


def _unit_max(engine: TTSEngine, h: torch.Tensor) -> float:
    """Best codebook-0 unit logit for hidden state h (what `</audio>` competes with)."""
    return float(engine.head.logits(h[None], 0, False)[0, :-1].max())


@torch.no_grad()
def calibrate(engine: TTSEngine) -> dict[str, int]:
    """Edit engine.model in place (see module doc); returns {role: prompt index} for
    "stop_head", "end_token" and "max_tokens"."""
    model, lay = engine.model, engine.layout
    end_row = model.get_input_embeddings().weight[lay.audio_end_token_id]
    end_row.zero_()  # `</audio>` logit 0: below the best unit at every boundary while we measure
    reqs = greedy_requests()
    rollouts = engine.generate_batch(reqs)
    assert rollouts.finish_reasons == ["max_tokens"] * len(reqs), rollouts.finish_reasons
    rows = [rollouts.token_ids[i, : rollouts.lengths[i]].tolist() for i in range(len(reqs))]
    hidden = [_boundary_hidden(engine, r, t) for r, t in zip(reqs, rows, strict=True)]
    stop = {(i, t): float(model.stop_logits(h)) for i, hs in enumerate(hidden) for t, h in hs.items()}
    (stop_row, stop_t), best = max(stop.items(), key=lambda kv: kv[1])
    others = [v for (i, t), v in stop.items() if i != stop_row or t < stop_t]
    margin = (best - max(others)) / 2
    assert margin > STOP_MARGIN_MIN, f"stop logits too close to calibrate ({margin})"
    model.stop_predictor[3].bias -= best - margin
    end_idx = next(i for i in range(len(reqs)) if i != stop_row)
    keep_low = [h for i, hs in enumerate(hidden) for t, h in hs.items()
                if (i == end_idx and t < END_BOUNDARY) or (i == stop_row and t <= stop_t)
                or i not in (stop_row, end_idx)]
    target = hidden[end_idx][END_BOUNDARY]
    basis, _ = torch.linalg.qr(torch.stack(keep_low).T)  # [h, k] orthonormal
    direction = target - basis @ (basis.T @ target)
    direction = direction / direction.norm()
    scale = (_unit_max(engine, target) + END_MARGIN) / (engine.head.logit_scale * float(target @ direction))
    end_row.copy_(direction * scale)
    for h in keep_low:  # `</audio>` must lose at every other boundary
        end_logit = engine.head.logit_scale * float(h @ end_row)
        assert end_logit < _unit_max(engine, h) - STOP_MARGIN_MIN, "`</audio>` would win early"
    max_idx = next(i for i in range(len(reqs)) if i not in (stop_row, end_idx))
    return {"stop_head": stop_row, "end_token": end_idx, "max_tokens": max_idx}


def build_calibrated_checkpoint(out_dir: Path) -> tuple[Path, dict[str, int]]:
    """Tiny checkpoint -> calibrated float32 checkpoint at out_dir; returns (path, roles)."""
    source = build_tiny_checkpoint(out_dir.parent / f"{out_dir.name}-source", SPEC)
    engine = TTSEngine.from_pretrained(str(source), device="cpu", dtype="float32")
    roles = calibrate(engine)
    save_checkpoint(engine.model, engine.config, source, out_dir, dtype=torch.float32)
    return out_dir, roles
