-- Profiles (per user and activity epoch) as streamed against the batch profiles.
-- The rule (macros/recon_by_basis.sql): the stream must equal the on-time basis; whatever
-- separates it from the truth is explained by late events, or by what is not final yet.
{%- set job = 'user_activity_profile' %}
-- open_when (a key the stream has not emitted yet may still come): the stream upserts a profile as
-- soon as it reads a click: nothing waits for the watermark
{{ recon_by_basis(job, open_when="false") }}
