"""Peers measured the same way as the broker (W2 shape), one at a time."""
