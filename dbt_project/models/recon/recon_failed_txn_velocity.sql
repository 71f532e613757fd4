-- Change points of each user's FAILED count over 24 h windows, as streamed, against
-- their batch recomputation: every key in exactly one recon class.
-- The rule (macros/recon_by_basis.sql): the stream must equal the on-time basis; whatever
-- separates it from the truth is explained by late events, or by what is not final yet.
{%- set job = 'failed_txn_velocity' %}
{{ config(materialized='recon_partitions', recon_job=job) }}

with streamed as (

    -- gold, one row per key, as of the stream's recorded position
    {{ streamed_by_key(job) }}

),

truth as (

    select * from {{ ref('int_failed_txn_velocity__batch') }} where basis = 'all'
        and {{ in_recon_scope(job) }}  -- the days this run recomputes

),

on_time as (

    select * from {{ ref('int_failed_txn_velocity__batch') }} where basis = 'on_time'
        and {{ in_recon_scope(job) }}  -- the days this run recomputes

),

stream_state as (

    {{ stream_watermark(job) }}

),

from_stream as (

    {{ classify_streamed(job) }}

),

from_batch as (

    -- a change point is emitted once the watermark passes its window's end
    {{ classify_not_streamed(job, open_when="coalesce(t.window_end, o.window_end) > s.stream_watermark") }}

),

final as (

    {{ recon_rows(job, ['from_stream', 'from_batch']) }}

)

select * from final
