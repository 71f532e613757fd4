-- Unmatched rows are final once the watermark passes closes_at (at the boundary Spark may still
-- hold them, so the boundary counts as open); matched pairs are emitted as soon as both arrive.
{{ recon_by_basis('order_payment_match',
                  open_when='coalesce(t.closes_at, o.closes_at) >= s.stream_watermark') }}
