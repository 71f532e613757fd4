"""The built-in jobs, one module each (see `streaming_jobs.registry`): nothing else lives here."""
