"""Pure translation of the framework-neutral ServingSpec into each framework's native config.

Nothing in this package does I/O or imports a framework: ``compare plan`` works on a machine
without any engine installed.
"""
from adapters.spec import ServingSpec, UnsupportedSpecError

__all__ = ["ServingSpec", "UnsupportedSpecError"]
