"""What the Kafka edge (broker/kafka) needs of the core beyond pushes: topic widths, reads by
offset with each record's Kafka fields, offsets by time, and group offsets kept as our
consumer-group cursors. `Broker.kafka` is the service (core/kafka/service.py)."""
