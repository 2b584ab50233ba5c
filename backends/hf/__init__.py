"""transformers: the reference (reference.py: model.generate, one request at a time, the float32
quality reference) and continuous batching (cb.py, its manager in cb_engine.py's process);
adapters/hf.py and adapters/hf_cb.py are the pure plans."""
