"""`python -m broker.kafka [--port N]`: the Kafka listener process (broker/kafka/process.py)."""

from broker.kafka.process import main

main()
