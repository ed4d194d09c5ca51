"""CPU int8 linear kernels on the model's shapes: which one `quantize="int8"` uses on CPU.

    python benchmarks/int8_kernels.py                       # MLP + attention, batch 1 and 16, this CPU
    python benchmarks/int8_kernels.py --batches 1 --repeats 3 --json int8.json   # a quicker look
    python benchmarks/int8_kernels.py --compiled            # + inductor-compiled candidates (~1 min more)

For one decoder layer of the published width (hidden 2048, FFN 11008, 16/4 heads x 128), two
blocks of linears:

  mlp        gate 2048->11008, up 2048->11008, down 11008->2048   (67.6 M weights)
  attention  q 2048->2048, k 2048->512, v 2048->512, o 2048->2048 (10.5 M weights)

and, per kernel, ms per block (every linear of the block once), its speed against fp32 in
the same run, its weight bytes and its error against fp32 (||y - y_fp32|| / ||y_fp32||, the
same random inputs). Decoding is memory-bound at these batch sizes, so each kernel cycles
through enough copies of the block's weights that they never sit in the last-level cache
(a block's int8 attention weights alone would fit in a 32 MB L3). Best of `--repeats`
passes, the kernels taking turns pass by pass (background load only adds time, and hits
all of them alike).

Candidates (weights quantised per output channel, symmetric, scale = max|w| / 127):

  fp32, bf16                 F.linear, the references
  aten int8pack (fp32/bf16)  `torch.ops.aten._weight_int8pack_mm`: int8 weights, activations
                             and scales in fp32 or bf16; weight-only (activations exact)
  dequant + linear           F.linear(x, w8.to(x.dtype)) * scale: materialises the weights
  torchao int8 weight-only   `torchao.quantization.Int8WeightOnlyConfig` on an nn.Linear
  torch.ao dynamic (fbgemm)  `quantize_dynamic(qint8)`: activations quantised per tensor at
                             run time, int8 x int8 GEMM (fbgemm); not weight-only
  compiled ...               (--compiled) the dequant pattern and torchao under torch.compile

The table this printed on the project's machines, and the CPU int8 choice it led to, are in
the docstring of `rumik_app/model/quantize.py`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rumik_app.model.quantize import int8_per_channel  # noqa: E402  (the engine's own quantiser)

HIDDEN, FFN, KV = 2048, 11008, 512
BLOCKS = {"mlp": [(HIDDEN, FFN), (HIDDEN, FFN), (FFN, HIDDEN)],
          "attention": [(HIDDEN, HIDDEN), (HIDDEN, KV), (HIDDEN, KV), (HIDDEN, HIDDEN)]}
# Weight copies per kernel: at least this many bytes, so the weights stream from memory.
ROTATION_BYTES = 256 * 2**20
WEIGHT_STD = 0.02  # ~ the init scale of the published model's linears
SEED = 0


# A kernel builder takes an fp32 weight [N, K] and returns (fn: x fp32 [B, K] -> y [B, N], bytes).
Builder = Callable[[torch.Tensor], tuple[Callable[[torch.Tensor], torch.Tensor], int]]


def build_dense(dtype: torch.dtype) -> Builder:
    def build(weight):
        w = weight.to(dtype)
        return (lambda x: F.linear(x.to(dtype), w)), w.numel() * w.element_size()
    return build


def build_int8pack(dtype: torch.dtype) -> Builder:
    def build(weight):
        w8, scale = int8_per_channel(weight)
        s = scale.to(dtype)
        nbytes = w8.numel() + s.numel() * s.element_size()
        return (lambda x: torch.ops.aten._weight_int8pack_mm(x.to(dtype), w8, s)), nbytes
    return build


def build_dequant(dtype: torch.dtype, compiled: bool = False) -> Builder:
    def build(weight):
        w8, scale = int8_per_channel(weight)
        s = scale.to(dtype)

        def fn(x):
            return F.linear(x.to(dtype), w8.to(dtype)) * s
        return (torch.compile(fn) if compiled else fn), w8.numel() + s.numel() * s.element_size()
    return build


def build_torchao(dtype: torch.dtype, compiled: bool = False) -> Builder:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    def build(weight):
        linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=dtype)
        with torch.no_grad():
            linear.weight.copy_(weight)
        quantize_(linear, Int8WeightOnlyConfig())
        fn = torch.compile(linear) if compiled else linear
        return (lambda x: fn(x.to(dtype))), weight.numel() + weight.shape[0] * torch.finfo(dtype).bits // 8
    return build


def build_dynamic(weight: torch.Tensor):
    from torch.ao.quantization import quantize_dynamic

    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        linear.weight.copy_(weight)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = quantize_dynamic(nn.Sequential(linear), {nn.Linear}, dtype=torch.qint8)
    return module, weight.numel() + weight.shape[0] * 8  # int8 + per-tensor/channel params (approx.)


def candidates(compiled: bool) -> dict[str, Builder]:
    table: dict[str, Builder] = {
        "fp32": build_dense(torch.float32),
        "bf16": build_dense(torch.bfloat16),
        "aten int8pack, fp32 act.": build_int8pack(torch.float32),
        "aten int8pack, bf16 act.": build_int8pack(torch.bfloat16),
        "dequant + linear, fp32": build_dequant(torch.float32),
        "torch.ao dynamic int8 (fbgemm)": build_dynamic,
    }
    torchao = importlib.util.find_spec("torchao") is not None  # optional: the CUDA extra (pyproject.toml's cuda extra)
    if torchao:
        table["torchao int8 weight-only, bf16"] = build_torchao(torch.bfloat16)
    else:
        print("torchao is not installed: its candidates are skipped (pip install torchao==0.18.0)")
    if compiled:
        table["compiled dequant + linear, bf16"] = build_dequant(torch.bfloat16, compiled=True)
        if torchao:
            table["compiled torchao int8 weight-only, bf16"] = build_torchao(torch.bfloat16, compiled=True)
    return table


def block_weights(block: str, copies: int, generator: torch.Generator) -> list[list[torch.Tensor]]:
    """`copies` sets of fp32 weights [N, K] for the block's linears (K = in, N = out)."""
    return [[torch.randn(n_out, n_in, generator=generator) * WEIGHT_STD for n_in, n_out in BLOCKS[block]]
            for _ in range(copies)]


def copies_needed(bytes_per_copy: int) -> int:
    """Copies of a block's weights that together exceed ROTATION_BYTES (ceiling division)."""
    return max(1, -(-ROTATION_BYTES // max(bytes_per_copy, 1)))


class Prepared:
    """One kernel built over enough copies of a block's weights: fns[copy][linear]."""

    def __init__(self, build: Builder, weights: list[list[torch.Tensor]]):
        first = [build(w) for w in weights[0]]
        self.weight_bytes = sum(b for _, b in first)
        self.fns = [[fn for fn, _ in first]]
        for copy in weights[1:copies_needed(self.weight_bytes)]:
            self.fns.append([build(w)[0] for w in copy])

    def error(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> float:
        """Largest ||y - y_fp32|| / ||y_fp32|| over the block's linears (the first copy)."""
        return max(float((fn(x).float() - y).norm() / y.norm())
                   for fn, x, y in zip(self.fns[0], inputs, outputs, strict=True))

    def time_pass(self, inputs: list[torch.Tensor], iters: int) -> float:
        """Seconds per block call, over `iters` calls cycling through the copies."""
        start = time.perf_counter()
        for i in range(iters):
            for fn, x in zip(self.fns[i % len(self.fns)], inputs, strict=True):
                fn(x)
        return (time.perf_counter() - start) / iters


@torch.no_grad()
def measure_block(block: str, batch: int, kernels: dict[str, Builder], repeats: int, iters: int) -> list[dict]:
    """Every kernel on one (block, batch), passes interleaved round-robin so that background
    load hits all kernels alike; the best pass of each is reported."""
    generator = torch.Generator().manual_seed(SEED)
    smallest = sum(n_in * n_out for n_in, n_out in BLOCKS[block])  # int8 bytes of one copy
    weights = block_weights(block, copies_needed(smallest), generator)
    inputs = [torch.randn(batch, n_in, generator=generator) for n_in, _ in BLOCKS[block]]
    outputs = [F.linear(x, w) for x, w in zip(inputs, weights[0], strict=True)]
    prepared, rows = {}, {}
    for name, build in kernels.items():
        try:
            prepared[name] = kernel = Prepared(build, weights)
            rows[name] = {"weight_bytes": kernel.weight_bytes, "rel_error": kernel.error(inputs, outputs)}
            kernel.time_pass(inputs, len(kernel.fns))  # warm-up (and compile)
        except Exception as exc:  # noqa: BLE001 - a kernel missing on this CPU: say so, go on
            prepared.pop(name, None)
            rows[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"}
    best = dict.fromkeys(prepared, float("inf"))
    for _ in range(repeats):
        for name, kernel in prepared.items():
            best[name] = min(best[name], kernel.time_pass(inputs, iters))
    for name, seconds in best.items():
        rows[name]["ms"] = seconds * 1e3
    return [{"block": block, "batch": batch, "kernel": name, **row} for name, row in rows.items()]


def run(batches: list[int], repeats: int, iters: int, compiled: bool) -> list[dict]:
    rows = []
    for block in BLOCKS:
        for batch in batches:
            for row in measure_block(block, batch, candidates(compiled), repeats, iters):
                rows.append(row)
                print(f"  {row}", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: one row per kernel, ms and x fp32 per (block, batch), error, bytes of the MLP."""
    cols = sorted({(r["block"], r["batch"]) for r in rows}, key=lambda c: (list(BLOCKS).index(c[0]), c[1]))
    fp32 = {(r["block"], r["batch"]): r["ms"] for r in rows if r["kernel"] == "fp32"}
    head = "| kernel | " + " | ".join(f"{b} b{n} ms (x fp32)" for b, n in cols) + " | rel. error | MLP weight MB |"
    lines = [head, "|" + "---|" * (len(cols) + 3)]
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        mine = {(r["block"], r["batch"]): r for r in rows if r["kernel"] == kernel}
        cells = []
        for col in cols:
            r = mine.get(col, {})
            cells.append(f"{r['ms']:.1f} ({fp32[col] / r['ms']:.2f}x)" if "ms" in r else "failed")
        errors = [r["rel_error"] for r in mine.values() if "rel_error" in r]
        mlp = [r["weight_bytes"] for (b, _), r in mine.items() if b == "mlp" and "weight_bytes" in r]
        lines.append(f"| {kernel} | " + " | ".join(cells) + f" | {max(errors, default=float('nan')):.2%} | "
                     f"{(mlp[0] / 2**20 if mlp else float('nan')):.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,16", help="rows per call (decode batch sizes)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes; the best is reported")
    parser.add_argument("--iters", type=int, default=8, help="block calls per pass")
    parser.add_argument("--compiled", action="store_true", help="also the torch.compile candidates")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}", flush=True)
    rows = run([int(b) for b in args.batches.split(",") if b], args.repeats, args.iters, args.compiled)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
