"""Inference: one step (``state``), the update rules (``rules``), the default procedure as state
(``controller``), the one loop every entry point runs (``driver``), ``fit`` (``fitting``),
minibatch VI (``minibatch``) and data-parallel steps (``sharding``).

The modules are imported by name (``from grepvi.inference import driver``); the package's
public names live at the top (``grepvi.fit``, ``grepvi.AdaptiveSettings``, ...).
"""
