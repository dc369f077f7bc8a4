"""The hang check (--hang-timeout, on by default): an instance that cannot go on by itself
while its peers wait for it, or that never ends once they have, is found here, named with its
kind and evidence, and handed to its world, which treats it as a dead one.

It owns the clock and the bounds (``bounds.py``), the evidence the launcher gathers per
instance (``evidence.py``: where its sampler says it is and what its threads do, its process
state, Horovod's stall inspector's "Missing ranks"), the decision (``decision.py``, one pure
function) and the check the supervisor feeds and asks (``check.py``). It imports the launcher's
attempt, console and report modules and the wire protocol; nothing in it imports the
supervisor.
"""
from popdist_launcher.launcher.supervision.hang.bounds import Bounds, Clock, environment
from popdist_launcher.launcher.supervision.hang.check import HangCheck

__all__ = ["Bounds", "Clock", "HangCheck", "environment"]
