"""Embedded servers and the demo: Redis and an MQTT broker from the system or from wheels.

The only package that imports ``rich``, ``iotcore`` and the Redis wheels.
"""
