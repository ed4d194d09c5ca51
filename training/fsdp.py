"""FSDP2 for the trainers: sharding, gradient sync, clipping, full and DCP-sharded state.

    if uses_fsdp2(cfg, acc.num_processes):
        shard(objective, model.model.layers, mixed_precision="bf16")   # then build the optimiser
    with no_sync(objective, enabled=not last_micro_batch): ...backward...
    norm = clip_grad_norm(objective.parameters(), 1.0)                   # over all ranks
    state = full_state_dict(objective)            # collective; the full weights on rank 0, {} elsewhere
    gather_into(objective, replica, prefix="model.")   # collective; the full weights into a replica, tensor by tensor
    save_sharded(folder, objective, optimizer)    # collective: DCP, every rank writes its shards
    load_sharded(folder, objective, optimizer)    # any world size, also one plain process (resharding)

Why `torch.distributed.fsdp.fully_shard` directly and not accelerate's FSDP2 plugin
(`FullyShardedDataParallelPlugin(fsdp_version=2)`): accelerate 1.x turns the plugin on only for
GPU-like distributed types (`AcceleratorState` leaves a MULTI_CPU run as DDP and drops the plugin),
so the plugin cannot run, nor be tested, on CPU processes over gloo; `fully_shard` can. The
trainers keep accelerate for everything else (process group, device, reductions, backward), and
under FSDP2 they do not pass the model to `accelerator.prepare` (that would wrap it in DDP).

Sharding: each decoder layer is its own FSDP unit (`fully_shard(layer)`), then the root (the
wing's objective module) holds what is left: the tied embedding / LM head, the final norm and
the stop head, all-gathered for the whole root forward, so reading the tied embedding outside
the LM head's own forward (SFT's "audio" head) is right. Gradients are reduce-scattered and
averaged over ranks, as DDP averages them, so the trainers' losses need no change.

Mixed precision: with "bf16" the parameters are all-gathered and computed in bf16 and gradients
reduced in fp32 (`MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`) over fp32
sharded masters, which the optimiser steps; with "no" everything stays fp32 (the equality test).
Activation checkpointing is the trainers' own (`RunConfig.activation_checkpointing`), applied
before sharding.

Checkpoints (training.trainer.Trainer.save): the model and AdamW state go through
`torch.distributed.checkpoint` into CKPT/dcp/, each rank writing its shards; DCP reshards on
load, so a run resumes on the same world size or on another (one plain process included).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterable, Iterator

import torch
from torch import nn

from training.config import DISTRIBUTED  # noqa: F401  (re-exported: the values of RunConfig.distributed)

DCP_DIR = "dcp"  # a checkpoint's sharded model + optimiser state (FSDP2 runs)


def uses_fsdp2(distributed: str, num_processes: int) -> bool:
    """FSDP2 applies with `distributed = "fsdp2"` and several processes (one process needs neither)."""
    return distributed == "fsdp2" and num_processes > 1


def shard(root: nn.Module, layers: Iterable[nn.Module], mixed_precision: str = "no") -> nn.Module:
    """`fully_shard` every module of `layers` (the decoder layers), then `root`; in place.
    mixed_precision: "bf16" (bf16 params, fp32 reduce) or "no" (fp32). Build the optimiser after."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if mixed_precision == "bf16" else MixedPrecisionPolicy())
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(root, mp_policy=policy)
    return root


@contextlib.contextmanager
def no_sync(module: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Accumulate gradients locally (no reduce-scatter) inside the block, when `enabled`."""
    if not enabled:
        yield
        return
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def clip_grad_norm(params: Iterable[nn.Parameter], max_norm: float) -> float:
    """Clip sharded (DTensor) gradients to `max_norm` (0: measure only); returns the total norm
    over every rank, before clipping."""
    from torch.distributed.tensor import DTensor

    params = [p for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    if max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return float(norm)


def full_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded, CPU) state dict on rank 0 and {} on the others; every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def gather_into(module: nn.Module, replica: nn.Module, prefix: str = "") -> int:
    """Copy the full value of every parameter of sharded `module` into `replica`'s parameter of the same
    name (less `prefix`), one tensor at a time, so only one full tensor is ever held besides the
    replica; every rank calls it (the same order everywhere). Returns the bytes gathered."""
    from torch.distributed.tensor import DTensor

    target = dict(replica.named_parameters())
    total = 0
    with torch.no_grad():
        for name, param in module.named_parameters():
            full = param.full_tensor() if isinstance(param, DTensor) else param
            target[name.removeprefix(prefix)].copy_(full)
            total += full.numel() * full.element_size()
            del full
    return total


def save_sharded(folder: str | Path, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """DCP-save the model and optimiser state under `folder` (every rank calls it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(module, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(folder))


def load_sharded(folder: str | Path, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load what `save_sharded` wrote into `module` and `optimizer`, resharding to this run's world
    size (FSDP2 or one plain process; every rank calls it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(module, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def model_state_bytes(module: nn.Module, optimizer_slots: int = 2) -> int:
    """Bytes this process holds for weights, gradients and AdamW's `optimizer_slots` moments
    (the local shards under FSDP2; activations not included)."""
    from torch.distributed.tensor import DTensor

    total = 0
    for param in module.parameters():
        local = param.to_local() if isinstance(param, DTensor) else param
        size = local.numel() * local.element_size()
        total += size * (1 + (1 + optimizer_slots if param.requires_grad else 0))
    return total


__all__ = ["DISTRIBUTED", "DCP_DIR", "uses_fsdp2", "shard", "no_sync", "clip_grad_norm", "full_state_dict",
           "gather_into", "save_sharded", "load_sharded", "model_state_bytes"]
