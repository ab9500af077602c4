"""Progress bars whose output grows with time, not with speed.

On a terminal the bar redraws at most 10 times a second (tqdm's default). Written to anything
else (a log file, a pipe, a batch system's capture) it writes at most one line every
:data:`LOG_INTERVAL` seconds, however many iterations a second the run makes: a bar that
redrew at every chunk wrote 782 KB in a 20 s run of a tiny model.
"""

import sys
import time

__all__ = ["LOG_INTERVAL", "progress_bar", "is_terminal"]

LOG_INTERVAL = 5.0  # seconds between lines when the output is not a terminal


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def progress_bar(total=None, *, initial: int = 0, description: str = "", file=None, **options):
    """A tqdm bar on ``file`` (default ``sys.stderr``) that redraws at most every
    :data:`LOG_INTERVAL` seconds when ``file`` is not a terminal, ``set_postfix`` included."""
    from tqdm.auto import tqdm

    file = sys.stderr if file is None else file
    terminal = is_terminal(file)

    class _Bar(tqdm):
        def refresh(self, nolock=False, lock_args=None):
            if not terminal:
                now = time.monotonic()
                if now - self._grepvi_last < LOG_INTERVAL:
                    return False
                self._grepvi_last = now
            return super().refresh(nolock=nolock, lock_args=lock_args)

    _Bar._grepvi_last = -float("inf")
    return _Bar(
        total=total,
        initial=initial,
        desc=description,
        unit="it",
        dynamic_ncols=terminal,
        file=file,
        mininterval=0.1 if terminal else LOG_INTERVAL,
        **options,
    )
