{%- set job = 'order_payment_match' -%}
{{ config(materialized='recon_partitions', recon_job=job) }}
{%- set within_seconds = job_param(job, 'within_seconds') | int -%}

-- Orders and payments matched in batch: a payment pays an order it names within the bound
-- (either side of the order's time); every order without one is unpaid, every payment without
-- one names an unknown order. Once over all distinct events (basis all), once over the events
-- the stream counted on both sides (basis on_time). closes_at: when the stream can emit an
-- unmatched row (no match can arrive once the watermark passes it); matched pairs go out at once.

with order_events as (

    {{ classify_lateness(job, ref('stg_orders'), 'orders') }}

),

payment_events as (

    {{ classify_lateness(job, ref('stg_payments'), 'payments') }}

),

orders as (

    {{ distinct_events('order_events', ['order_id', 'user_id', 'amount', 'order_time']) }}

),

payments as (

    {{ distinct_events('payment_events', ['payment_id', 'order_id', 'amount', 'payment_time']) }}

),

orders_by_basis as (

    select * from orders
        {{ each_basis() }}

),

payments_by_basis as (

    select * from payments
        {{ each_basis() }}

),

final as (

    select
        coalesce(o.basis, p.basis) as basis,
        coalesce(o.order_id, p.order_id) as order_id,
        p.payment_id,
        o.user_id,
        o.order_time,
        p.payment_time,
        o.amount as order_amount,
        p.amount as payment_amount,
        case
            when o.order_id is null then 'unknown_order'
            when p.payment_id is null then 'unpaid'
            else 'paid'
        end as status,
        case
            when o.order_id is null
                then p.payment_time + make_interval(0, 0, 0, 0, 0, 0, {{ within_seconds }})
            when p.payment_id is null
                then o.order_time + make_interval(0, 0, 0, 0, 0, 0, {{ within_seconds }})
        end as closes_at
    -- each basis matched on its own: a row of one never meets a row of the other
    from orders_by_basis as o
    full outer join payments_by_basis as p
        on
            o.basis = p.basis
            and o.order_id = p.order_id
            and abs(unix_millis(p.payment_time) - unix_millis(o.order_time))
            <= {{ within_seconds * 1000 }}

)

{{ batch_rows_in_scope(job) }}
