"""The supervisor's restart decisions: backoff, giving up, and how a death is described."""

from __future__ import annotations

import signal
from collections import deque

from broker.supervisor import RestartPolicy, describe_exit


def test_backoff_doubles_from_half_a_second_to_ten_and_restarts_after_a_long_run() -> None:
    policy = RestartPolicy()
    delays, delay = [], None
    for _ in range(7):
        delay = policy.next_delay(delay, uptime=0.2)
        delays.append(delay)
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    # A process that ran longer than the longest delay was healthy: start the backoff over.
    assert policy.next_delay(10.0, uptime=30.0) == 0.5


def test_more_than_five_deaths_within_sixty_seconds_gives_up() -> None:
    policy = RestartPolicy()
    deaths: deque[float] = deque()
    verdicts = []
    for t in (0, 1, 2, 3, 4, 5):
        deaths.append(float(t))
        verdicts.append(policy.gives_up(deaths, now=float(t)))
    assert verdicts == [False] * 5 + [True]


def test_deaths_older_than_the_window_are_forgotten() -> None:
    policy = RestartPolicy(max_deaths=2, window=60)
    deaths: deque[float] = deque([0.0, 10.0])
    deaths.append(65.0)
    assert not policy.gives_up(deaths, now=65.0)  # the death at 0 s is outside the window
    assert list(deaths) == [10.0, 65.0]
    deaths.append(66.0)
    assert policy.gives_up(deaths, now=66.0)


def test_exit_status_is_described_by_code_or_signal_name() -> None:
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(0) == "exited with code 0"
