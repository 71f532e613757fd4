"""Operating long-running stateful jobs: locks, alerts, checkpoint health, state, savepoints.

Everything here works on a data root's files and Delta tables and needs no Dagster; the sensors,
jobs and commands in `orchestration` call it.
"""
