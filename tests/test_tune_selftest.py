"""tools/tune.py's CPU self-test: fake measurements through the whole tuner, the tuned-file
writer (also the one-section splices) and codegen.registry.load of what it writes."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_tune_selftest_passes():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "tune.py"), "--selftest"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "selftest PASSED" in run.stdout, \
        run.stdout[-3000:] + run.stderr[-3000:]
