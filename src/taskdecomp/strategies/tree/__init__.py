"""The ``tree`` strategy: execute a plan tree, decomposing further only where a task fails.

See :mod:`taskdecomp.strategies.tree.runner` for how a run works through a tree, and
``docs/tree.md`` for the whole picture.
"""

from taskdecomp.strategies.tree.options import DECOMPOSE_MODES, Decompose, TreeOptions

__all__ = ["DECOMPOSE_MODES", "Decompose", "TreeOptions"]
