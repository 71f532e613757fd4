{{ recon_sessions('user_sessions') }}
