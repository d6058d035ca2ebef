"""Where trial events come from: MQTT (``mqtt``) and Redis Streams (``streams``).

Each source takes messages, hands them to the daemon's commit, and
acknowledges them only once their events are committed to Redis.
"""
