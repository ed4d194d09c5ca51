"""onnxruntime sessions for the ONNX judges (DNSMOS in `evaluation.quality`, IndicConformer in
`evaluation.indicconformer`): one place that picks the execution provider and the thread count
and checks a graph's input and output names.

Library module, no command line::

    from evaluation.onnx_session import check_io, open_session
    session = open_session("dnsmos_models/sig_bak_ovr.onnx", device="cpu", threads=2, error=QualityError)
    check_io(session, ["input_1"], ["Identity:0"], error=QualityError)

device: None picks onnxruntime's CUDA provider when the installed onnxruntime has one (the
`onnxruntime-gpu` build), else the CPU; "cpu" always the CPU; "cuda" (or "cuda:N") the CUDA
provider, or the caller's error naming the fix when this onnxruntime has none.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from rumik_app.errors import RumikError

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
# cuDNN's default EXHAUSTIVE search re-benchmarks every convolution for every new input length,
# which takes seconds per length on variable-length audio; DEFAULT picks an algorithm at once.
CUDA_OPTIONS = {"cudnn_conv_algo_search": "DEFAULT"}
ORT_PIN = "onnxruntime==1.32.0"


def _ort(error: type[RumikError]):
    try:
        import onnxruntime
    except ImportError as exc:
        raise error(f"onnxruntime is not installed; run: pip install {ORT_PIN}") from exc
    return onnxruntime


def providers(device: str | None, error: type[RumikError] = RumikError) -> list:
    """onnxruntime's provider list for `device` (see the module docstring)."""
    ort = _ort(error)
    available = ort.get_available_providers()
    kind, _, index = (device or "").lower().partition(":")
    if kind not in ("", "cpu", "cuda"):
        raise error(f"Unknown device {device!r} for onnxruntime; use cpu or cuda.")
    want_cuda = kind == "cuda" or (kind == "" and CUDA_PROVIDER in available)
    if not want_cuda:
        return [CPU_PROVIDER]
    if CUDA_PROVIDER not in available:
        raise error(f"This onnxruntime has no CUDA provider (it has {', '.join(available)}). Install the GPU build "
                    f"(pip install onnxruntime-gpu of the same version as {ORT_PIN}) or use the CPU (--device cpu).")
    options = dict(CUDA_OPTIONS, device_id=int(index or 0))
    return [(CUDA_PROVIDER, options), CPU_PROVIDER]


def open_session(path: str | os.PathLike, device: str | None = None, threads: int | None = None,
                 error: type[RumikError] = RumikError):
    """An `onnxruntime.InferenceSession` for the model file `path`.

    threads: intra-op threads (None: onnxruntime's default, every core); one inter-op thread,
    since the judges' graphs are a single chain of operators.
    """
    ort = _ort(error)
    if not os.path.isfile(path):
        raise error(f"ONNX model {path} does not exist.")
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = int(threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: the CUDA provider warns about every CPU fallback
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=providers(device, error))
    except RumikError:
        raise
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own unexported exception types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise error(f"onnxruntime cannot load {path} ({first}); the file is damaged or not an ONNX model. "
                    "Download it again.") from exc


def check_io(session, inputs: Sequence[str], outputs: Sequence[str], error: type[RumikError] = RumikError,
             what: str = "model") -> None:
    """Raise `error` unless the graph's input and output names include `inputs` and `outputs`."""
    have_in = [i.name for i in session.get_inputs()]
    have_out = [o.name for o in session.get_outputs()]
    missing = [n for n in inputs if n not in have_in] + [n for n in outputs if n not in have_out]
    if missing:
        raise error(f"{what}: the ONNX graph lacks {', '.join(missing)} (it has inputs {have_in}, outputs "
                    f"{have_out}); it is not the model this judge expects.")
