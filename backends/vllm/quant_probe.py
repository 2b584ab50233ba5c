"""What vLLM actually loaded, asked inside its worker process: the resolved quantization method,
the linear method, scheme and kernel class of every linear layer, and the weight bytes actually
resident next to the bytes the same layers would take unquantized. Mixed into vLLM's worker
through its documented ``worker_extension_cls`` + ``collective_rpc`` hook (inproc.py), because the
model lives in the engine-core process; compare/quality/verify.py checks the report against the
requested scheme."""
from __future__ import annotations

from typing import Any

from core.quant_report import QuantReport

_DTYPE_BITS = {"float32": 32, "float16": 16, "bfloat16": 16}


class VllmQuantProbe:
    """Mixed into vLLM's worker class via ``worker_extension_cls`` (engine arg).

    vLLM refuses extension attributes that clash with the worker's, hence the prefix.
    """

    def llm_compare_quant_report(self) -> dict[str, Any]:
        """The report as its JSON object: collective_rpc's results cross to the engine's client
        process serialized, where arbitrary classes are not allowed (inproc.py reads it back)."""
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        dtype = str(self.model_config.dtype).replace("torch.", "")  # type: ignore[attr-defined]
        return linear_report(model, dtype).as_json()


def _kernel_of(*holders: Any) -> str | None:
    """The kernel object a linear method or scheme delegates to (``.kernel`` in vLLM >= 0.10)."""
    for holder in holders:
        if holder is None:
            continue
        k = getattr(holder, "kernel", None)
        if k is not None:
            return type(k).__name__
        for v in vars(holder).values() if hasattr(holder, "__dict__") else ():
            if type(v).__name__.endswith("Kernel"):
                return type(v).__name__
    return None


def linear_report(model: Any, dtype: str) -> QuantReport:
    """Per-layer quantization facts of a loaded vLLM model (runs inside the worker)."""
    from vllm.model_executor.layers.linear import LinearBase

    elem = _DTYPE_BITS.get(dtype, 16) // 8
    groups: dict[str, dict[str, Any]] = {}
    linear_bytes = linear_dense_bytes = packed = 0
    seen: set[int] = set()
    for name, m in model.named_modules():
        if not isinstance(m, LinearBase):
            continue
        qm = getattr(m, "quant_method", None)
        # compressed-tensors keeps its scheme on the layer, other methods on the method
        scheme = getattr(m, "scheme", None) or getattr(qm, "scheme", None)
        kernel = _kernel_of(qm, scheme)
        key = "/".join(x for x in (type(qm).__name__ if qm is not None else "None",
                                   type(scheme).__name__ if scheme is not None else None, kernel) if x)
        g = groups.setdefault(key, {"method": type(qm).__name__ if qm is not None else None,
                                    "scheme": type(scheme).__name__ if scheme is not None else None,
                                    "kernel": kernel, "layers": 0, "example": name})
        g["layers"] += 1
        n_in = getattr(m, "input_size_per_partition", getattr(m, "input_size", 0))
        n_out = sum(getattr(m, "output_partition_sizes", None) or [getattr(m, "output_size", 0)])
        dense = int(n_in) * int(n_out) * elem
        linear_dense_bytes += dense
        w = getattr(m, "weight", None)
        if w is None or w.numel() == 0:
            # vLLM's CPU kernels prepack weights into oneDNN handles and drop .weight; estimate
            # the packed copy from its storage type: the layer dtype (unquantized) or int8
            est = dense if kernel is None and hasattr(m, "cpu_linear") else (
                int(n_in) * int(n_out) if kernel and "Int8" in kernel else 0)
            linear_bytes += est
            packed += est
        for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False)):
            if t.numel() and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                linear_bytes += t.numel() * t.element_size()
    total = packed
    seen_all: set[int] = set()
    for t in list(model.parameters()) + list(model.buffers()):
        if t.numel() and t.data_ptr() not in seen_all:
            seen_all.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return QuantReport(dtype=dtype, linear_groups=sorted(groups.values(), key=lambda g: -g["layers"]),
                       weight_bytes=total, linear_weight_bytes=linear_bytes,
                       linear_dense_bytes=linear_dense_bytes, packed_estimated_bytes=packed,
                       linear_ratio=round(linear_bytes / linear_dense_bytes, 4) if linear_dense_bytes else None)
