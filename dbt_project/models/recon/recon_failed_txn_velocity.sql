{{ recon_by_basis('failed_txn_velocity') }}
