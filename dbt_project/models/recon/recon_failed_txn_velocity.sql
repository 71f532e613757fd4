{{ recon_windowed('failed_txn_velocity') }}
