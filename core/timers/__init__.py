"""Timers (wire-protocol-extensions §16): messages promised now and pushed later.

    ops.py      validation of a call's ops (the route's limits, or the rider's relaxed ones)
    apply.py    `apply_timer_ops`: a call's ops in the caller's transaction, at one instant
    rider.py    the `timers` transaction rider (§17)
    fire.py     one fire: due rows taken, pushed through the write path, removed; failures
    firer.py    the sweeping loop, a task of the reaper process (or run alone)
    service.py  `Timers`, the service `Broker` composes (routes: broker/routes/timers.py)
"""
