"""Teacher-forced log-probs of GRPO rollout actions under a model, with gradients (docs/ARCHITECTURE.md §7).

Library module, no command line; `training.grpo.trainer` wraps `PolicyScorer` with accelerate::

    scorer = PolicyScorer(engine.model, engine.layout, restrict_phase=True)
    batch = ScoringBatch.from_rollouts(rollouts, engine.layout.num_quantizers, rows=[0, 1], pad_id=engine.pad_id)
    token_logp, stop_logp = scorer(batch)      # [b, n], [b, f], differentiable
    both = ScoringBatch.cat([batch, other], pad_id=engine.pad_id)      # rows of both, padded to the widest
    some = both.select([2, 0], engine.layout.num_quantizers)          # those rows, trimmed to their longest

One forward of the body over `prompt + generated` (right-padded, so no attention mask is
needed: with causal attention real tokens never see the padding after them). The hidden
state at index p - 1 + t predicts generated position t; `AudioHead.sequence_log_probs`
gives log softmax(logits / T) over the audio-only rows the sampler used (the same rows,
`</audio>` rule and temperature; top-k/top-p truncation is not part of the policy density,
as in TRL). Stop slot j's decision was made on the hidden state at p - 1 + j * Q, and its
log-prob is logsigmoid(+logit) for "stop" and logsigmoid(-logit) for "continue".

`PolicyScorer` is an `nn.Module` whose `forward` does all of this, so wrapping it with
`accelerator.prepare` (DDP) makes gradient synchronisation see the call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rumik_app.decode.rollouts import Rollouts
from rumik_app.decode.sampling import scoring_temperature
from rumik_app.errors import ConfigError
from rumik_app.model.lm import AudioHead
from rumik_app.model.tokens import TokenLayout


@dataclass
class ScoringBatch:
    """Rows of a `Rollouts`, laid out for one teacher-forced forward.

    input_ids: [b, L] prompt + generated tokens, right-padded with pad_id;
    token_index: [b, n] hidden index that predicts generated position t (clamped at padding);
    tokens: [b, n] generated ids (-1 padding); token_mask: [b, n] bool;
    stop_index: [b, f] hidden index of stop slot j; stop_decisions, stop_mask: [b, f] bool;
    temperature: [b] float (sampling temperature; 0 = greedy, scored at 1);
    min_new_tokens: [b] long. n, f: the longest selected row's tokens and stop slots.
    """

    input_ids: torch.Tensor
    token_index: torch.Tensor
    tokens: torch.Tensor
    token_mask: torch.Tensor
    stop_index: torch.Tensor
    stop_decisions: torch.Tensor
    stop_mask: torch.Tensor
    temperature: torch.Tensor
    min_new_tokens: torch.Tensor

    @classmethod
    def from_rollouts(cls, rollouts: Rollouts, num_quantizers: int, rows: list[int] | None = None,
                      pad_id: int = 0) -> "ScoringBatch":
        """Select `rows` (default: all) of `rollouts`; trims to their longest row."""
        rows = list(range(len(rollouts))) if rows is None else list(rows)
        q = num_quantizers
        lengths = [int(rollouts.lengths[i]) for i in rows]
        n = max(lengths) if lengths else 0
        f = n // q + 1
        prompts = [rollouts.prompt_ids[i] for i in rows]
        width = max(len(p) + length for p, length in zip(prompts, lengths, strict=True))
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        for k, (i, p, length) in enumerate(zip(rows, prompts, lengths, strict=True)):
            input_ids[k, : len(p)] = torch.tensor(p, dtype=torch.long)
            input_ids[k, len(p) : len(p) + length] = rollouts.token_ids[i, :length]
        token_index, stop_index = _positions(torch.tensor([len(p) for p in prompts], dtype=torch.long), n, q, width)
        sel = torch.tensor(rows, dtype=torch.long)
        params = [rollouts.params[i] for i in rows]
        return cls(
            input_ids=input_ids,
            token_index=token_index,
            tokens=rollouts.token_ids[sel, :n],
            token_mask=rollouts.token_mask[sel, :n],
            stop_index=stop_index,
            stop_decisions=pad_cols(rollouts.stop_decisions[sel], f),
            stop_mask=pad_cols(rollouts.stop_mask[sel], f),
            temperature=torch.tensor([p.temperature for p in params], dtype=torch.float32),
            min_new_tokens=torch.tensor([p.min_new_tokens for p in params], dtype=torch.long),
        )

    def to(self, device: torch.device | str) -> "ScoringBatch":
        return ScoringBatch(**{k: v.to(device) for k, v in self.__dict__.items()})

    def select(self, rows: list[int], num_quantizers: int) -> "ScoringBatch":
        """Rows `rows` (with repeats, in that order), trimmed to their longest row: the layout
        `from_rollouts` gives for those rows alone."""
        idx = torch.as_tensor(list(rows), dtype=torch.long)
        lengths = self.token_mask[idx].sum(1)
        n = int(lengths.max()) if len(idx) else 0
        f = n // num_quantizers + 1
        prompt = self.stop_index[idx, 0] + 1  # stop slot 0 sits at prompt length - 1 (never clamped)
        width = int((prompt + lengths).max()) if len(idx) else 0
        token_index, stop_index = _positions(prompt, n, num_quantizers, width)
        return ScoringBatch(
            input_ids=self.input_ids[idx, :width], token_index=token_index, tokens=self.tokens[idx, :n],
            token_mask=self.token_mask[idx, :n], stop_index=stop_index,
            stop_decisions=pad_cols(self.stop_decisions[idx], f), stop_mask=pad_cols(self.stop_mask[idx], f),
            temperature=self.temperature[idx], min_new_tokens=self.min_new_tokens[idx],
        )

    @classmethod
    def cat(cls, batches: list["ScoringBatch"], pad_id: int = 0) -> "ScoringBatch":
        """The rows of `batches` in one batch, right-padded to the widest (`fills`)."""
        fills = cls.fills(pad_id)
        return cls(**{name: cat_rows([getattr(b, name) for b in batches], fill) for name, fill in fills.items()})

    @staticmethod
    def fills(pad_id: int = 0) -> dict[str, int]:
        """Padding value of every field: pad_id for input ids, -1 for tokens, False / 0 elsewhere
        (padded index positions point at position 0: they are masked)."""
        return {"input_ids": pad_id, "token_index": 0, "tokens": -1, "token_mask": 0, "stop_index": 0,
                "stop_decisions": 0, "stop_mask": 0, "temperature": 0, "min_new_tokens": 0}

    @property
    def num_actions(self) -> int:
        """Unmasked actions: generated tokens plus stop-head decisions."""
        return int(self.token_mask.sum()) + int(self.stop_mask.sum())


def _positions(prompt_lengths: torch.Tensor, n: int, num_quantizers: int,
               width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_index [b, n], stop_index [b, n // Q + 1]) of right-padded rows of `width`: the hidden
    index that predicts generated position t is p - 1 + t, stop slot j's is p - 1 + j * Q
    (clamped into the row at padding)."""
    start = prompt_lengths.reshape(-1, 1) - 1
    token_index = (start + torch.arange(n)[None]).clamp(max=max(width - 1, 0))
    stop_index = (start + num_quantizers * torch.arange(n // num_quantizers + 1)[None]).clamp(max=max(width - 1, 0))
    return token_index, stop_index


def pad_cols(x: torch.Tensor, width: int) -> torch.Tensor:
    """[b, w] -> [b, width]: cut, or right-padded with zeros (False)."""
    if x.shape[1] >= width:
        return x[:, :width]
    pad = torch.zeros(x.shape[0], width - x.shape[1], dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=1)


def cat_rows(parts: list[torch.Tensor], fill: float | int = 0) -> torch.Tensor:
    """Concatenate tensors along dim 0, padding every other dim to the largest with `fill`:
    [b_k, w_k, ...] -> [sum b_k, max w_k, ...] (1-D parts are simply concatenated)."""
    if not parts:
        raise ValueError("cat_rows needs at least one tensor")
    shape = [max(p.shape[d] for p in parts) for d in range(1, parts[0].dim())]
    out = []
    for p in parts:
        padded = torch.full((p.shape[0], *shape), fill, dtype=p.dtype, device=p.device)
        padded[(slice(None), *(slice(0, s) for s in p.shape[1:]))] = p
        out.append(padded)
    return torch.cat(out, 0)


class PolicyScorer(nn.Module):
    """forward(batch) -> (token_logp [b, n], stop_logp [b, f]) float32, 0 at masked positions.

    model: a RumikOSSForCausalLM (with peft, the base model with adapters injected).
    restrict_phase: score with the codebook-restricted head (must match the rollouts).
    """

    def __init__(self, model: nn.Module, layout: TokenLayout, restrict_phase: bool = True):
        super().__init__()
        self.model = model
        self.layout = layout
        self.restrict_phase = restrict_phase

    def forward(self, batch: ScoringBatch) -> tuple[torch.Tensor, torch.Tensor]:
        head = AudioHead(self.model, self.layout, restrict_phase=self.restrict_phase)
        hidden = self.model.body(input_ids=batch.input_ids, use_cache=False).last_hidden_state
        width = hidden.shape[-1]
        tok_hidden = hidden.gather(1, batch.token_index[..., None].expand(-1, -1, width))
        token_logp = torch.zeros(batch.tokens.shape, dtype=torch.float32, device=hidden.device)
        temps = scoring_temperature(batch.temperature)  # greedy rows are scored at 1, as sampled
        for temp in torch.unique(temps).tolist():
            rows = (temps == temp).nonzero().flatten()
            logp = head.sequence_log_probs(tok_hidden[rows], batch.tokens[rows], temperature=float(temp),
                                           min_new_tokens=batch.min_new_tokens[rows])
            token_logp = token_logp.index_copy(0, rows, logp)
        token_logp = token_logp * batch.token_mask
        stop_hidden = hidden.gather(1, batch.stop_index[..., None].expand(-1, -1, width))
        logit = self.model.stop_logits(stop_hidden)
        stop_logp = torch.where(batch.stop_decisions, F.logsigmoid(logit), F.logsigmoid(-logit))
        return token_logp, stop_logp * batch.stop_mask


def apply_lora(model: nn.Module, r: int, alpha: int, dropout: float, target_modules: list[str],
               train_stop_head: bool = True):
    """Inject LoRA adapters into `model` in place; returns the `peft.PeftModel`.

    The base model object keeps working (the engine samples through it, adapters active);
    `peft_model.disable_adapter()` gives the reference policy without a copy. The stop head
    is fully trainable when `train_stop_head` (peft `modules_to_save`). LoRA trains on the
    unquantised weights the trainers load; a quantised model (`quantize=`) is a ConfigError.
    """
    from peft import LoraConfig, get_peft_model

    from rumik_app.model.quantize import has_quantized_linears

    if has_quantized_linears(model):
        raise ConfigError("LoRA trains on unquantised weights, and this model was loaded with quantize=...: load it "
                          "without quantize (the trainers' own engines never quantise).")

    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(target_modules),
                        modules_to_save=["stop_predictor"] if train_stop_head else None)
    return get_peft_model(model, config)


def merged_state_dict(peft_model, adapter: str = "default") -> dict[str, torch.Tensor]:
    """The base model's state dict with the adapter merged in, under the published key names.

    Computed out of place (W + delta per LoRA layer), so the live model is untouched (merging
    in place and unmerging would round bf16 weights). Tensors are detached copies on CPU.
    """
    with torch.no_grad():
        return {k: v.detach().to("cpu", copy=True) for k, v in MergedWeights(peft_model, adapter).items()}


class MergedWeights(Mapping):
    """The published-name view of a peft model with its adapter merged in, computed per key on
    access (W + delta for a LoRA layer's weight; the trained copy for `modules_to_save`; the
    base tensor otherwise), out of place: the live model is untouched. Values are detached and
    stay on the model's device. `published(name)` maps a trainable parameter of the base model
    (`...q_proj.lora_A.default.weight`) to the published weight it changes (`...q_proj.weight`)."""

    def __init__(self, peft_model, adapter: str = "default"):
        from peft.tuners.lora import LoraLayer

        self.adapter = adapter
        base = peft_model.get_base_model()
        self.lora = {name: mod for name, mod in base.named_modules() if isinstance(mod, LoraLayer)}
        self.raw = {k: v for k, v in base.state_dict(keep_vars=True).items()
                    if ".lora_" not in k and ".original_module." not in k}
        self.keys_ = {self.published(k): k for k in self.raw}

    @staticmethod
    def published(name: str) -> str:
        """A base-model key or trainable parameter name -> the published key it is (or changes)."""
        if ".lora_" in name:
            return name.split(".lora_")[0] + ".weight"
        return _MODULES_TO_SAVE.sub(".", name).replace(".base_layer.", ".")

    def __getitem__(self, key: str) -> torch.Tensor:
        raw = self.keys_[key]
        value = self.raw[raw].detach()
        module, _, param = key.rpartition(".")
        if ".base_layer." in raw and param == "weight":
            with torch.no_grad():
                delta = self.lora[module].get_delta_weight(self.adapter)
                value = (value.float() + delta.float()).to(value.dtype)
        return value

    def __iter__(self):
        return iter(self.keys_)

    def __len__(self) -> int:
        return len(self.keys_)


_MODULES_TO_SAVE = re.compile(r"\.modules_to_save\.[^.]+\.")
