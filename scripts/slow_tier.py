"""Runs the slow test tier to the end: one process per test file, a timeout per test.

``pytest -m slow`` in one process hung in XLA's CPU runtime after ~30 slow tests (every
thread in ``futex_do_wait``; the hanging test passes alone). Here each file's slow tests run in
their own ``pytest`` process, with ``pytest-timeout`` failing a test that runs past
``--timeout`` seconds (instead of stalling the tier) and a cap on the whole file. The summary
lists every file's outcome; the exit status is non-zero if any file failed or timed out.

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
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    files = args.files or sorted(str(p.relative_to(root)) for p in (root / "tests").glob("test_*.py"))
    results, failed = [], False
    for path in files:
        command = [sys.executable, "-m", "pytest", "-m", "slow", "-q", "-p", "no:cacheprovider"]
        command += [f"--timeout={args.timeout}", path]
        start = time.perf_counter()
        try:
            done = subprocess.run(
                command,
                cwd=root,
                capture_output=True,
                text=True,
                timeout=args.file_timeout,
                env=dict(os.environ),
            )
            tail = (done.stdout.strip().splitlines() or [""])[-1]
            status = {0: "passed", 5: "no slow tests"}.get(
                done.returncode, f"FAILED (exit {done.returncode})"
            )
            if done.returncode not in (0, 5):
                failed = True
                print(done.stdout[-4000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
        except subprocess.TimeoutExpired:
            tail, status, failed = "", f"TIMED OUT after {args.file_timeout} s", True
        seconds = time.perf_counter() - start
        summary = re.sub(r"=+", "", tail).strip()
        results.append((path, status, summary, seconds))
        print(f"{path:45s} {status:22s} {summary} [{seconds:.0f} s]", flush=True)
    total = sum(r[3] for r in results)
    print(f"slow tier: {len(results)} files, {'FAILURES' if failed else 'all passed'}, {total:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
