"""The operators' dashboard served at `/`: static files shipped in this package (see `page`)."""
