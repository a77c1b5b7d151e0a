"""Streams (wire-protocol-extensions §18): the server side of the official client's stream
runtime. `Streams` (service.py) registers queries, reads their state and commits cycles;
`Broker.streams` is the one instance a process has."""
