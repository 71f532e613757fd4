-- Order/payment pairs and the unmatched, as streamed, against the batch join.
-- The rule (macros/recon_by_basis.sql): the stream must equal the on-time basis; whatever
-- separates it from the truth is explained by late events, or by what is not final yet.
{%- set job = 'order_payment_match' %}
{{ config(materialized='recon_partitions', recon_job=job) }}
-- open_when (a key the stream has not emitted yet may still come): unmatched rows are final once
-- the watermark passes closes_at (at the boundary Spark may still hold them, so the boundary
-- counts as open); pairs are emitted when both arrive
{{ recon_by_basis(job, open_when="coalesce(t.closes_at, o.closes_at) >= s.stream_watermark") }}
