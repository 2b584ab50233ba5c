"""The fake engine's one knob: its sequence slots follow max_num_seqs, so the tuning search itself
(probes, repeats, cache, Pareto, the tuned spec) runs without a real engine."""
from __future__ import annotations

from adapters.tuning import Knob, Space

SPACE = Space("fake", (
    Knob("max_num_seqs", (1, 8), int, field="max_num_seqs", help="sequence slots (requests beyond queue)"),
), lambda cfg, spec, gpu: None)
