"""Shared pieces of the stateful jobs: dedup, pane-based sliding windows, idle-TTL epochs, pandas time helpers."""
