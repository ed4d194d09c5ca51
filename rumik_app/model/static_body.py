"""The Cohere2 body over a static KV cache (gpt-fast style): fixed shapes, one row per slot.

    body = StaticBody(model, batch=4, max_len=1024)
    hidden = body.prefill(prompt_ids, lengths, slots)   # [b, h]: last prompt position per row
    hidden = body.decode(tokens, positions)             # tokens, positions: [B] -> [B, h]
    hidden = body.decode(tokens, positions, bank, ids)  # + each row's LoRA (ids: [B] bank slots)

Runs the checkpoint's own transformers modules (layer norms, q/k/v/o projections, MLPs, so
LoRA or quantised linears keep working) but keeps keys and values in buffers allocated
once, `[B, H_kv, L, D]` per layer, and indexes them by absolute position per row: row i's
prompt sits in columns 0..len-1 and its token at position p is written to column p. So
every row has its own position and rows can join and leave a running batch (continuous
batching), while `decode` keeps the same shapes on every call, which is what lets it be
compiled and captured as a CUDA graph.

Attention follows transformers' Cohere2 exactly: sliding-window layers (`layer_types`) use
interleaved RoPE and see keys with `position > query - sliding_window`; full-attention
layers use no positional encoding and see every earlier key. Columns beyond a row's position
hold stale values from an earlier occupant or padding and are always masked. Grouped-query
attention folds the query heads of one KV head into the query axis, so the cache is read as
stored, never repeated.

Per-row LoRA (library voices, `rumik_app.voices.lora.AdapterBank`): given a bank and each
row's slot in it, every adapted projection adds that row's own low-rank delta. Without a bank
the layers run exactly as the checkpoint's modules do, with no adapter arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers.models.cohere2.modeling_cohere2 import apply_rotary_pos_emb, repeat_kv

from rumik_app.voices.lora import AdapterBank


class StaticBody:
    """Prefill and one-token decode of the Cohere2 body over preallocated KV buffers."""

    def __init__(self, model, batch: int, max_len: int):
        cfg = model.config
        self.lm = model.model  # the Cohere2Model (embeddings, layers, final norm, rotary)
        self.batch, self.max_len = batch, max_len
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.groups = self.heads // self.kv_heads
        weight = self.lm.embed_tokens.weight
        device, dtype = weight.device, weight.dtype
        shape = (batch, self.kv_heads, max_len, self.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.lm.layers]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.lm.layers]
        self.windows = [layer.self_attn.sliding_window for layer in self.lm.layers]
        self.columns = torch.arange(max_len, device=device)
        self.rows = torch.arange(batch, device=device)
        # RoPE for every position, computed once by the model's own rotary module (its
        # values depend only on the position, so a table is exact).
        with torch.no_grad():
            cos, sin = self.lm.rotary_emb(weight[:1][None], self.columns[None])
        self.cos, self.sin = cos[0], sin[0]  # [L, D]
        for buf in (*self.keys, *self.values, self.cos, self.sin, self.columns, self.rows):
            torch._dynamo.mark_static_address(buf)

    def _mask(self, window: int | None, query_pos: torch.Tensor) -> torch.Tensor:
        """Visible key columns for queries at `query_pos` [...]: bool [..., L]."""
        cols = self.columns
        visible = cols <= query_pos[..., None]
        if window is not None:
            visible = visible & (cols > query_pos[..., None] - window)
        return visible

    def _projections(self, index: int, layer, h: torch.Tensor, bank: AdapterBank | None,
                     ids: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Callable]:
        """q, k, v ([B, T, *]) and the output function (attention out -> (o_proj, MLP), summed by
        the caller in the checkpoint's order) of one layer, with each row's adapter from `bank`
        (slots `ids` [B]) when one is given."""
        attn, mlp = layer.self_attn, layer.mlp
        if bank is None:
            return attn.q_proj(h), attn.k_proj(h), attn.v_proj(h), lambda out: (attn.o_proj(out), mlp(h))

        def proj(name: str, linear, x: torch.Tensor) -> torch.Tensor:
            if name not in bank.modules:
                return linear(x)
            return linear(x) + bank.delta(index, name, x, ids)

        def output(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            gated = mlp.act_fn(proj("gate_proj", mlp.gate_proj, h)) * proj("up_proj", mlp.up_proj, h)
            return proj("o_proj", attn.o_proj, out), proj("down_proj", mlp.down_proj, gated)

        return (proj("q_proj", attn.q_proj, h), proj("k_proj", attn.k_proj, h), proj("v_proj", attn.v_proj, h),
                output)

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, bank: AdapterBank | None = None,
               ids: torch.Tensor | None = None) -> torch.Tensor:
        """Feed one token per row. tokens, positions: [B] long -> final hidden states [B, h].

        Writes each row's key/value at column `positions[i]`; every row runs (fixed shape).
        bank, ids: per-row LoRA (ids [B]: each row's bank slot, 0 = none), or None.
        """
        batch = tokens.shape[0]
        x = self.lm.embed_tokens(tokens[:, None])  # [B, 1, h]
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # [B, 1, D]
        masks = {w: self._mask(w, positions)[:, None, None] for w in set(self.windows)}  # [B, 1, 1, L]
        layers = zip(self.lm.layers, self.keys, self.values, self.windows, strict=True)
        for index, (layer, keys, values, window) in enumerate(layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q, k, v, output = self._projections(index, layer, h, bank, ids)
            q = q.view(batch, 1, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(batch, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(batch, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            if window is not None:  # Cohere2: RoPE on sliding-window layers only
                q, k = apply_rotary_pos_emb(q, k, cos, sin)
            # index_put (not scatter) so the compiler writes the cache in place, no copy of it
            keys[self.rows[:batch], :, positions] = k[:, :, 0]
            values[self.rows[:batch], :, positions] = v[:, :, 0]
            q = q.reshape(batch, self.kv_heads, self.groups, self.head_dim)  # query heads of one KV head
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=masks[window], scale=attn.scaling)
            out = out.reshape(batch, 1, self.heads * self.head_dim)
            attended, fed = output(out)
            x = x + attended + fed  # Cohere's parallel block: o_proj(attention) + MLP
        return self.lm.norm(x)[:, 0]

    def prefill(self, prompt_ids: list[list[int]], slots: list[int], bank: AdapterBank | None = None,
                adapters: list[int] | None = None) -> torch.Tensor:
        """Run prompts into the cache rows `slots` (columns 0..len-1 each).

        Prompts are right-padded together; returns the final hidden state at each prompt's
        last position, [b, h]. Raises ValueError when a prompt does not fit the cache.
        bank, adapters: per-row LoRA (each prompt's bank slot, 0 = none), or None.
        """
        lengths = [len(p) for p in prompt_ids]
        width = max(lengths)
        if width >= self.max_len:
            raise ValueError(f"prompt of {width} tokens does not fit a cache of {self.max_len} positions")
        device = self.columns.device
        ids = torch.zeros(len(prompt_ids), width, dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            ids[i, : len(p)] = torch.tensor(p, dtype=torch.long)
        ids = ids.to(device)
        rows = torch.tensor(slots, device=device)
        batch = len(slots)
        positions = torch.arange(width, device=device)
        cos, sin = self.cos[:width][None], self.sin[:width][None]
        masks = {w: self._mask(w, positions)[None, None, :, :width] for w in set(self.windows)}  # [1,1,T,T]
        x = self.lm.embed_tokens(ids)
        adapter_ids = torch.tensor(adapters, device=device) if bank is not None else None
        layers = zip(self.lm.layers, self.keys, self.values, self.windows, strict=True)
        for index, (layer, keys, values, window) in enumerate(layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q, k, v, output = self._projections(index, layer, h, bank, adapter_ids)
            q = q.view(batch, width, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(batch, width, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(batch, width, self.kv_heads, self.head_dim).transpose(1, 2)
            if window is not None:
                q, k = apply_rotary_pos_emb(q, k, cos, sin)
            keys[rows, :, :width] = k
            values[rows, :, :width] = v
            out = F.scaled_dot_product_attention(q, repeat_kv(k, self.groups), repeat_kv(v, self.groups),
                                                 attn_mask=masks[window], scale=attn.scaling)
            out = out.transpose(1, 2).reshape(batch, width, self.heads * self.head_dim)
            attended, fed = output(out)
            x = x + attended + fed
        hidden = self.lm.norm(x)
        return hidden[torch.arange(batch, device=device), torch.tensor(lengths, device=device) - 1]
