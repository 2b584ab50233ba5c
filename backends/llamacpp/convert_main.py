"""``python -m backends.llamacpp.convert_main PRE CONVERTER_DIR ARGS...``: llama.cpp's
``convert_hf_to_gguf.py`` with the BPE pre-tokenizer declared instead of recognised.

The converter names a BPE tokenizer's pre-tokenizer by hashing how it splits a fixed text and
looking the hash up in a table of published models; a locally trained tokenizer (the embedded tiny
model's) is in no table, and the converter refuses it. Here, and only when the table has no
entry, ``get_vocab_base_pre`` returns the type declared by the caller (backends/llamacpp/gguf.py
derives it from the tokenizer's own ``pre_tokenizer`` in tokenizer.json). A tokenizer the table
knows keeps the converter's answer. The converter's file is not modified.
"""
from __future__ import annotations

import runpy
import sys
from typing import Any


def main(argv: list[str]) -> None:
    pre, conv_dir, rest = argv[0], argv[1], argv[2:]
    sys.path.insert(0, conv_dir)
    sys.path.insert(1, f"{conv_dir}/gguf-py")
    from conversion import base  # the converter's model classes (llama.cpp >= b7xxx layout)

    original = base.TextModel.get_vocab_base_pre

    def declared(self: Any, tokenizer: Any) -> Any:  # the converter's own (untyped) method
        try:
            return original(self, tokenizer)
        except NotImplementedError:
            if pre == "-":
                raise
            print(f"pre-tokenizer not in the converter's table: using the declared {pre!r}", file=sys.stderr)
            return pre

    base.TextModel.get_vocab_base_pre = declared
    sys.argv = [f"{conv_dir}/convert_hf_to_gguf.py", *rest]
    runpy.run_path(f"{conv_dir}/convert_hf_to_gguf.py", run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
