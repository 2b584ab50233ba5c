"""Text prompts without the served model's tokenizer: seeded token ids read as common English words.

An already running server may serve a model whose tokenizer is not on this machine. The workload is
still drawn the usual way (seeded ids, build.py); :class:`WordVocabulary` stands in for the
tokenizer's ``decode`` and turns each id into one short, common word, so a prompt of N ids becomes
N words -- about N tokens for the usual BPE vocabularies, never exactly. The server's own counts
(OpenAI ``usage``, TGI ``details``) are then the token counts the results use.
"""
from __future__ import annotations

from typing import Sequence

# short, frequent words: one token each (with the leading space) in GPT-2/Llama/Qwen-style vocabularies
WORDS: tuple[str, ...] = tuple(dict.fromkeys("""
the of and to in is it that for on was with he as at by this had not are but from or have an they
which one you were her all she there would their we him been has when who will more no if out so
said what up its about into than them can only other new some could time these two may then do
first any my now such like our over man me even most made after also did many before must through
back years where much your way well down should because each just those people how too little state
good very make world still own see men work long get here between both life being under never day
same another know while last might us great old year off come since against go came right used take
three small house use during without again place around however home found end big high next hand
part left number eye light name line city play water room land group side head story point road
mind body show food door plan air sun tree book game word song rain wind fire road ship star
town road open walk talk read write sing draw learn teach help start stop turn move live hold bring
""".split()))  # order kept, repeats dropped


class WordVocabulary:
    """The ``decode`` of a tokenizer, for prompts only: id -> a fixed word (deterministic on any machine)."""

    words = WORDS
    all_special_ids: tuple[int, ...] = ()

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        n = len(self.words)
        return " ".join(self.words[int(i) % n] for i in ids)
