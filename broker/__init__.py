"""The HTTP edge: a Starlette app speaking the Queen MQ wire protocol over `core`."""
