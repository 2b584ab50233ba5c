"""What each backend actually loaded, checked against the quantization that was requested.

Asking for a scheme is not evidence it ran: on the H200 a GPTQ config loaded with no quantized
kernel at all (KV-cache size equal to bf16's) and would have been reported as "GPTQ speed".
So after start we record, per backend:

* vLLM: the resolved quantization method (``model_config.quantization``), the linear method,
  scheme and kernel class of every linear layer, and the weight bytes actually resident next to
  the bytes the same layers would take unquantized. Collected inside the engine's worker process
  through vLLM's documented ``worker_extension_cls`` + ``collective_rpc`` hook
  (:class:`VllmQuantProbe`), because the model lives in the engine-core process.
* TGI / TensorRT-LLM: their backends put a ``quantization`` dict into ``describe().extra`` built
  with :func:`from_tgi` / :func:`from_trtllm_config` (launch flags, ``/info``, the engine's
  config.json); the same checks then apply.

:func:`verify` turns report + requested spec into ``{"valid": bool, "problems": [...], ...}``,
stored as run.json ``backends[name]["quant_verification"]``. A run with ``valid: false`` measured
something other than what it is labelled as; reports and comparisons must not present its speed
as the requested scheme's.
"""
from __future__ import annotations

from typing import Any

from adapters.quant import SCHEMES, scheme_of_spec
from adapters.spec import ServingSpec

_DTYPE_BITS = {"float32": 32, "float16": 16, "bfloat16": 16}
# weights may take this much more than bits/dtype_bits (scales, zero points, group metadata)
_OVERHEAD = 1.35


class VllmQuantProbe:
    """Mixed into vLLM's worker class via ``worker_extension_cls`` (engine arg).

    vLLM refuses extension attributes that clash with the worker's, hence the prefix.
    """

    def llm_compare_quant_report(self) -> dict[str, Any]:
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        dtype = str(self.model_config.dtype).replace("torch.", "")  # type: ignore[attr-defined]
        return linear_report(model, dtype)


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


def linear_report(model: Any, dtype: str) -> dict[str, Any]:
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
    return {"dtype": dtype, "linear_groups": sorted(groups.values(), key=lambda g: -g["layers"]),
            "weight_bytes": total, "linear_weight_bytes": linear_bytes,
            "linear_dense_bytes": linear_dense_bytes, "packed_estimated_bytes": packed,
            "linear_ratio": round(linear_bytes / linear_dense_bytes, 4) if linear_dense_bytes else None}


def _quantized_groups(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in report.get("linear_groups", []) if g.get("method") != "UnquantizedLinearMethod"]


def verify(spec: ServingSpec, report: dict[str, Any] | None, *, resolved: dict[str, Any] | None = None,
           framework: str = "vllm") -> dict[str, Any]:
    """Requested scheme vs what was loaded. ``report``: the backend's quantization report."""
    requested = scheme_of_spec(spec)
    resolved = resolved or {}
    out: dict[str, Any] = {"requested": requested, "framework": framework, "problems": []}
    problems: list[str] = out["problems"]
    if report is None:
        out.update(valid=None, status="unverified",
                   reason=f"{framework} backend reported nothing about its loaded weights")
        return out
    out["loaded"] = {k: report.get(k) for k in ("method", "dtype", "kv_cache_dtype", "weight_bytes",
                                                  "linear_weight_bytes", "linear_dense_bytes",
                                                  "linear_ratio", "bits_per_weight", "linear_bits_per_weight",
                                                  "kernels") if report.get(k) is not None}
    method = report.get("method", resolved.get("quantization"))
    out["loaded"]["method"] = method
    qgroups = _quantized_groups(report)
    kernels = sorted({g["kernel"] for g in qgroups if g.get("kernel")} | set(report.get("kernels") or []))
    out["loaded"]["kernels"] = kernels
    out["loaded"]["linear_groups"] = report.get("linear_groups", [])
    s = SCHEMES[requested["weights"]]
    if s.kind == "weights":
        expect = s.methods_for(framework)
        if not method:
            problems.append(f"requested {s.name} but the engine resolved no quantization method "
                            "(it ran unquantized weights)")
        elif expect and method not in expect:
            problems.append(f"requested {s.name} but the engine resolved quantization method "
                            f"{method!r} (expected one of {sorted(expect)})")
        if "linear_groups" in report and not qgroups:
            problems.append("no linear layer uses a quantized linear method (all UnquantizedLinearMethod)")
        elif "linear_groups" in report and not kernels and framework == "vllm":
            problems.append("no quantized linear kernel was selected for any layer")
        ratio = report.get("linear_ratio")
        dtype_bits = _DTYPE_BITS.get(str(report.get("dtype")), 16)
        if ratio is not None and s.weight_bits:
            limit = s.weight_bits / dtype_bits * _OVERHEAD
            out["loaded"]["linear_ratio_limit"] = round(limit, 4)
            if ratio > limit:
                problems.append(f"linear weights take {ratio:.2f}x their unquantized size "
                                f"(a {s.weight_bits}-bit scheme should be <= {limit:.2f}x): not quantized")
    else:
        if method:
            problems.append(f"requested unquantized weights but the engine resolved quantization {method!r}")
        if qgroups:
            problems.append(f"{sum(g['layers'] for g in qgroups)} linear layers use a quantized method")
    want_dtype = requested.get("dtype")
    got_dtype = report.get("dtype") or resolved.get("dtype")
    if want_dtype and got_dtype and want_dtype != got_dtype:
        problems.append(f"requested dtype {want_dtype} but the engine runs {got_dtype}")
    if requested.get("kv_cache") == "kv-cache-fp8":
        kv = str(report.get("kv_cache_dtype") or resolved.get("kv_cache_dtype") or "")
        if not kv.startswith("fp8"):
            problems.append(f"requested an fp8 KV cache but the engine's KV cache is {kv or 'unknown'}")
    out["valid"] = not problems
    out["status"] = "valid" if not problems else "invalid"
    return out


def from_tgi(launch_flags: dict[str, Any], info: dict[str, Any] | None,
             checkpoint_config: dict[str, Any] | None) -> dict[str, Any]:
    """A report for TGI. ``/info`` has no quantization field (model_id, model_dtype, version, ...),
    so the method is the ``--quantize`` flag or, as TGI itself does, the checkpoint's
    ``quantization_config.quant_method``; no per-layer kernel or weight size is observable."""
    method = launch_flags.get("--quantize")
    if method is None and checkpoint_config:
        method = (checkpoint_config.get("quantization_config") or {}).get("quant_method")
    rep: dict[str, Any] = {"method": method, "kernels": [], "source": "launch flags + checkpoint config"}
    dtype = (info or {}).get("model_dtype") or launch_flags.get("--dtype")
    if dtype:
        rep["dtype"] = str(dtype).replace("torch.", "")
    if launch_flags.get("--kv-cache-dtype"):
        rep["kv_cache_dtype"] = launch_flags["--kv-cache-dtype"]
    return rep


def from_trtllm_config(engine_config: dict[str, Any]) -> dict[str, Any]:
    """A report from a TensorRT-LLM engine/checkpoint config.json (``quantization.quant_algo``)."""
    pretrained = engine_config.get("pretrained_config", engine_config)
    q = pretrained.get("quantization") or {}
    rep: dict[str, Any] = {"method": q.get("quant_algo"), "kernels": [], "source": "engine config.json"}
    if pretrained.get("dtype"):
        rep["dtype"] = pretrained["dtype"]
    if q.get("kv_cache_quant_algo"):
        rep["kv_cache_dtype"] = str(q["kv_cache_quant_algo"]).lower()
    return rep
