-- Sessions as streamed against the batch sessions: every session in exactly one class.
-- The rule (macros/recon_by_basis.sql): the stream must equal the on-time basis; whatever
-- separates it from the truth is explained by late events, or by what is not final yet.
{%- set job = 'user_sessions' %}
{{ config(materialized='recon_partitions', recon_job=job) }}
-- open_when (a key the stream has not emitted yet may still come): a session is emitted once the
-- watermark passes its end (last click + gap)
{{ recon_by_basis(job, open_when="coalesce(t.window_end, o.window_end) > s.stream_watermark") }}
