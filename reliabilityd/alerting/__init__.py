"""Alerting: judging the rules against snapshots, and delivering what they decide.

The rules themselves are pure (``reliabilityd.rules``). ``evaluator`` judges
them on the newest snapshot in Redis and decides transitions by
compare-and-set; ``outbox`` delivers decided transitions at least once to
each ``sinks`` entry; ``notify`` builds the messages; ``publisher`` keeps the
retained alert topics; ``watchdog`` pages when this daemon cannot judge;
``registry`` lists every rule on every series it watches, with its state,
for the judges and for every surface that shows rules.
"""
