"""meshcast: analytical performance simulator and parallel-plan planner for LLM training."""
__version__ = "0.1.0"
