"""The transformers releases this project runs on, and the two places where they differ.

The main environment (requirements.txt) pins transformers 5.24; the vLLM environment
(requirements-vllm.txt) gets 5.19, the newest release vLLM 0.32 accepts. For our code they
differ in two ways:

- The KV-cache keyword of a model's forward: `cache=` from 5.20 on, `past_key_values=` in
  5.19. Our code passes `cache=`; on 5.19, `cache=` would silently land in `**kwargs` and
  every decode step would start from an empty cache. `patch_cache_keyword()` makes 5.19's
  Cohere2 body accept `cache=` (it renames the keyword; a no-op on 5.20+), and
  `cache_keyword(module)` names the right keyword for a module we call ourselves (Mimi).
- Mimi's module layout: 5.2x splits Mimi into encoder and decoder sub-models
  (`mimi.decoder.{upsample, decoder_transformer, decoder_seanet}`), 5.19 keeps them flat
  (`mimi.{upsample, decoder_transformer, decoder}`). `mimi_decoder_parts(mimi)` returns the
  three pieces on either. Both releases read the published (kyutai) Mimi weight names.

Library module, no CLI; exercised by the whole suite in both environments.
"""

from __future__ import annotations

import functools
import inspect

import torch.nn as nn

PATCHED_FLAG = "_rumik_accepts_cache_keyword"


def cache_keyword(module: nn.Module) -> str:
    """The name of `module.forward`'s KV-cache argument: "cache" (5.20+) or "past_key_values"."""
    params = inspect.signature(type(module).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _accept_cache_keyword(cls: type) -> None:
    forward = cls.forward
    if getattr(forward, PATCHED_FLAG, False) or "cache" in inspect.signature(forward).parameters:
        return

    @functools.wraps(forward)
    def renamed(self, *args, cache=None, **kwargs):
        if cache is not None:
            kwargs["past_key_values"] = cache
        return forward(self, *args, **kwargs)

    setattr(renamed, PATCHED_FLAG, True)
    cls.forward = renamed


def patch_cache_keyword() -> None:
    """Let the Cohere2 body take `cache=` on transformers 5.19 (idempotent; no-op on 5.20+)."""
    from transformers.models.cohere2.modeling_cohere2 import Cohere2Model

    _accept_cache_keyword(Cohere2Model)


def mimi_decoder_parts(mimi: nn.Module) -> tuple[nn.Module | None, nn.Module, nn.Module]:
    """(upsample or None, decoder transformer, SEANet decoder with `.layers`) of a MimiModel."""
    decoder = mimi.decoder
    if hasattr(decoder, "decoder_seanet"):  # transformers >= 5.20: a MimiDecoderModel
        return decoder.upsample, decoder.decoder_transformer, decoder.decoder_seanet
    return mimi.upsample, mimi.decoder_transformer, decoder  # transformers 5.19: flat
