-- The stream upserts a profile as soon as it reads a click: nothing waits for the watermark.
{{ recon_by_basis('user_activity_profile', open_when='false') }}
