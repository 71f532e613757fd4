-- Routed clicks as streamed against the distinct clicks in bronze.
-- The rule (macros/recon_by_basis.sql): the stream must equal the on-time basis; whatever
-- separates it from the truth is explained by late events, or by what is not final yet.
{%- set job = 'events_by_type' %}
{{ config(materialized='recon_partitions', recon_job=job) }}
-- open_when (a key the stream has not emitted yet may still come): routed clicks are appended as
-- soon as they are read: nothing waits for the watermark
{{ recon_by_basis(job, open_when="false") }}
