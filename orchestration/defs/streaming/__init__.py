"""The streaming domain's definitions (see orchestration/defs/__init__.py)."""
