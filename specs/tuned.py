"""The measured hardware targets: one module each (specs/tuned_<name>.py: the target's Hardware
spec and its launch tables), written by tools/tune.py on a device of that target. tools/tune.py
also writes this list when it adds a target; do not edit either by hand.
"""
from . import tuned_sm_90

TUNED = {
    "sm_90": tuned_sm_90,
}
