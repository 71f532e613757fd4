{{ recon_by_basis('user_sessions') }}
