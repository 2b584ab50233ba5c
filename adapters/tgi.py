"""ServingSpec -> ``text-generation-launcher`` argv and env (TGI 3.3). Pure: starts nothing.

Every flag emitted here exists in TGI 3.3's launcher reference (tests/fixtures/specs/tgi-3.3-launcher-flags.json,
checked by tests/adapters/test_tgi_adapter.py). Spec options TGI cannot honour raise UnsupportedSpecError
instead of being dropped. The model path is the one *inside* the container (see backends/tgi/backend.py,
which mounts the host directory read-only).
"""
from __future__ import annotations

from typing import Any, Mapping

from adapters.quant_matrix import native_names
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Load, Target, kv_elements_per_token

CONTAINER_PORT = 80  # the TGI image's own default (ENV PORT=80)

# Framework-neutral quantization -> --quantize, from the one quantization table. Pre-quantized
# checkpoints carry their method in config.json; naming it explicitly makes the plan say what will
# be loaded.
TGI_QUANTIZE: dict[str, str | None] = native_names("tgi")
TGI_DTYPE = {"float16": "float16", "bfloat16": "bfloat16"}  # launcher: [possible values: float16, bfloat16]
TGI_KV_CACHE_DTYPE = {"fp8": "fp8_e4m3fn", "fp8_e4m3": "fp8_e4m3fn", "fp8_e5m2": "fp8_e5m2"}

# Value types of the flags we emit or accept as native overrides (from the launcher reference);
# the reference JSON lists enumerated values, these cover the rest.
FLAG_TYPES: dict[str, str] = {
    "--model-id": "str", "--revision": "str", "--num-shard": "posint", "--sharded": "bool",
    "--quantize": "enum:awq,compressed-tensors,eetq,exl2,gptq,marlin,bitsandbytes,bitsandbytes-nf4,"
                  "bitsandbytes-fp4,fp8", "--dtype": "enum:float16,bfloat16", "--kv-cache-dtype": "enum:fp8_e4m3fn,fp8_e5m2",
    "--max-concurrent-requests": "posint", "--max-best-of": "posint", "--max-stop-sequences": "int",
    "--max-top-n-tokens": "int", "--max-input-tokens": "posint", "--max-input-length": "posint",
    "--max-total-tokens": "posint", "--waiting-served-ratio": "float", "--max-batch-prefill-tokens": "posint",
    "--max-batch-total-tokens": "posint", "--max-waiting-tokens": "int", "--max-batch-size": "posint",
    "--cuda-graphs": "intlist", "--hostname": "str", "--port": "port", "--cuda-memory-fraction": "fraction",
    "--speculate": "int", "--trust-remote-code": "switch", "--disable-custom-kernels": "switch",
    "--json-output": "switch", "--enable-prefill-logprobs": "switch", "--disable-grammar-support": "switch",
    "--usage-stats": "enum:on,off,no-stack", "--rope-scaling": "enum:linear,dynamic", "--rope-factor": "float",
    "--validation-workers": "posint", "--max-client-batch-size": "posint", "--payload-limit": "posint",
    "--tokenizer-config-path": "str", "--lora-adapters": "str", "--graceful-termination-timeout": "int",
}
# TGI 3.3's --max-concurrent-requests default: beyond it the router answers "Model is overloaded"
# (HTTP 429) instead of queueing (router/src/infer/mod.rs: a semaphore, try_acquire)
TGI_DEFAULT_MAX_CONCURRENT = 128
# Flags our container layer owns: an override would break the port mapping / model mount.
RESERVED = {"--hostname", "--port", "--model-id"}
# Flags whose value is a secret: never taken from the spec (specs are printed and stored in
# results); backends/tgi/backend.py passes $LLM_COMPARE_API_KEY to the container as API_KEY instead.
SECRET_FLAGS = {"--api-key", "--ngrok-authtoken"}


def check_value(flag: str, value: Any) -> str | None:
    """'' when legal for the flag's type, else the reason (values lists are checked by the caller)."""
    kind = FLAG_TYPES.get(flag, "str")
    text = str(value)
    try:
        if kind == "posint" and int(text) <= 0 or kind == "int" and int(text) < 0:
            return "must be a positive integer"
        if kind == "port" and not 0 < int(text) < 65536:
            return "must be a port number"
        if kind == "float" and float(text) < 0:
            return "must be a number >= 0"
        if kind == "fraction" and not 0 < float(text) <= 1:
            return "must be in (0, 1]"
        if kind == "intlist" and any(int(x) < 0 for x in text.split(",")):
            return "must be comma-separated batch sizes (0 disables)"
    except ValueError:
        return f"{text!r} is not a number"
    if kind == "bool" and text not in ("true", "false"):
        return "must be true or false"
    if kind.startswith("enum:") and text not in kind[5:].split(","):
        return f"must be one of {kind[5:]}"
    return None


def kv_bytes_per_token(cfg: Mapping[str, Any] | None, dtype: str, kv_dtype: str) -> int | None:
    """KV-cache bytes one token costs, from the model's config.json (None when unknown)."""
    values = kv_elements_per_token(cfg)
    if cfg is None or values is None:
        return None
    if kv_dtype != "auto":
        width = 1
    else:
        name = dtype if dtype != "auto" else str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
        width = 4 if "32" in name else 2
    return values * width


def tgi_launcher_args(spec: ServingSpec, model_path: str | None = None,
                      target: Target | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv after ``text-generation-launcher``, env) for the spec.

    ``model_path``: the model's path inside the container (default: spec.model as given, e.g. a
    hub id). ``target``: the probed model (its config.json sizes the KV budget).
    """
    flags: dict[str, str | None] = {"--model-id": model_path or spec.model}
    if spec.tokenizer and spec.tokenizer != spec.model:
        raise UnsupportedSpecError("tgi", "tokenizer", "TGI loads the tokenizer from --model-id",
                                   "put the tokenizer files into the model directory")
    q = TGI_QUANTIZE.get(spec.quantization)
    if spec.quantization not in TGI_QUANTIZE:
        raise UnsupportedSpecError("tgi", f"quantization={spec.quantization}", "unknown scheme")
    if spec.dtype != "auto":
        if spec.dtype not in TGI_DTYPE:
            raise UnsupportedSpecError("tgi", f"dtype={spec.dtype}", "the launcher takes float16 or bfloat16",
                                       "dtype=bfloat16, or dtype=auto for the checkpoint's own")
        if q is not None:
            raise UnsupportedSpecError("tgi", f"dtype={spec.dtype} with quantization={spec.quantization}",
                                       "--dtype cannot be used with --quantize", "dtype=auto")
        flags["--dtype"] = TGI_DTYPE[spec.dtype]
    if q is not None:
        flags["--quantize"] = q
    if spec.kv_cache_dtype != "auto":
        flags["--kv-cache-dtype"] = TGI_KV_CACHE_DTYPE[spec.kv_cache_dtype]
    if spec.max_model_len is not None:
        if spec.max_model_len < 2:
            raise UnsupportedSpecError("tgi", f"max_model_len={spec.max_model_len}",
                                       "TGI needs max input tokens < max total tokens", "max_model_len>=2")
        flags["--max-total-tokens"] = str(spec.max_model_len)
        flags["--max-input-tokens"] = str(spec.max_model_len - 1)  # must stay below max-total-tokens
    if spec.max_num_seqs is not None:
        flags["--max-batch-size"] = str(spec.max_num_seqs)
    if spec.max_num_batched_tokens is not None:
        flags["--max-batch-prefill-tokens"] = str(spec.max_num_batched_tokens)
    if spec.gpu_memory_utilization is not None:
        flags["--cuda-memory-fraction"] = str(spec.gpu_memory_utilization)
    if spec.kv_cache_memory_bytes is not None:
        # TGI sizes its KV cache in tokens: translate the byte budget with the model's geometry
        config = target.model.config if target is not None else None
        per_token = kv_bytes_per_token(config, spec.dtype, spec.kv_cache_dtype)
        if per_token is None:
            raise UnsupportedSpecError("tgi", "kv_cache_memory_bytes", "TGI sizes the KV cache in tokens and "
                                       "the model's config.json is not readable here to convert bytes",
                                       "--native tgi.--max-batch-total-tokens=N")
        flags["--max-batch-total-tokens"] = str(max(1, spec.kv_cache_memory_bytes // per_token))
    if spec.tensor_parallel != 1:
        flags["--num-shard"] = str(spec.tensor_parallel)
    if spec.enforce_eager:
        flags["--cuda-graphs"] = "0"  # "Use 0 to disable"
    for opt, why in (("block_size", "the attention backend fixes the block size"),
                     ("chunked_prefill", "TGI decides prefill chunking from its attention backend"),
                     ("prefix_caching", "TGI decides prefix caching from its attention backend")):
        if getattr(spec, opt) is not None:
            raise UnsupportedSpecError("tgi", f"{opt}={getattr(spec, opt)}", f"no launcher flag: {why}",
                                       f"leave {opt} unset for TGI")
    if spec.load_format == "dummy":
        raise UnsupportedSpecError("tgi", "load_format=dummy", "TGI always loads real weights")
    # a benchmark tool does not phone home on the user's behalf
    flags["--usage-stats"] = "off"
    env: dict[str, str] = {}
    for key, value in spec.native_for("tgi").items():
        if not str(key).startswith("-"):
            continue  # container settings (image, gpus, ...), handled by backends/tgi/backend.py
        flag = key if key.startswith("--") else "--" + key.lstrip("-")
        if flag in RESERVED:
            raise UnsupportedSpecError("tgi", f"native {flag}", "set by the container layer (port mapping, "
                                       "model mount)", "the spec's model field")
        if flag in SECRET_FLAGS:
            raise UnsupportedSpecError("tgi", f"native {flag}", "a secret in the spec would be printed in "
                                       "plans and stored in results", "export LLM_COMPARE_API_KEY; the "
                                       "container gets it as API_KEY and the client sends it")
        if flag not in FLAG_TYPES:
            raise UnsupportedSpecError("tgi", f"native {flag}", "not a text-generation-launcher 3.3 flag we pass",
                                       ", ".join(sorted(set(FLAG_TYPES) - RESERVED)))
        if isinstance(value, bool):
            if FLAG_TYPES.get(flag) == "switch":
                if value:
                    flags[flag] = None
                else:
                    flags.pop(flag, None)
                continue
            value = "true" if value else "false"
        if (why := check_value(flag, value)) is not None:
            raise UnsupportedSpecError("tgi", f"native {flag}={value}", why)
        flags[flag] = str(value)
    load = target.load if target is not None else Load()
    if "--max-concurrent-requests" not in flags and load.max_in_flight:
        flags["--max-concurrent-requests"] = str(admission_limit(load.max_in_flight))
    if (why := limits_problem(flags)) is not None:
        raise UnsupportedSpecError("tgi", why[0], why[1], why[2])
    flags["--hostname"] = "0.0.0.0"  # inside the container; Docker publishes it on 127.0.0.1 only
    flags["--port"] = str(CONTAINER_PORT)
    argv: list[str] = []
    for flag, value in flags.items():
        argv.append(flag)
        if value is not None:
            argv.append(value)
    return argv, env


def admission_limit(max_in_flight: int) -> int:
    """--max-concurrent-requests for a load of ``max_in_flight`` requests: TGI's default or twice the
    load, whichever is larger. Twice: the router releases a request's permit when its stream ends,
    and a closed-loop client sends its next request as soon as it has read that end, so for a
    moment every slot may hold two permits; a refusal there would be ours, not TGI's."""
    return max(TGI_DEFAULT_MAX_CONCURRENT, 2 * max_in_flight)


def _int(flags: Mapping[str, str | None], flag: str) -> int | None:
    v = flags.get(flag)
    return int(v) if v is not None else None


def limits_problem(flags: Mapping[str, str | None]) -> tuple[str, str, str] | None:
    """(option, reason, fix) when the token limits break a rule TGI 3.3 checks at start
    (launcher/src/main.rs, backends/v3/src/main.rs), else None: the run fails here, not after the
    container has loaded the model."""
    mit, mil = _int(flags, "--max-input-tokens"), _int(flags, "--max-input-length")
    mtt, mbtt = _int(flags, "--max-total-tokens"), _int(flags, "--max-batch-total-tokens")
    prefill = _int(flags, "--max-batch-prefill-tokens")
    if mit is not None and mil is not None:
        return ("--max-input-tokens with --max-input-length", "TGI refuses both (max_input_length is the "
                "deprecated name)", "--native tgi.--max-input-tokens=N only")
    mit = mit if mit is not None else mil
    if mit is not None and mtt is not None and mit >= mtt:
        return (f"--max-input-tokens {mit}", f"must be < --max-total-tokens {mtt}", f"max_model_len>{mit}")
    if mbtt is not None and mtt is not None and mtt > mbtt:
        return (f"--max-total-tokens {mtt}", f"must be <= --max-batch-total-tokens {mbtt} (one request must fit "
                "the KV budget)", "a larger kv_cache_memory_bytes or a smaller max_model_len")
    if mbtt is not None and prefill is not None and prefill > mbtt:
        return (f"--max-batch-prefill-tokens {prefill}", f"must be <= --max-batch-total-tokens {mbtt}",
                f"max_num_batched_tokens<={mbtt}")
    return None


def limits_plan(argv: list[str], load: Load, overridden: bool) -> dict[str, Any]:
    """`compare plan`: the admission and batch limits TGI will run with and where they come from."""
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(argv):  # switches carry no value
        value = None if FLAG_TYPES.get(argv[i]) == "switch" or i + 1 >= len(argv) else argv[i + 1]
        flags[argv[i]] = value
        i += 1 if value is None else 2
    limit = _int(flags, "--max-concurrent-requests") or TGI_DEFAULT_MAX_CONCURRENT
    n = load.max_in_flight
    if overridden:
        source = "--native tgi.--max-concurrent-requests"
    elif n:
        source = (f"2 x the run's highest concurrency {n} (open-loop levels count all their requests), "
                  f"at least TGI's default {TGI_DEFAULT_MAX_CONCURRENT}")
    else:
        source = "TGI's default (no bound on the run's load known: --concurrency, or --rate with --num-requests)"
    out: dict[str, Any] = {"max_concurrent_requests": limit, "source": source, "notes": []}
    if n and limit < n:
        out["notes"].append(f"{n - limit} of {n} requests in flight will be refused as overloaded (HTTP 429)")
    batch = _int(flags, "--max-batch-size")
    if n and batch is not None and batch < n:
        out["notes"].append(f"--max-batch-size {batch}: requests beyond {batch} wait in TGI's queue (admitted, "
                            "not refused)")
    mtt, mbtt = _int(flags, "--max-total-tokens"), _int(flags, "--max-batch-total-tokens")
    longest = load.max_request_tokens
    if longest and mtt is not None and longest > mtt:
        out["notes"].append(f"the longest request (~{longest} tokens) exceeds --max-total-tokens {mtt}: TGI will "
                            "refuse it as a validation error")
    if n and longest and mbtt is not None and mbtt // longest < n:
        out["notes"].append(f"--max-batch-total-tokens {mbtt} holds about {max(1, mbtt // longest)} requests of "
                            f"~{longest} tokens at once; the rest wait in TGI's queue")
    return out


def validate_argv(argv: list[str], reference: dict[str, dict[str, Any]]) -> list[str]:
    """Problems with an argv against the launcher reference: unknown flags, illegal values."""
    problems = []
    i = 0
    while i < len(argv):
        flag = argv[i]
        ref = reference.get(flag)
        if ref is None:
            problems.append(f"{flag}: not a text-generation-launcher 3.3 flag")
            i += 1
            continue
        if FLAG_TYPES.get(flag) == "switch":
            i += 1
            continue
        value = argv[i + 1] if i + 1 < len(argv) else None
        if value is None:
            problems.append(f"{flag}: missing value")
        elif ref.get("values") and value not in ref["values"]:
            problems.append(f"{flag} {value}: not one of {', '.join(ref['values'])}")
        elif (why := check_value(flag, value)) is not None:
            problems.append(f"{flag} {value}: {why}")
        i += 2
    return problems
