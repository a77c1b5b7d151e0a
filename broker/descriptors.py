"""Each connection a listener holds is a file descriptor: take all the system allows.

Linux starts most services with a soft limit of 1,024 open files and a hard limit far above
it (systemd: 524,288), and a process may raise its own soft limit up to the hard one. Python
does not do it for us. At 1,024 a web worker refuses connections (the kernel resets them)
and cannot open a database connection or a spool file once about a thousand clients are
connected. The listeners (web workers, the Kafka listener) raise the soft limit to the hard
limit when they start, as servers built to hold many connections do, and say so; a hard
limit below `FEW_DESCRIPTORS` is worth a warning, since no setting of ours can lift it.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("queen.descriptors")

FEW_DESCRIPTORS = 4096
# Linux refuses a limit above fs.nr_open (1,048,576 by default), which an unlimited hard
# limit would ask for.
LINUX_CEILING = 1 << 20


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; answer the limit
    in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = LINUX_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open files limit from %d to %d (%s)",
                        soft, target, exc)
        else:
            log.info("open files limit raised from %d to %d", soft, target)
            soft = target
    if soft != resource.RLIM_INFINITY and soft < FEW_DESCRIPTORS:
        log.warning("this process may open only %d files (the hard limit): it can hold "
                    "about as many client connections; raise it (systemd LimitNOFILE, "
                    "ulimit -Hn, docker --ulimit nofile)", soft)
    return soft
