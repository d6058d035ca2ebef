"""Alert rules, pure: what breaches, the state machine, and what a rule would cost.

``state`` is the state machine every rule shares (inactive -> pending ->
firing -> resolved); ``threshold`` the rule on one suite's interval and
``canary`` the rule comparing two sides; ``views`` what a snapshot says
about the rules that watch its suite; ``simulator`` a live suite judged at
the daemon's cadence, on the make-ups and shapes of ``pagerate``; and
``forecast`` the expected page rate of a rule at a suite's current data.
No I/O: ``alerting`` judges these rules on the store's snapshots and
delivers what they decide.
"""

from reliabilityd.rules.canary import CanaryRule
from reliabilityd.rules.state import AlertState, Reason, State, Transition, Verdict, advance
from reliabilityd.rules.threshold import Observation, Rule, Trigger, for_slice, step

__all__ = [
    "AlertState",
    "CanaryRule",
    "Observation",
    "Reason",
    "Rule",
    "State",
    "Transition",
    "Trigger",
    "Verdict",
    "advance",
    "for_slice",
    "step",
]
