"""One drawing at a time: every figure kforge draws shares matplotlib's mathtext parser (log-scale
tick labels go through it), which is not thread-safe, and a host reads a run's plot and its roofline
at once, each on a worker thread: two parses at once raised ParseException in CI."""

from __future__ import annotations

import functools
import threading

_DRAWING = threading.Lock()


def one_at_a_time(draw):
    """``draw`` run under the process's drawing lock."""

    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        with _DRAWING:
            return draw(*args, **kwargs)

    return drawn
