"""Backends: the one interface (base.Backend) and everything that does I/O with an engine."""
