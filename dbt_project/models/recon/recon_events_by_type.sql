-- Routed clicks are appended as soon as they are read: nothing waits for the watermark.
{{ recon_by_basis('events_by_type', open_when='false') }}
