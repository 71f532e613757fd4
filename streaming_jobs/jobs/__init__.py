"""The built-in jobs, one module each (see `streaming_jobs.storage.registry`): nothing else lives here."""
