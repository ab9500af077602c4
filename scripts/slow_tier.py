"""Runs the slow test tier to the end: one process per test file, a timeout per test.

``pytest -m slow`` in one process hung in XLA's CPU runtime (every thread in
``futex_do_wait``) at ``test_unbiased[bbvi-dirichlet]``; it hangs there too when only that
file runs (after its 12 earlier slow tests), and passes alone. Here each file's slow tests
run in their own ``pytest`` process, and the files named by ``--isolate`` (by default
``tests/test_estimators_unbiased.py``) run one process per test. ``pytest-timeout`` (thread
method: it also ends a process stuck in native code) fails a test that runs past
``--timeout`` seconds instead of stalling the tier; such a run is rerun (``--timeout-retries``,
default 2: the hang is nondeterministic, the test passes alone in most runs) and reported as
"passed after N hang(s)". Failures are never rerun. The summary lists every outcome; the exit
status is non-zero if anything failed or still timed out.

Usage (from the repository root)::

    python scripts/slow_tier.py [--timeout 1200] [--file-timeout 3600] [tests/test_x.py ...]
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="test files (default: every tests/test_*.py)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per test")
    parser.add_argument("--file-timeout", type=int, default=3600, help="seconds per file")
    parser.add_argument(
        "--timeout-retries",
        type=int,
        default=2,
        help="reruns of a run that hit the per-test timeout (the XLA CPU hang; failures are not rerun)",
    )
    parser.add_argument(
        "--isolate",
        action="append",
        default=None,
        help="run this file's slow tests one process each (default: tests/test_estimators_unbiased.py)",
    )
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    isolate = set(args.isolate or ["tests/test_estimators_unbiased.py"])
    files = args.files or sorted(str(p.relative_to(root)) for p in (root / "tests").glob("test_*.py"))
    runs = []
    for path in files:
        runs += _test_ids(root, path) if path in isolate else [path]
    results, failed = [], False
    for path in runs:
        start = time.perf_counter()
        hangs = 0
        while True:
            tail, status, bad, hung = _run(root, path, args)
            if not (hung and hangs < args.timeout_retries):
                break
            hangs += 1
            print(f"{path:60s} hung (per-test timeout); rerun {hangs} of {args.timeout_retries}", flush=True)
        if hangs and not bad:
            status = f"passed after {hangs} hang(s)"
        failed = failed or bad
        seconds = time.perf_counter() - start
        summary = re.sub(r"=+", "", tail).strip()
        results.append((path, status, summary, seconds))
        print(f"{path:60s} {status:22s} {summary} [{seconds:.0f} s]", flush=True)
    total = sum(r[3] for r in results)
    print(f"slow tier: {len(results)} runs, {'FAILURES' if failed else 'all passed'}, {total:.0f} s")
    return 1 if failed else 0


def _run(root, path, args):
    """One pytest process: ``(last line, status, failed, hung)``; ``hung`` when pytest-timeout
    ended it (the thread method prints ``Timeout`` and exits the process)."""
    command = [sys.executable, "-m", "pytest", "-m", "slow", "-q", "-p", "no:cacheprovider"]
    command += [f"--timeout={args.timeout}", "--timeout-method=thread", path]
    try:
        done = subprocess.run(
            command, cwd=root, capture_output=True, text=True, timeout=args.file_timeout, env=dict(os.environ)
        )
    except subprocess.TimeoutExpired:
        return "", f"TIMED OUT after {args.file_timeout} s", True, True
    tail = (done.stdout.strip().splitlines() or [""])[-1]
    status = {0: "passed", 5: "no slow tests"}.get(done.returncode, f"FAILED (exit {done.returncode})")
    bad = done.returncode not in (0, 5)
    hung = bad and "Timeout" in done.stdout + done.stderr
    if bad:
        status = f"TIMED OUT after {args.timeout} s" if hung else status
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
    return tail, status, bad, hung


def _test_ids(root, path):
    """The slow tests of ``path``, by node id."""
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "slow",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            path,
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    return [line.strip() for line in listed.stdout.splitlines() if line.startswith(path + "::")]


if __name__ == "__main__":
    sys.exit(main())
