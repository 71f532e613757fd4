-- Change points of each user's FAILED count over 24 h windows, as streamed, against
-- their batch recomputation: every key in exactly one recon class.
-- The rule (macros/recon_by_basis.sql): the stream must equal the on-time basis; whatever
-- separates it from the truth is explained by late events, or by what is not final yet.
{%- set job = 'failed_txn_velocity' %}
{{ config(materialized='recon_partitions', recon_job=job) }}
-- open_when (a key the stream has not emitted yet may still come): a change point is emitted once
-- the watermark passes its window's end
{{ recon_by_basis(job, open_when="coalesce(t.window_end, o.window_end) > s.stream_watermark") }}
