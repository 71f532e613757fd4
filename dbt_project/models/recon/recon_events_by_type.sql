-- Routed clicks as streamed against the distinct clicks in bronze.
-- The rule (macros/recon_by_basis.sql): the stream must equal the on-time basis; whatever
-- separates it from the truth is explained by late events, or by what is not final yet.
{%- set job = 'events_by_type' %}
{{ config(materialized='recon_partitions', recon_job=job) }}

with streamed as (

    -- gold, one row per key, as of the stream's recorded position
    {{ streamed_by_key(job) }}

),

truth as (

    select * from {{ ref('int_events_by_type__batch') }} where basis = 'all'
        and {{ in_recon_scope(job) }}  -- the days this run recomputes

),

on_time as (

    select * from {{ ref('int_events_by_type__batch') }} where basis = 'on_time'
        and {{ in_recon_scope(job) }}  -- the days this run recomputes

),

stream_state as (

    {{ stream_watermark(job) }}

),

from_stream as (

    {{ classify_streamed(job) }}

),

from_batch as (

    -- routed clicks are appended as soon as they are read: nothing waits for the watermark
    {{ classify_not_streamed(job, open_when="false") }}

),

final as (

    {{ recon_rows(job, ['from_stream', 'from_batch']) }}

)

select * from final
