"""The measured hardware targets: one data file each, specs/measured/<target>.json (its Hardware
facts, its table rows, their provenance), written by `python3 -m tools.tune choose --write` and
read through codegen/measured.py. No SPECS here: hardware.py, router_gemm.py and
index_decode.py take each target's facts and rows from TARGETS.
"""
import os

from codegen import measured

TARGETS = measured.load_dir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "measured"))
