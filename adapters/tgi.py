"""ServingSpec -> ``text-generation-launcher`` argv and env (TGI 3.3). Pure: starts nothing.

Every flag and environment variable emitted here is a row of the TGI v3.3.7 fact sheet
(adapters/facts/tgi-v3.3.7.json, read from the upstream source; checked by
tests/adapters/test_tgi_upstream_facts.py) and of the launcher reference
(tests/fixtures/specs/tgi-3.3-launcher-flags.json). Spec options TGI cannot honour raise UnsupportedSpecError
instead of being dropped. The model path is the one *inside* the container (see backends/tgi/backend.py,
which mounts the host directory read-only).
"""
from __future__ import annotations

from typing import Any, Mapping

from adapters.quant_matrix import native_names
from adapters.facts import load as load_facts
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Load, Target

CONTAINER_PORT = 80  # the TGI image's own default (ENV PORT=80)

# Framework-neutral quantization -> --quantize, from the one quantization table. Pre-quantized
# checkpoints carry their method in config.json; naming it explicitly makes the plan say what will
# be loaded.
TGI_QUANTIZE: dict[str, str | None] = native_names("tgi")
TGI_DTYPE = {"float16": "float16", "bfloat16": "bfloat16"}  # launcher: [possible values: float16, bfloat16]
TGI_KV_CACHE_DTYPE = {"fp8": "fp8_e4m3fn", "fp8_e4m3": "fp8_e4m3fn", "fp8_e5m2": "fp8_e5m2"}

FACTS = load_facts("tgi-v3.3.7")  # adapters/facts/tgi-v3.3.7.json: TGI's own definitions, per upstream file
# Flags whose value is a secret: never taken from the spec (specs are printed and stored in
# results); backends/tgi/backend.py passes $LLM_COMPARE_API_KEY to the container as API_KEY instead.
SECRET_FLAGS = {"--api-key", "--ngrok-authtoken"}
# Value types of the launcher flags we emit or accept as native overrides, from the fact sheet
FLAG_TYPES: dict[str, str] = {k: f.type for k, f in FACTS.of("flag").items() if k not in SECRET_FLAGS}
# TGI 3.3's --max-concurrent-requests default: beyond it the router answers "Model is overloaded"
# instead of queueing: an `overloaded` error event in /generate_stream's HTTP 200, a 429 on /generate (router/src/infer/mod.rs: a semaphore, try_acquire)
TGI_DEFAULT_MAX_CONCURRENT = int(FACTS.require("--max-concurrent-requests").value)
# validation.rs DEFAULT_GENERATION_LENGTH: a stream is generated in chunks of at most this many tokens
GENERATION_CHUNK = int(FACTS.require("default.max_new_tokens_chunk").value)
# Flags our container layer owns: an override would break the port mapping / model mount.
RESERVED = {"--hostname", "--port", "--model-id"}
KV_BUDGET_WHY = ("TGI 3.3 sizes the KV cache from the GPU memory free after warm-up x --cuda-memory-fraction x "
                 "TGI_WIGGLE_ROOM (0.90) and ignores --max-batch-total-tokens for flash-attention models "
                 "(backends/v3/src/lib.rs): a byte budget has no launcher equivalent")


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


def tgi_launcher_args(spec: ServingSpec, model_path: str | None = None,
                      target: Target | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv after ``text-generation-launcher``, env) for the spec.

    ``model_path``: the model's path inside the container (default: spec.model as given, e.g. a
    hub id). ``target``: the probed model and machine, and the run's load.
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
        raise UnsupportedSpecError("tgi", f"kv_cache_memory_bytes={spec.kv_cache_memory_bytes}", KV_BUDGET_WHY,
                                   "gpu_memory_utilization=F instead (TGI's --cuda-memory-fraction, which "
                                   "caps the whole process: weights, activations and KV)")
    if spec.tensor_parallel != 1:
        flags["--num-shard"] = str(spec.tensor_parallel)
    if spec.enforce_eager:
        flags["--cuda-graphs"] = "0"  # "Use 0 to disable"
    if spec.block_size is not None:
        raise UnsupportedSpecError("tgi", f"block_size={spec.block_size}", "no launcher flag or environment: the "
                                   "attention backend fixes it (flashinfer 1, flashdecoding 256, paged 16; "
                                   "server models/globals.py)", "leave block_size unset for TGI")
    env: dict[str, str] = {}
    # no launcher flag, but the launcher (resolve_attention) and the server (models/globals.py) read
    # these from their environment, which the container passes on to every shard
    if spec.prefix_caching is not None:
        env["PREFIX_CACHING"] = "1" if spec.prefix_caching else "0"
    if spec.chunked_prefill is not None:
        env["PREFILL_CHUNKING"] = "1" if spec.chunked_prefill else "0"
    if spec.load_format == "dummy":
        raise UnsupportedSpecError("tgi", "load_format=dummy", "TGI always loads real weights")
    # a benchmark tool does not phone home on the user's behalf
    flags["--usage-stats"] = "off"
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
    attention_problem(spec, flags, target)
    if (broken := limits_problem(flags, chunking_off(spec, flags, target))) is not None:
        raise UnsupportedSpecError("tgi", broken[0], broken[1], broken[2])
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


def paged_attention(target: Target | None) -> bool:
    """TGI falls back to paged attention below compute capability 8 (launcher resolve_attention);
    prefix caching and prefill chunking need flashinfer or flashdecoding."""
    cc = target.machine.compute_capability if target is not None else None
    return bool(cc) and target is not None and target.machine.device == "cuda" and float(str(cc)) < 8


def chunking_off(spec: ServingSpec, flags: Mapping[str, str | None], target: Target | None) -> bool:
    """Known at plan time that TGI will not chunk prefills: PREFILL_CHUNKING=0, speculation on, or
    paged attention (server models/model.py turns chunking off in the last two)."""
    return (spec.chunked_prefill is False or (_int(flags, "--speculate") or 0) > 0 or paged_attention(target))


def attention_problem(spec: ServingSpec, flags: Mapping[str, str | None], target: Target | None) -> None:
    """Refuse what TGI would silently turn off or fail on at start (server models/model.py, globals.py)."""
    if spec.chunked_prefill and (_int(flags, "--speculate") or 0) > 0:
        raise UnsupportedSpecError("tgi", "chunked_prefill=true with --speculate", "TGI turns prefill chunking "
                                   "off with speculation (\"Prefill chunking does not support speculation yet\")",
                                   "drop --speculate or chunked_prefill")
    if paged_attention(target) and (spec.chunked_prefill or spec.prefix_caching):
        opt = "chunked_prefill" if spec.chunked_prefill else "prefix_caching"
        raise UnsupportedSpecError("tgi", f"{opt}=true on compute capability {target.machine.compute_capability}"
                                   if target else opt, "TGI uses paged attention below compute capability 8, and "
                                   "prefix caching and prefill chunking need flashinfer or flashdecoding",
                                   f"leave {opt} unset")


def limits_problem(flags: Mapping[str, str | None], no_chunking: bool = False) -> tuple[str, str, str] | None:
    """(option, reason, fix) when the token limits break a rule TGI 3.3 checks at start
    (launcher/src/main.rs, backends/v3/src/main.rs), else None: the run fails here, not after the
    container has loaded the model. ``no_chunking``: TGI will not chunk prefills, so the prefill
    budget must hold the longest input (checked by the router only then)."""
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
        # the launcher checks the given value even though flash-attention models then ignore it
        return (f"--max-total-tokens {mtt}", f"must be <= --max-batch-total-tokens {mbtt} (checked by the "
                "launcher)", f"drop --max-batch-total-tokens (ignored for flash-attention models) or raise it to {mtt}")
    if no_chunking and mit is not None and prefill is not None and prefill < mit:
        return (f"--max-batch-prefill-tokens {prefill}", f"must be >= --max-input-tokens {mit} when TGI cannot "
                "chunk prefills (backends/v3/src/main.rs)", f"max_num_batched_tokens>={mit}")
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
        out["notes"].append(f"{n - limit} of {n} requests in flight will be refused as overloaded (an `overloaded` "
                            "error event in /generate_stream's HTTP 200 answer)")
    batch = _int(flags, "--max-batch-size")
    if n and batch is not None and batch < n:
        out["notes"].append(f"--max-batch-size {batch}: requests beyond {batch} wait in TGI's queue (admitted, "
                            "not refused)")
    if "--max-batch-total-tokens" in flags:
        out["notes"].append("--max-batch-total-tokens is deprecated and ignored for flash-attention models: TGI sizes "
                            "the KV cache from free GPU memory x --cuda-memory-fraction (metric "
                            "tgi_batch_max_total_tokens reports what it chose)")
    mtt = _int(flags, "--max-total-tokens")
    longest = load.max_request_tokens
    if longest and mtt is not None and longest > mtt:
        out["notes"].append(f"the longest request (~{longest} tokens) exceeds --max-total-tokens {mtt}: TGI admits it "
                            f"when its input + min(max_new_tokens, {GENERATION_CHUNK}) fits, and ends it with "
                            "finish reason `length` once a continuation no longer fits (router/src/validation.rs, "
                            "infer/mod.rs)")
    if longest and longest > GENERATION_CHUNK:
        out["notes"].append(f"outputs longer than {GENERATION_CHUNK} tokens are generated in {GENERATION_CHUNK}-token "
                            "chunks: each continuation is re-queued and re-prefills prompt + output so far (an "
                            f"inter-token gap every {GENERATION_CHUNK} tokens; the last chunk may overshoot "
                            "max_new_tokens)")
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
