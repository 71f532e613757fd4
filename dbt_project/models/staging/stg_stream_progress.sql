-- One snapshot of the progress for the whole dbt invocation (var progress_version, set by
-- tidemark-dbt): streams that keep running append rows while dbt runs, and every model must
-- see the same batches (macros/progress.sql; every invocation that does not build this table
-- re-creates it with its own pin first, the on-run-start hook). A table, read once at the pin:
-- Delta rebuilds its snapshot of an older version at each read, and the build reads this about
-- thirty times (docs/benchmarks.md, "Reconciliation's progress read once per invocation").
{{ config(materialized='table') }}

{{ stream_progress_sql(source('lake', 'ops_stream_progress')) }}
