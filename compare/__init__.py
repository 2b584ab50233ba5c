"""llm-compare: workloads, scheduling, metrics, statistics, results, reports and the CLI."""
__version__ = "0.1.0"
