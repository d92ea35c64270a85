"""Short garbage-collector pauses: what the server loaded at start-up is never walked again.

A full collection walks every object the interpreter tracks. By the time the server
answers its first request it holds about 100,000 that live as long as it does (FastAPI,
pydantic, SQLAlchemy, the routes, the toolsets), and each full collection walked
them all again: 50-80 ms on two busy cores, a pause that every request of a burst waited
out, and bursts make the garbage that sets off full collections. :func:`freeze` collects
once, then moves what is left to the permanent generation (:func:`gc.freeze`), which
collections skip: they walk only what requests and runs made since.
"""

from __future__ import annotations

import gc


def freeze() -> int:
    """Collect, then exempt every object alive now from later collections; how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
