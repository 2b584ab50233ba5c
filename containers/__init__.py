"""Container image definitions and the container lifecycle (Docker SDK)."""
