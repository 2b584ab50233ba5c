"""What each backend actually loaded, checked against the quantization that was requested.

Asking for a scheme is not evidence it ran: on the H200 a GPTQ config loaded with no quantized
kernel at all (KV-cache size equal to bf16's) and would have been reported as "GPTQ speed".
So after start we record, per backend:

* vLLM: the resolved quantization method (``model_config.quantization``), the linear method,
  scheme and kernel class of every linear layer, and the weight bytes actually resident next to
  the bytes the same layers would take unquantized. Collected inside the engine's worker process
  through vLLM's documented ``worker_extension_cls`` + ``collective_rpc`` hook
  (backends/vllm/quant_probe.py), because the model lives in the engine-core process.
* TGI / TensorRT-LLM: :func:`from_tgi` / :func:`from_trtllm_config` build a :class:`QuantReport`
  from launch flags, ``/info`` and the engine's config.json, judged by the same checks (neither
  backend puts one into ``describe().extra`` yet: their runs are "unverified").

:func:`verify` turns report + requested spec into ``{"valid": bool, "problems": [...], ...}``,
stored as run.json ``backends[name]["quant_verification"]``. A run with ``valid: false`` measured
something other than what it is labelled as; reports and comparisons must not present its speed
as the requested scheme's.
"""
from __future__ import annotations

from typing import Any

from adapters.quant import SCHEMES, scheme_of_spec
from adapters.spec import ServingSpec
from core.quant_report import QuantReport

_DTYPE_BITS = {"float32": 32, "float16": 16, "bfloat16": 16}
# weights may take this much more than bits/dtype_bits (scales, zero points, group metadata)
_OVERHEAD = 1.35


def _quantized_groups(report: QuantReport) -> list[dict[str, Any]]:
    return [g for g in report.linear_groups if g.get("method") != "UnquantizedLinearMethod"]


_LOADED = ("method", "dtype", "kv_cache_dtype", "weight_bytes", "linear_weight_bytes", "linear_dense_bytes",
           "linear_ratio", "bits_per_weight", "linear_bits_per_weight", "kernels")


def verify(spec: ServingSpec, report: QuantReport | dict[str, Any] | None, *,
           resolved: dict[str, Any] | None = None, framework: str) -> dict[str, Any]:
    """Requested scheme vs what was loaded. ``report``: the backend's quantization report (typed,
    or as run.json holds it)."""
    requested = scheme_of_spec(spec)
    resolved = resolved or {}
    out: dict[str, Any] = {"requested": requested, "framework": framework, "problems": []}
    problems: list[str] = out["problems"]
    report = QuantReport.read(report)
    if report is None:
        out.update(valid=None, status="unverified",
                   reason=f"{framework} backend reported nothing about its loaded weights")
        return out
    given = report.model_fields_set  # what the backend reported (an unset field is not a None it said)
    out["loaded"] = {k: getattr(report, k) for k in _LOADED if k in given and getattr(report, k) is not None}
    method = report.method if "method" in given else resolved.get("quantization")
    out["loaded"]["method"] = method
    qgroups = _quantized_groups(report)
    kernels = sorted({g["kernel"] for g in qgroups if g.get("kernel")} | set(report.kernels))
    out["loaded"]["kernels"] = kernels
    out["loaded"]["linear_groups"] = report.linear_groups
    s = SCHEMES[requested["weights"]]
    if s.kind == "weights":
        expect = s.methods_for(framework)
        if not method:
            problems.append(f"requested {s.name} but the engine resolved no quantization method "
                            "(it ran unquantized weights)")
        elif expect and method not in expect:
            problems.append(f"requested {s.name} but the engine resolved quantization method "
                            f"{method!r} (expected one of {sorted(expect)})")
        if "linear_groups" in given and not qgroups:
            problems.append("no linear layer uses a quantized linear method (all UnquantizedLinearMethod)")
        elif not kernels and any("kernel" in g for g in report.linear_groups):
            # an engine that names each linear layer's kernel (vLLM) selected none
            problems.append("no quantized linear kernel was selected for any layer")
        ratio = report.linear_ratio
        dtype_bits = _DTYPE_BITS.get(str(report.dtype), 16)
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
    got_dtype = report.dtype or resolved.get("dtype")
    if want_dtype and got_dtype and want_dtype != got_dtype:
        problems.append(f"requested dtype {want_dtype} but the engine runs {got_dtype}")
    if requested.get("kv_cache") == "kv-cache-fp8":
        kv = str(report.kv_cache_dtype or resolved.get("kv_cache_dtype") or "")
        if not kv.startswith("fp8"):
            problems.append(f"requested an fp8 KV cache but the engine's KV cache is {kv or 'unknown'}")
    out["valid"] = not problems
    out["status"] = "valid" if not problems else "invalid"
    return out


def from_tgi(launch_flags: dict[str, Any], info: dict[str, Any] | None,
             checkpoint_config: dict[str, Any] | None) -> QuantReport:
    """A report for TGI. ``/info`` has no quantization field and, since TGI 3.3, no ``model_dtype``
    (router/src/lib.rs), so the method is the ``--quantize`` flag or, as TGI itself does, the
    checkpoint's ``quantization_config.quant_method``, and the dtype is ``--dtype`` or the one TGI's
    server forces for float16-only quantizers; no per-layer kernel or weight size is observable."""
    method = launch_flags.get("--quantize")
    if method is None and checkpoint_config:
        method = (checkpoint_config.get("quantization_config") or {}).get("quant_method")
    rep: dict[str, Any] = {"method": method, "kernels": [], "source": "launch flags + checkpoint config"}
    dtype = (info or {}).get("model_dtype") or launch_flags.get("--dtype")  # model_dtype: TGI before 3.3
    if not dtype and method in ("awq", "exl2", "gptq", "marlin"):
        dtype = "float16"  # server models/__init__.py: "These quantizers only work with float16 params"
    if dtype:
        rep["dtype"] = str(dtype).replace("torch.", "")
    else:
        rep["dtype_note"] = "TGI's per-model default (not reported by TGI 3.3's /info)"
    if launch_flags.get("--kv-cache-dtype"):
        rep["kv_cache_dtype"] = launch_flags["--kv-cache-dtype"]
    return QuantReport(**rep)  # (only the keys set here, in this order: run.json's object)


def from_trtllm_config(engine_config: dict[str, Any]) -> QuantReport:
    """A report from a TensorRT-LLM engine/checkpoint config.json (``quantization.quant_algo``)."""
    pretrained = engine_config.get("pretrained_config", engine_config)
    q = pretrained.get("quantization") or {}
    rep: dict[str, Any] = {"method": q.get("quant_algo"), "kernels": [], "source": "engine config.json"}
    if pretrained.get("dtype"):
        rep["dtype"] = pretrained["dtype"]
    if q.get("kv_cache_quant_algo"):
        rep["kv_cache_dtype"] = str(q["kv_cache_quant_algo"]).lower()
    return QuantReport(**rep)
