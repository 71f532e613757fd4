-- Order/payment pairs and the unmatched, as streamed, against the batch join.
-- The rule (macros/recon_by_basis.sql): the stream must equal the on-time basis; whatever
-- separates it from the truth is explained by late events, or by what is not final yet.
{%- set job = 'order_payment_match' %}
{{ config(materialized='recon_partitions', recon_job=job) }}

with streamed as (

    -- gold, one row per key, as of the stream's recorded position
    {{ streamed_by_key(job) }}

),

truth as (

    select * from {{ ref('int_order_payment_match__batch') }} where basis = 'all'
        and {{ in_recon_scope(job) }}  -- the days this run recomputes

),

on_time as (

    select * from {{ ref('int_order_payment_match__batch') }} where basis = 'on_time'
        and {{ in_recon_scope(job) }}  -- the days this run recomputes

),

stream_state as (

    {{ stream_watermark(job) }}

),

from_stream as (

    {{ classify_streamed(job) }}

),

from_batch as (

    -- unmatched rows are final once the watermark passes closes_at (at the boundary Spark may
    -- still hold them, so the boundary counts as open); pairs are emitted when both arrive
    {{ classify_not_streamed(job, open_when="coalesce(t.closes_at, o.closes_at) >= s.stream_watermark") }}

),

final as (

    {{ recon_rows(job, ['from_stream', 'from_batch']) }}

)

select * from final
