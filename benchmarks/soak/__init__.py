"""The soak: hours of steady load and faults against `reliabilityd run`, counted exactly.

``python -m benchmarks.soak --seconds 7200`` (``make soak``) starts a private
redis-server (the shipped ``deploy/redis.conf``: append-only file, fsync
always) and a private mosquitto, then ``reliabilityd run -c`` as a child
process, and for the given time drives it through its public edges only:

* a foreign MQTT publisher (paho-mqtt, QoS 1, MQTT 3.1.1) over several
  suites, one of them sliced by a label, some payloads arrays, some re-sent on
  purpose after their PUBACK (they must count once);
* an HTTP producer (``POST /v1/trials`` with a bearer token) and an OTLP
  producer (``POST /v1/logs``, OTLP/JSON evaluation records), each retrying a
  503 and re-posting some batches on purpose;
* a SIGHUP every few minutes: a rule threshold that alternates (so a reload
  changes something), and now and then a file that must be refused, after
  which the running config must be the one before it;
* a Redis kill -9 and start (the append-only file recovers) and a broker
  restart, each every half hour by default, fewer minutes in a shorter run.

It reads the counts through ``reliabilityd.AsyncClient`` (no key schema),
the daemon's RSS from ``/proc`` and Redis's ``used_memory`` from INFO, and
prints them over time. It exits 1 on any trial lost or counted twice
(``_ledger``), on memory growth past the stated limits once warm
(``_plan``), or when a reload, a restart or the daemon misbehaved.

Modules: ``_plan`` (the schedule and the limits, scaled to the duration),
``_ledger`` (what was sent and acknowledged, checked against the counts),
``_producers`` (the three producers), ``_daemon`` (the config file, the child
process and its log), ``_run`` (servers, faults, samples and the report).
"""
