"""What operators and dashboards see and change around the log: queue configuration and
deletion, consumer groups, dead letters, message inspection, traces, resource figures and
the maintenance switches."""
