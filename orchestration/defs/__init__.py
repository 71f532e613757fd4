"""tidemark's Dagster definitions, one folder per domain, one file per Dagster concept.

    streaming/   assets (bronze/<stream>, gold/<job>), jobs (streaming_job,
                 continuous_streaming_job), sensors (restarts of failed continuous runs)
    dbt/         assets (the dbt models and tests), jobs (reconciliation_job), schedules,
                 sensors (reconcile_on_update_sensor)
    ops/         assets (the ops tables, the overview), checks (checkpoint_health, state_size),
                 jobs (recovery_job, savepoint_job, rebuild_job), schedules (savepoint_schedule), sensors
    jobs.py      tidemark_all_job (the whole graph)
    resources.py the resources, chosen in one place

Each file has one ``@dg.definitions`` function; `orchestration.definitions` loads the folder.
"""
