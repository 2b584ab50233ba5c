"""What a command runs on when the user names less: backend lists, the embedded default spec, served models."""
from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import UserError

# The embedded default: a tiny model on CPU needs an explicit KV size (vLLM's CPU memory check)
DEFAULT_TINY_SPEC = {"dtype": "float32", "max_model_len": 512, "kv_cache_memory_bytes": 64 * 2**20,
                     # torch.compile on CPU costs ~2 min at start; eager starts in seconds
                     "enforce_eager": True}
DEFAULT_WORKLOAD = {"name": "default", "num_requests": 16, "input": {"dist": "fixed", "value": 64},
                    "output": {"dist": "fixed", "value": 32}}
DEFAULT_LEVELS = "1,4"


def parse_backends(text: str) -> list[str]:
    from adapters.variants import split_names, split_variant

    names = split_names(text)  # a name may hold commas in brackets: vllm[block_size=32,max_num_seqs=8]
    if not names:
        raise UserError("--backends is empty: name at least one, e.g. --backends vllm,hf")
    if text.strip().startswith(",") or text.strip().endswith(",") or re.search(r",\s*,", text):
        raise UserError(f"--backends {text!r}: an empty name between commas; e.g. --backends vllm,hf")
    from backends.registry import entry_for

    for n in names:
        base, overrides = split_variant(n)
        if overrides:  # a results name typed as a backend: the variant is made by --vary
            vary = " ".join(f"--vary {k}={v}" for k, v in overrides.items())
            raise UserError(f"--backends {n}: knob variants are made with --vary, e.g. --backends {base} {vary} "
                            f"(give every value to compare: --vary {next(iter(overrides))}=A,B)")
        entry_for(n)  # raises UnknownBackendError naming the known ones
    if len(set(names)) != len(names):
        raise UserError(f"--backends {text!r} names a backend twice; use name@target to tell copies apart")
    return names


def default_backends() -> str:
    """The embedded default's backends: the entries that rank themselves in it (two real serving
    engines with the quality reference beside them), in their order."""
    from backends import registry

    ranked = sorted((e for e in registry.entries() if e.default_rank), key=lambda e: e.default_rank)
    return ",".join(e.name for e in ranked)


def has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def _split_endpoints(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(already running servers, engines started here) among the backends (``parse_backends``)."""
    from backends.served_model import endpoint

    remote = [n for n in names if endpoint(n) is not None]
    return remote, [n for n in names if n not in remote]


def tiny_defaults(model: str | None, spec_file: str | None, backends: Sequence[str] = ()) -> dict[str, str]:
    """No --model and no --spec: the embedded tiny model (built once) and its CPU spec defaults,
    as spec defaults (``build_spec``: used for every flag the user left unset); {} otherwise.
    Never for a run that talks to an already running server: that server's model is the run's
    model."""
    if model is not None or spec_file:
        return {}
    remote, local = _split_endpoints(backends)
    if remote and local:
        raise UserError(f"--backends mixes already running servers ({', '.join(_shown(remote))}) with engines "
                        f"started here ({', '.join(local)}) and no --model: pass --model DIR, the model "
                        f"the servers serve, so the engines here load the same one")
    if remote:
        raise UserError(f"{_shown(remote)[0]} serves its own model; pass --model NAME (this command does not ask "
                        f"the server; `compare run` does)")
    from backends.models.tiny import ensure_tiny_model

    print("using the embedded tiny Qwen2 model (built once, cached)", file=sys.stderr)
    return {"model": str(ensure_tiny_model()), **{k: str(v) for k, v in DEFAULT_TINY_SPEC.items()}}


def _shown(names: list[str]) -> list[str]:
    from backends.http.urls import redact_url

    return [redact_url(n) for n in names]


@dataclass(frozen=True)
class ServedRun:
    """A run against already running servers only, without --model: what they serve is the run's model."""

    endpoints: tuple[Any, ...]  # backends.served_model.ServedModel, one per server
    tokenizer: str | None  # --tokenizer DIR, the served model's tokenizer on this machine

    @property
    def model(self) -> str:
        return self.endpoints[0].model

    def workload_defaults(self) -> dict[str, Any]:
        # without the tokenizer, token ids mean nothing to the server: prompts are text
        return {} if self.tokenizer else {"prompt_format": "text"}

    def prompt_tokenizer(self, workload: Any) -> Any:
        """What turns the workload's seeded ids into prompts: None for the spec's tokenizer."""
        if self.tokenizer:
            return None
        if workload.prompt_format == "token_ids":
            raise UserError("--prompt-format token_ids against a served model needs its tokenizer: pass "
                            "--tokenizer DIR (a local copy) or use --prompt-format text")
        from backends import registry

        # the endpoints that take chat messages and apply the server's own chat template
        chat = [e.name for e in registry.entries() if "chat" in e.roles]
        chat_only = all(e.backend.partition("@")[0] in chat for e in self.endpoints)
        if workload.prompt_format == "chat" and not chat_only:
            raise UserError(f"--prompt-format chat needs the served model's chat template here (only "
                            f"{' and '.join(n + '@URL' for n in chat)} applies its own): pass --tokenizer DIR or use "
                            f"--prompt-format text")
        if workload.sharegpt:
            return None  # the dataset's own text; output lengths from the workload's output dist
        from compare.workload.words import WordVocabulary

        return WordVocabulary()

    def confirm(self, requests: list[Any]) -> None:
        """Refuse requests longer than a server allows (token-id prompts are exact; text is counted
        by the server), then say once where the model and the prompts come from."""
        if not self.tokenizer and any(r.prompt_token_ids is not None for r in requests):  # e.g. --replay
            raise UserError("the requests have token-id prompts, which mean nothing to a served model without its "
                            "tokenizer: pass --tokenizer DIR (a local copy) or replay a text-prompt run")
        limits = [e.max_model_len for e in self.endpoints if e.max_model_len]
        sizes = [len(r.prompt_token_ids) + r.max_tokens for r in requests if r.prompt_token_ids is not None]
        if limits and sizes and max(sizes) > min(limits):
            raise UserError(f"the longest request is {max(sizes)} tokens (prompt + output) but the server allows "
                            f"{min(limits)} (max_model_len); lower --input-len/--output-len")
        first = self.endpoints[0]
        limit = f" (max_model_len {first.max_model_len})" if first.max_model_len else ""
        how = (f"prompts from the tokenizer in {self.tokenizer}" if self.tokenizer else
               "no local tokenizer (--tokenizer DIR): prompts are text, token counts come from the server")
        print(f"model {first.model!r} {first.source}{limit}; {how}", file=sys.stderr)
        others = [f"{e.backend}: {e.model!r}" for e in self.endpoints[1:] if e.model != first.model]
        if others:
            print(f"note: the servers name different models ({'; '.join(others)}); run.json records each",
                  file=sys.stderr)

    def header(self, workload: Any) -> dict[str, Any]:
        """run.json's ``model_source``: what the servers said they serve, and how prompts were made."""
        if self.tokenizer:
            prompts = f"{workload.prompt_format} (tokenizer {self.tokenizer})"
        elif workload.sharegpt:
            prompts = f"{workload.prompt_format} from {workload.sharegpt}; token counts from the server"
        else:
            prompts = (f"{workload.prompt_format}: seeded common words, about one token each "
                       f"(compare/workload/words.py); token counts from the server")
        return {"model_source": {"model": self.model, "source": self.endpoints[0].source,
                                 "tokenizer": self.tokenizer, "prompts": prompts,
                                 "endpoints": [e.as_dict() for e in self.endpoints]}}


def served_defaults(model: str | None, spec_file: str | None, backends: Sequence[str], timeout_s: float,
                    tok: str | None) -> tuple[ServedRun | None, dict[str, str]]:
    """No --model, no --spec, and every backend an already running server (``openai@URL``,
    ``tgi@URL``...): ask each what it serves; the first one's name (and the smallest max model
    length) become the spec's defaults (``build_spec``). ``ServedRun.confirm`` says where the
    model and the prompts come from. (None, {}) for any other run. ``tok``: --tokenizer DIR."""
    if model is not None or spec_file:
        return None, {}
    remote, local = _split_endpoints(backends)
    if not remote or local:
        return None, {}  # tiny_defaults refuses a mix with one line
    from backends.served_model import served_model

    served = tuple(served_model(n, min(float(timeout_s or 30.0), 30.0)) for n in remote)
    if tok is not None and not Path(tok).is_dir():
        raise UserError(f"--tokenizer {tok} is not a directory; pass the served model's local tokenizer directory")
    defaults = {"model": served[0].model}
    lens = [s.max_model_len for s in served if s.max_model_len]
    if lens:
        defaults["max_model_len"] = str(min(lens))
    return ServedRun(served, tok), defaults
