"""Weight quantisation at load: int8 on CPU and CUDA, int4 and nf4 on CUDA (docs/ARCHITECTURE.md §2).

    from rumik_app.model.quantize import quantize_model
    report = quantize_model(model, "int8", torch.device("cpu"))   # in place; a QuantReport
    print(report.describe())   # "int8 (aten _weight_int8pack_mm, ...): body 1.25 GB -> 0.31 GB, ..."
    engine = TTSEngine.from_pretrained(path, quantize="int8")     # the same, at load (--quantize int8)

What is quantised: the linear layers of the decoder body, `model.layers.*.self_attn.{q,k,v,o}_proj`
and `model.layers.*.mlp.{gate,up,down}_proj` (~2.8 B of the published 3.4 B weights, read once per
decoded token). What is kept in the load dtype: the embedding (tied: it is also the audio head's
rows, `AudioHead`, and each step reads only 2,049 of its 277,404 rows), every norm, and the stop
head, whose one logit decides where an utterance ends (mlx-audio's 4-bit port keeps it too).
Weights are quantised symmetrically per output channel (int8) or in groups (int4: 128, nf4: 64).

| mode | device | kernel |
|---|---|---|
| int8 | CPU | `torch.ops.aten._weight_int8pack_mm` on int8 weights, bf16 activations (`Int8Linear`) |
| int8 | CUDA | torchao `Int8WeightOnlyConfig` (per-row int8 weights) |
| int4 | CUDA | torchao `Int4WeightOnlyConfig(group_size=128)`, tinygemm (`tile_packed_to_4d`; sm80+) |
| nf4 | CUDA | bitsandbytes `Linear4bit(quant_type="nf4")` (optional: `pip install bitsandbytes`) |

Elsewhere (int4/nf4 on CPU, fp8 here) `rumik_app.cli_args.check_quantize` says what works.

**Why this CPU kernel** (`benchmarks/int8_kernels.py`: one layer's MLP = gate + up
2048->11008 and down 11008->2048, and attention = q, k, v, o; ms per block, x = speed-up over
fp32 in the same run; weights cycled so they stream from memory; best of 3 with kernels taking
turns; the CI machine, AMD EPYC with AVX2 only, 2 threads, other jobs sharing it):

| kernel: ms (x fp32) | mlp b1 | mlp b16 | attention b1 | attention b16 | rel. error | MLP weight MB |
|---|---|---|---|---|---|---|
| fp32 | 13.7 (1.00x) | 55.3 (1.00x) | 2.2 (1.00x) | 6.1 (1.00x) | 0.00% | 258 |
| bf16 | 7.5 (1.83x) | 101.6 (0.54x) | 1.2 (1.88x) | 15.7 (0.39x) | 0.29% | 129 |
| aten int8pack, fp32 act. | 33.1 (0.41x) | 551.3 (0.10x) | 5.1 (0.44x) | 83.7 (0.07x) | 0.93% | 65 |
| aten int8pack, bf16 act. | 4.2 (3.29x) | 27.8 (1.99x) | 0.8 (2.73x) | 4.4 (1.40x) | 0.98% | 65 |
| dequant + linear, fp32 | 112.3 (0.12x) | 166.6 (0.33x) | 2.4 (0.92x) | 7.8 (0.79x) | 0.93% | 65 |
| torch.ao dynamic int8 (fbgemm) | 2.7 (5.03x) | 7.4 (7.48x) | 0.7 (3.32x) | 1.4 (4.50x) | 2.42% | 65 |
| torchao int8 weight-only, bf16 | 61.8 (0.22x) | 111.0 (0.50x) | 2.5 (0.90x) | 17.9 (0.34x) | 1.01% | 65 |

- The weight-only int8 kernel that is fastest on CPU is aten's `_weight_int8pack_mm` with bf16
  activations (its fp32-activation path is ~10x slower than with bf16, so activations go in as
  bf16 and come back in the model's dtype; the bf16 rounding of activations adds ~0.05 % error
  to the weights' ~0.9 %). torchao's `Int8WeightOnlyConfig` is several times slower on CPU
  (it is the right choice on CUDA), and dequantising into `F.linear` re-materialises the weights.
- `torch.ao` dynamic int8 (fbgemm) is faster still, but it quantises the activations too (2.4 %
  error per linear against 0.9 %, and real LLM activations have outlier channels that random
  weights lack) with one scale per *tensor*, i.e. across the rows of a batch: a request's tokens
  would then depend on what else is in its batch, and on the stale values of finished slots,
  which breaks the fast path's promise that a (request, seed) gives the same tokens alone or in a
  batch (docs/ARCHITECTURE.md §5, §12). So it is not used.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch
from torch import nn

from rumik_app.cli_args import QuantizeError, check_quantize

BODY_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
INT8_MAX = 127
# `_weight_int8pack_mm`'s CPU activation dtype: bf16 is its fast path (measured above).
CPU_INT8_ACTIVATIONS = torch.bfloat16
INT4_GROUP_SIZE = 128
# The CUDA kernels' packages (pyproject.toml's cuda extra): optional, imported only when asked for.
# transformers imports torchao whenever it is installed, so the CPU environment leaves it out.
CUDA_PACKAGES = {"torchao": "torchao==0.18.0", "bitsandbytes": "bitsandbytes==0.50.2"}
KERNELS = {"int8_cpu": "aten _weight_int8pack_mm, bf16 activations", "int8_cuda": "torchao Int8WeightOnlyConfig",
           "int4_cuda": "torchao Int4WeightOnlyConfig, tinygemm", "nf4_cuda": "bitsandbytes Linear4bit nf4"}


def human_bytes(n: int) -> str:
    """`n` bytes as "1.25 GB" / "412.30 MB" / "38.0 KB" for the load log."""
    for unit, size in (("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n / 1e3:.1f} KB"
QUANTIZE_ATTRIBUTE = "rumik_quantize"  # set on a model by quantize_model: its mode (TTSEngine.quantize)


def int8_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [N, K] float -> (int8 [N, K], float32 scale [N]), symmetric per output channel:
    weight ~= int8 * scale[:, None], scale = max |w| of the row / 127."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / INT8_MAX
    return torch.round(w / scale[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8), scale


class Int8Linear(nn.Module):
    """A bias-free-or-not nn.Linear with int8 weights [N, K] and a bf16 scale [N], run by
    `torch.ops.aten._weight_int8pack_mm` (weight-only: the activations stay floating point).

    forward: x [..., K] in any float dtype -> [..., N] in x's dtype (computed with bf16
    activations, the kernel's fast path on CPU). Traceable by torch.compile (fullgraph).
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight, scale = int8_per_channel(linear.weight)
        self.register_buffer("weight_int8", weight.contiguous())
        self.register_buffer("scale", scale.to(CPU_INT8_ACTIVATIONS))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(CPU_INT8_ACTIVATIONS).contiguous()
        scale = self.scale if self.scale.dtype == CPU_INT8_ACTIVATIONS else self.scale.to(CPU_INT8_ACTIVATIONS)
        out = torch.ops.aten._weight_int8pack_mm(rows, self.weight_int8, scale)
        out = out.view(*x.shape[:-1], self.out_features).to(x.dtype)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight-only"


def body_linears(model) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, attribute, module) of every linear this quantises: the decoder layers' projections."""
    found = []
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name in BODY_LINEARS:
                if isinstance(getattr(parent, name, None), nn.Linear):
                    found.append((parent, name, getattr(parent, name)))
    return found


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes a (possibly quantised) tensor holds: the inner tensors of a torchao tensor
    subclass, bitsandbytes' packed data plus its quantisation state, else numel x element size."""
    if hasattr(tensor, "__tensor_flatten__"):
        names, _ = tensor.__tensor_flatten__()
        return sum(tensor_bytes(getattr(tensor, n)) for n in names)
    size = tensor.numel() * tensor.element_size()
    state = getattr(tensor, "quant_state", None)
    if state is not None:
        size += sum(t.numel() * t.element_size() for t in vars(state).values() if isinstance(t, torch.Tensor))
    return size


def module_bytes(module: nn.Module) -> int:
    """Bytes of a module's parameters and buffers, each shared tensor once (tied embeddings)."""
    seen, total = set(), 0
    for tensor in [*module.parameters(), *module.buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor_bytes(tensor)
    return total


@dataclass
class QuantReport:
    """What `quantize_model` did: mode (None = nothing), kernel, and bytes of the decoder body
    (`model.layers`) and of the whole model, before and after."""

    mode: str | None
    kernel: str
    body_before: int
    body_after: int
    total_before: int
    total_after: int

    def describe(self) -> str:
        """One line for the load log: the weight bytes before and after."""
        if self.mode is None:
            return f"weights {human_bytes(self.total_after)} (body {human_bytes(self.body_after)}), not quantised"
        return (f"{self.mode} ({self.kernel}): body {human_bytes(self.body_before)} -> {human_bytes(self.body_after)} "
                f"({self.body_after / max(self.body_before, 1):.2f}x), weights {human_bytes(self.total_before)} -> "
                f"{human_bytes(self.total_after)}; stop head, norms and embedding unquantised")


def quantize_model(model, mode: str | None, device: torch.device) -> QuantReport:
    """Quantise `model`'s body linears in place for `device` and move the model there.

    mode: None | "int8" | "int4" | "nf4" (`rumik_app.cli_args.check_quantize` says where each
    runs). The model may sit on the CPU and go to a GPU here, a linear at a time, so a card
    smaller than the unquantised model can hold the quantised one. Raises QuantizeError with
    the fix (a mode this device lacks, bitsandbytes missing, int4/nf4 without bf16).
    """
    check_ready(mode, device, model.get_input_embeddings().weight.dtype)
    body_before, total_before = module_bytes(model.model.layers), module_bytes(model)
    kernel = ""
    if mode is not None:
        kernel = KERNELS[f"{mode}_{'cuda' if device.type == 'cuda' else 'cpu'}"]
        {"int8": _int8, "int4": _int4, "nf4": _nf4}[mode](model, device)
    model.to(device)
    setattr(model, QUANTIZE_ATTRIBUTE, mode)
    return QuantReport(mode, kernel, body_before, module_bytes(model.model.layers), total_before, module_bytes(model))


def check_ready(mode: str | None, device: torch.device, dtype: torch.dtype) -> None:
    """Everything `quantize_model(mode)` needs for `device` and a model in `dtype`, checked before
    any weights load: QuantizeError naming the fix (a mode this device lacks, the CUDA kernel's
    package missing, int4/nf4 without bf16)."""
    check_quantize(mode, "engine", device.type)
    if mode is None or device.type != "cuda":
        return
    if mode in ("int4", "nf4") and dtype != torch.bfloat16:
        raise QuantizeError(f"quantize={mode!r} computes in bf16, not {str(dtype).removeprefix('torch.')}: load with "
                            "dtype='bf16' (--dtype bf16, the CUDA default).")
    _require("bitsandbytes" if mode == "nf4" else "torchao", mode)


def _require(package: str, mode: str) -> None:
    """QuantizeError with the pip line when a CUDA kernel's package is not installed."""
    if importlib.util.find_spec(package) is None:
        raise QuantizeError(f"quantize={mode!r} on CUDA needs {package}, which is not installed: `pip install "
                            f"{CUDA_PACKAGES[package]}` (or `pip install -e .[cuda]`).")


def _int8(model, device: torch.device) -> None:
    if device.type != "cuda":
        for parent, name, linear in body_linears(model):
            setattr(parent, name, Int8Linear(linear.to(device)))
        return
    from torchao.quantization import Int8WeightOnlyConfig

    _torchao(model, Int8WeightOnlyConfig(), device)


def _int4(model, device: torch.device) -> None:
    from torchao.quantization import Int4WeightOnlyConfig

    _torchao(model, Int4WeightOnlyConfig(group_size=INT4_GROUP_SIZE, int4_packing_format="tile_packed_to_4d"), device)


def _torchao(model, config, device: torch.device) -> None:
    """torchao's quantize_ on the body linears only, each moved to `device` first."""
    from torchao.quantization import quantize_

    chosen = {id(linear) for _, _, linear in body_linears(model)}
    quantize_(model, config, filter_fn=lambda module, _name: id(module) in chosen, device=device)


def _nf4(model, device: torch.device) -> None:
    """bitsandbytes' NF4 Linear4bit in place of each body linear (quantised on `.to(device)`)."""
    import bitsandbytes as bnb

    dtype = model.get_input_embeddings().weight.dtype
    for parent, name, linear in body_linears(model):
        new = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=linear.bias is not None,
                                compute_dtype=dtype, quant_type="nf4", device="meta")
        new.weight = bnb.nn.Params4bit(linear.weight.detach().cpu(), requires_grad=False, quant_type="nf4")
        if linear.bias is not None:
            new.bias = nn.Parameter(linear.bias.detach().cpu(), requires_grad=False)
        setattr(parent, name, new.to(device))


def has_quantized_linears(model) -> bool:
    """Whether any module of `model` is a quantised linear (ours, torchao's or bitsandbytes')."""
    for module in model.modules():
        if isinstance(module, Int8Linear) or type(module).__module__.startswith("bitsandbytes"):
            return True
        weight = getattr(module, "weight", None)
        if isinstance(module, nn.Linear) and weight is not None and hasattr(weight, "__tensor_flatten__"):
            return True
    return False
