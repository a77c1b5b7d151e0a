"""`queen-broker`'s operator commands: everything goes through the broker's HTTP API, so they
work against any broker (local or remote) the caller can reach, with its token."""
