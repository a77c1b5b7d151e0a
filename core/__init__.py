"""The broker's core, with no knowledge of HTTP (`broker/` is the edge that calls into it).

`service.Broker` composes it: the log engine (`engine/`), the admin side around it
(`admin/`), the work beside the request path (`upkeep/`), the capabilities built on the
log (`kv/`, `timers/`, `streams/`, `ephemeral/`) and the SQL behind all of them
(`storage/`). The modules left here are shared by all: settings, errors, ids, names, the
embedded database and the process entry points (`reaper`, `migrate`).
"""
