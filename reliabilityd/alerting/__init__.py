"""Alerting: rules, their evaluation against snapshots, and delivery to sinks.

``rules`` is the pure state machine (inactive -> pending -> firing ->
resolved) and ``pagesim`` the pure page-rate simulation; ``evaluator`` judges
rules on the newest snapshot in Redis and decides transitions by
compare-and-set; ``outbox`` delivers decided transitions at least once to each
``sinks`` entry; ``watchdog`` pages when this daemon cannot judge;
``forecast`` answers, on demand, what a rule would cost on-call.
"""
