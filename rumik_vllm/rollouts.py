"""vLLM's outputs as the engine's `Rollouts`: one request's ids, log-probs and end, then the batch.

    row = RequestOutput()
    new = row.extend(completion)                      # each DELTA/FINAL output of one vLLM request
    row.finish(completion, layout, stop_column)       # its end: stop head, `</audio>` or max_tokens
    rollouts = build_rollouts(rows, prompts, params, owners, "sample", layout, timings)

`rumik_vllm.engine.VLLMEngine` collects a `RequestOutput` per vLLM request and packs a batch
with `build_rollouts`, through the same packer as the in-process decoders
(`rumik_app.decode.rollouts.pack_rollouts`), so GRPO reads one layout from either backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from rumik_app.decode.rollouts import Rollouts, StopRecord, pack_rollouts
from rumik_app.decode.sampling import FINISH_END_TOKEN, FINISH_MAX_TOKENS, FINISH_STOP_HEAD, RowParams, stop_floor
from rumik_app.model.tokens import TokenLayout


@dataclass
class RequestOutput:
    """One vLLM request's output so far: generated ids and their log-probs."""

    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    reason: str = ""
    stop_log_prob: float = math.nan

    def extend(self, completion) -> list[int]:
        """Append a DELTA/FINAL completion; returns the new ids."""
        new = list(completion.token_ids)
        self.tokens += new
        for token, entry in zip(new, completion.logprobs or [{}] * len(new), strict=True):
            self.log_probs.append(float(entry[token].logprob) if token in entry else math.nan)
        return new

    def finish(self, completion, layout: TokenLayout, stop_column: int) -> None:
        """Classify the end: the stop column means the stop head (dropped), `</audio>` is kept."""
        last = self.tokens[-1] if self.tokens else None
        if last == stop_column:
            self.tokens.pop()
            self.stop_log_prob = self.log_probs.pop()
            self.reason = FINISH_STOP_HEAD
        elif last == layout.audio_end_token_id:
            self.reason = FINISH_END_TOKEN
        elif completion.finish_reason == "length":
            self.reason = FINISH_MAX_TOKENS
        else:
            raise RuntimeError(f"vLLM ended a row with finish_reason={completion.finish_reason!r}")


def build_rollouts(results: list[RequestOutput], prompts: list[list[int]], rows: list[RowParams],
                   owners: list[int], stop_mode: str, layout: TokenLayout, timings: dict) -> Rollouts:
    """`Rollouts` exactly as the in-process decoders lay them out (`pack_rollouts`), from vLLM's rows.

    The stop head was checked at every boundary t = kQ with max(min_new_tokens, Q) <= t up
    to the row's end: the stop position (stop head), the `</audio>` position, or the last
    generated position (max_new_tokens). vLLM reports only the stopping decision's log-prob;
    the others are NaN.
    """
    batch = len(results)
    num_quantizers = layout.num_quantizers
    width = max((len(result.tokens) for result in results), default=0)
    token_ids = torch.full((batch, width), -1, dtype=torch.long)
    log_probs = torch.zeros(batch, width)
    stops = StopRecord.empty(batch, width // num_quantizers + 1)
    for index, (result, row) in enumerate(zip(results, rows, strict=True)):
        length = len(result.tokens)
        token_ids[index, :length] = torch.tensor(result.tokens, dtype=torch.long)
        log_probs[index, :length] = torch.tensor(result.log_probs, dtype=torch.float32)
        last_check = length if result.reason == FINISH_STOP_HEAD else length - 1
        floor = stop_floor(row.min_new_tokens, num_quantizers)
        for frame in range(1, last_check // num_quantizers + 1):  # a decision before each such frame
            if frame * num_quantizers >= floor:
                stops.mask[index, frame] = True
                stops.log_probs[index, frame] = math.nan  # vLLM reports only the deciding one
        if result.reason == FINISH_STOP_HEAD:
            stops.decisions[index, length // num_quantizers] = True
            stops.log_probs[index, length // num_quantizers] = result.stop_log_prob
    reasons = [result.reason for result in results]
    return pack_rollouts(token_ids, log_probs, stops, reasons, prompts, rows, owners, layout, restrict_phase=True,
                         stop_mode=stop_mode, timings=timings)
