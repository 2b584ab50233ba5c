"""Quality measured without sharing the device under test.

While an engine runs it only answers the quality probes: greedy requests from the run's own
request list (with its top-k logprobs where it streams them) and, with an accuracy task, the task
prompts. Nothing else is loaded beside it. Once every engine of the run has stopped, the
reference (the unquantized model in float32 under transformers, ``parity.reference_model_for``)
is loaded once, scores every backend's probes teacher-forced, answers the task prompts, and is
unloaded. So no speed number is measured next to a 4-bytes-per-parameter copy of the model, and
no engine loses memory to one: a 7B reference alone is ~30 GB.

Where the reference goes (``place``): with ``device=auto``, the GPU when its free memory holds the
float32 weights with a margin, else the CPU when the available RAM does, else quality is skipped
with both figures in the reason. ``cpu`` / ``cuda`` force a place (and say so when it cannot hold
the model). The place and why are recorded with the results.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable

from adapters.spec import ServingSpec
from compare.quality.parity import (
    QualityOptions, _probe, accuracy, is_correct, parity, reference_model_for, wanted,
)
from core.records import GenerationRequest
from core.results.evolve import evolve
from core.results.quality import AccuracyResult, Quality, QualityReference

GIB = 2**30
MARGIN = 1.15  # activations of a few hundred tokens, the allocator's slack
OVERHEAD = 2 * GIB  # a CUDA context / the interpreter and torch on the CPU side


@dataclass(frozen=True)
class Probed:
    """One backend's answers, kept until the reference scores them."""

    backend: str
    reference: str
    probes: tuple[GenerationRequest, ...]
    samples: tuple[dict[str, Any], ...]
    top_k: int | None
    answers: tuple[tuple[int, ...], ...] = ()  # accuracy task: the candidate's output token ids


def _tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


async def collect(name: str, backend: Any, spec: ServingSpec, requests: list[GenerationRequest],
                  opts: QualityOptions, timeout_s: float = 600.0) -> tuple[Quality, Probed | None]:
    """While the engine runs: (the run.json quality entry for now, the answers to score later).
    Never raises: a failure is recorded (quality must never sink the speed numbers)."""
    try:
        why = wanted(spec, opts)
    except (OSError, ValueError) as e:
        why = f"skipped: cannot read {spec.model}/config.json ({type(e).__name__})"
    if why:
        return Quality(status="refused" if why.startswith("refused") else "skipped", reason=why), None
    ref_model = reference_model_for(spec, opts)
    if ref_model is None:
        return Quality(status="skipped", reason=f"no local reference model for {spec.model}; "
                                                f"pass one with --quality-reference DIR"), None
    try:
        top_k = opts.top_k if backend.capabilities.logprobs else None
        probes = tuple(GenerationRequest(request_id=f"quality-{i}", max_tokens=min(r.max_tokens, opts.max_tokens),
                                         prompt_token_ids=r.prompt_token_ids, prompt_text=r.prompt_text,
                                         messages=r.messages, ignore_eos=True, temperature=0.0, logprobs=top_k)
                       for i, r in enumerate(requests[: opts.num_prompts]))
        samples = tuple([await _probe(backend, p, timeout_s) for p in probes])
        answers: tuple[tuple[int, ...], ...] = ()
        if opts.accuracy:
            tok = await asyncio.get_running_loop().run_in_executor(None, _tokenizer, ref_model)
            answers = tuple([tuple((await _probe(backend, req, timeout_s))["tokens"])
                             for req in accuracy_requests(tok, opts)])
    except Exception as e:
        return Quality(status="failed", reason=f"{type(e).__name__}: {str(e)[:300]}"), None
    unknown = sum(1 for s in samples for t in s["tokens"] if t < 0)
    if unknown:  # an id the stream did not carry (-1): teacher forcing needs every one
        return Quality(status="failed", reason=f"{unknown} of the probes' generated tokens came without their id "
                                               f"from {name}'s stream, so they cannot be compared with the "
                                               f"reference"), None
    return (Quality(status="pending", reason="scored against the reference once every engine has stopped"),
            Probed(name, ref_model, probes, samples, top_k, answers))


def accuracy_requests(tok: Any, opts: QualityOptions) -> list[GenerationRequest]:
    """The accuracy task's prompts, as the same token ids for the candidate and the reference."""
    return [GenerationRequest(request_id=f"acc-{i}", max_tokens=opts.accuracy_max_tokens,
                              prompt_token_ids=tuple(tok(prompt)["input_ids"]), ignore_eos=False)
            for i, (prompt, _) in enumerate(opts.accuracy)]


# ---------------------------------------------------------------- where the reference goes

def choose_device(need_bytes: int | None, want: str, cuda_free: int | None,
                  ram_free: int | None) -> tuple[str | None, str]:
    """(device or None, why) for a reference needing ``need_bytes`` (None: unknown size).
    ``cuda_free``: free bytes on the GPU (None: no GPU); ``ram_free``: available RAM."""
    def gb(x: int | None) -> str:
        return "?" if x is None else f"{x / GIB:.1f} GB"

    if want == "cuda" and cuda_free is None:
        return None, "skipped: --quality-device cuda, but torch sees no GPU here"
    if need_bytes is None:  # no safetensors to size it: go where asked, or where it ran before
        dev = want if want != "auto" else ("cuda" if cuda_free is not None else "cpu")
        return dev, f"size unknown (no safetensors headers); placed on {dev}"
    fits_gpu = cuda_free is not None and need_bytes <= cuda_free
    fits_ram = ram_free is None or need_bytes <= ram_free
    if want == "cuda":
        return (("cuda", f"needs {gb(need_bytes)}, GPU free {gb(cuda_free)}") if fits_gpu else
                (None, f"skipped: the float32 reference needs {gb(need_bytes)}, the GPU has {gb(cuda_free)} "
                       f"free; --quality-device cpu, or --quality off"))
    if want == "cpu":
        return (("cpu", f"needs {gb(need_bytes)}, RAM available {gb(ram_free)}") if fits_ram else
                (None, f"skipped: the float32 reference needs {gb(need_bytes)}, RAM available {gb(ram_free)}; "
                       f"--quality off, or --quality-reference a smaller model"))
    if fits_gpu:
        return "cuda", f"needs {gb(need_bytes)}, GPU free {gb(cuda_free)} once the engines stopped"
    if fits_ram:
        where = "no GPU" if cuda_free is None else f"GPU free {gb(cuda_free)}"
        return "cpu", f"needs {gb(need_bytes)}, {where}, RAM available {gb(ram_free)}"
    return None, (f"skipped: the float32 reference needs {gb(need_bytes)}; GPU free {gb(cuda_free)}, "
                  f"RAM available {gb(ram_free)}; --quality off, or --quality-reference a smaller model")


def reference_bytes(model: str) -> int | None:
    from backends.models.probe import parameter_count

    n = parameter_count(model)
    return None if n is None else int(n * 4 * MARGIN) + OVERHEAD


def free_memory() -> tuple[int | None, int | None]:
    """(free bytes on the first visible GPU or None, available RAM or None), asked only after the
    engines have stopped (the CUDA query opens this process's context)."""
    cuda = ram = None
    try:
        import torch

        if torch.cuda.is_available():
            cuda = int(torch.cuda.mem_get_info()[0])
    except Exception:  # a broken CUDA install: the CPU it is
        cuda = None
    try:
        import psutil

        ram = int(psutil.virtual_memory().available)
    except Exception:
        ram = None
    return cuda, ram


def place(model: str, opts: QualityOptions) -> tuple[str | None, str]:
    cuda, ram = free_memory()
    return choose_device(reference_bytes(model), opts.device, cuda, ram)


# ---------------------------------------------------------------- scoring, engines stopped

async def score(pending: list[Probed], opts: QualityOptions,
                status: Callable[[str], None] = lambda s: None) -> dict[str, Quality]:
    """Every pending backend's quality entry, one reference load per reference model."""
    from backends import registry

    # the float32 reference: whichever backend registers the "reference" role
    reference = registry.factory_of(registry.with_role("reference"))

    out: dict[str, Quality] = {}
    for model in dict.fromkeys(p.reference for p in pending):
        group = [p for p in pending if p.reference == model]
        device, why = place(model, opts)
        if device is None:
            out.update({p.backend: Quality(status="skipped", reason=why) for p in group})
            continue
        status(f"loading the float32 reference on {device} ({why})")
        try:
            async with reference(ServingSpec(model=model, dtype="float32"), name="reference", device=device) as ref:
                ref_answers = None
                for p in group:
                    status(f"scoring {p.backend} against the reference")
                    out[p.backend] = await _score_one(ref, p, device, why)
                    if opts.accuracy and p.answers:
                        if ref_answers is None:
                            reqs = accuracy_requests(ref._tok, opts)
                            ref_answers = [(await _probe(ref, r, 600.0))["tokens"] for r in reqs]
                        out[p.backend] = evolve(out[p.backend],
                                                accuracy=_accuracy(ref._tok, p.answers, ref_answers, opts))
        except Exception as e:  # e.g. out of memory on the chosen device: the run keeps its speed numbers
            fail = Quality(status="failed", reason=f"reference on {device}: {type(e).__name__}: {str(e)[:300]}")
            out.update({p.backend: fail for p in group if p.backend not in out})
    return out


async def _score_one(ref: Any, p: Probed, device: str, why: str) -> Quality:
    scores = [await ref.score(q, s["tokens"], [list(t) for t in s["top"]] or None)
              for q, s in zip(p.probes, p.samples)]
    reference = QualityReference(model=p.reference, framework="transformers", dtype="float32", device=device,
                                 placement=why, when="after every engine of the run stopped")
    return Quality.measured(reference, p.top_k, parity(list(p.samples), scores))


def _accuracy(tok: Any, cand: tuple[tuple[int, ...], ...], ref: list[list[int]],
              opts: QualityOptions) -> AccuracyResult:
    """Exact-match accuracy of both sides' decoded answers (one tokenizer decodes both)."""
    gold = [a for _, a in opts.accuracy]

    def right(outs: Any) -> list[bool]:
        return [is_correct(tok.decode(list(o), skip_special_tokens=True), a) for o, a in zip(outs, gold)]

    return accuracy(right(cand), right(ref))


# ---------------------------------------------------------------- the runner's hooks

async def score_quality(cfg: Any, writer: Any, pending: list[Probed], progress: Any) -> None:
    """The quality probes answered during the run, scored now that every engine has stopped, into
    each backend's run.json entry; the reference's own output goes to logs/quality.log."""
    if not pending:
        return
    from backends.logs import capture, log_file

    progress.backend_start("quality")
    log = log_file(writer.dir, "quality")
    on_line = (lambda line: progress.log_line("quality", line)) if cfg.stream_logs else None
    try:
        with capture(log, on_line):
            results = await score(pending, cfg.quality, lambda what: progress.phase("quality", what, log))
    except Exception as e:  # (score records a reference that fails to load; this is anything else)
        # every engine has stopped and its speed results are written: quality never sinks them
        why = f"not measured: the quality step failed after every engine stopped ({type(e).__name__}: {str(e)[:300]})"
        results = {p.backend: Quality(status="failed", reason=why) for p in pending}
    for name, q in results.items():
        writer.update_backend(name, quality=q)
        said = (f"token agreement {q.token_agreement} vs the float32 reference on "
                f"{q.reference.device}" if q.status == "measured" and q.reference else f"{q.status}: {q.reason}")
        progress.note(name, f"  {name} quality: {said}")
    pending.clear()
    writer.flush()


def unscored(writer: Any, pending: list[Probed], why: str) -> None:
    """A run that ends before the reference scored its probes says so per backend."""
    for p in pending:
        writer.update_backend(p.backend, quality=Quality(status="skipped", reason=why))
    pending.clear()
