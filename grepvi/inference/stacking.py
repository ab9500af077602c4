"""Latents of one family stacked into one array for the compiled step.

A model written with scalar latents (``alpha``, ``beta``, ``tau``: the textbook way) gives the
step one small computation per latent: its draws' transform, its share of the G-REP
correction, its entropy, its update. XLA compiles each as its own fusions, so the compile
time of a small model grows with the number of latents, not their size: the default window
for four scalar gamma latents compiled in 6.4 s against 3.1 s for one gamma latent of shape
(4,) (``docs/performance.md``, thirtieth session). The computations are elementwise, so the
latents of one family with equal options are the same computation on one longer array.

:func:`plan` groups the latents whose families are of one built-in elementwise type with
equal options (``Gamma``, ``Beta``, ``Normal``, ``LogNormal``, ``LogitNormal``, and an
``Affine`` of one of them on any interval of one kind; shapes may differ) into one latent of
shape ``(n,)``, ``n`` their elements in all, and the ``Dirichlet`` latents of one event size
``K`` into one of shape ``(n, K)``, ``n`` their rows; in sorted order of their names.
:meth:`Stacking.target` is the target on the stacked latents (the
model still receives its own dict: the stacked arrays are sliced and reshaped before it, and
its local log joints concatenated after it); :meth:`Stacking.unstack` and :meth:`Stacking.stack`
map any pytree holding per-latent dicts (parameters, optimizer states, the running baseline)
between the two layouts. Nothing about the fit changes but the layout: the same elementwise
updates, the same stopping rule (per element), a draw of each element from the same law.
"""

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.errors import ModelError
from grepvi.families.base import Family
from grepvi.families.beta import Beta
from grepvi.families.dirichlet import Dirichlet
from grepvi.families.gamma import Gamma
from grepvi.families.generalized_dirichlet import GeneralizedDirichlet
from grepvi.families.logitnormal import LogitNormal
from grepvi.families.lognormal import LogNormal
from grepvi.families.normal import Normal
from grepvi.families.transformed import Affine
from grepvi.target import Target

__all__ = ["Stacking", "Member", "plan", "STACKABLE"]

# elementwise families: every method acts on each element alone (no event axis, no
# per-element options), so n latents of one are one latent of n elements
STACKABLE = (Gamma, Beta, Normal, LogNormal, LogitNormal)
# families with one event axis whose methods act on each row alone: latents of an equal event
# size are one latent of their rows (three Dirichlet(3) sites: one Dirichlet of shape (3, 3));
# a generalized Dirichlet's parameters have K - 1 columns, its rows stack alike
STACKABLE_ROWS = (Dirichlet, GeneralizedDirichlet)


class Member(NamedTuple):
    """One latent of a stacked group: its name, shape and slice of the stacked array's rows
    (its batch elements: its elements for an elementwise family, its event vectors for a
    Dirichlet)."""

    name: str
    shape: tuple
    start: int
    size: int
    event_ndim: int = 0

    @property
    def batch_shape(self) -> tuple:
        return self.shape[: len(self.shape) - self.event_ndim]


def _options_key(family: Family):
    """What must be equal for two latents to stack (type and every option but the shape and the
    start ``init_loc``, which the stacked family holds per element), or
    None where the family cannot stack. An :class:`~grepvi.families.transformed.Affine` of a
    stackable base stacks with the Affines of an equal base and support whatever their own
    ``loc`` and ``scale`` (a BUGS model's ``Uniform(a, b)`` priors on different intervals: the
    stacked Affine holds each element's ``loc`` and ``scale``)."""
    if type(family) is Affine:
        base = _options_key(family.base)
        return None if base is None else (Affine, family.support, base)
    event = ()
    if type(family) in STACKABLE_ROWS and family.event_ndim == 1 and len(family.shape) >= 1:
        event = tuple(family.shape[-1:])  # rows stack where their event sizes are equal
    elif type(family) not in STACKABLE or family.event_ndim != 0:
        return None
    options = []
    for field in dataclasses.fields(family):
        if field.name in ("shape", "init_loc"):  # each member's start is its own (stacked flat)
            continue
        value = getattr(family, field.name)
        if not isinstance(value, (bool, int, float, str, type(None))):
            return None
        options.append((field.name, value))
    return (type(family), event, tuple(options))


class Stacking(NamedTuple):
    """How the latents are stacked (:func:`plan`): ``groups[key] = (members, family)`` for each
    stacked latent ``key`` (its family of shape ``(n,)``), ``families`` the original ones,
    ``stacked_families`` the step's, ``grouped`` the names of the latents stacked."""

    groups: dict
    families: dict
    stacked_families: dict
    grouped: frozenset

    # --- the layouts ----------------------------------------------------------------------
    def _is_latent_dict(self, keys) -> bool:
        return len(keys) == len(self.stacked_families) and all(k in self.stacked_families for k in keys)

    def unstack(self, tree, on_host: bool = False):
        """``tree`` with every dict keyed by the stacked latents replaced by one keyed by the
        original latents (each leaf's leading axis sliced and reshaped to the latent's shape).
        ``on_host``: the slices are NumPy arrays (outside a trace, no program compiled; the
        caller puts them back on a device)."""
        slice_leaf = _slice_on_host if on_host else _slice

        def convert(node):
            if not (isinstance(node, dict) and self._is_latent_dict(node)):
                return node
            out = {name: value for name, value in node.items() if name not in self.groups}
            for key, (members, _) in self.groups.items():
                for member in members:
                    out[member.name] = jax.tree_util.tree_map(
                        lambda leaf, m=member: slice_leaf(leaf, m), node[key]
                    )
            return {name: out[name] for name in sorted(out)}

        return _map_dicts(convert, tree, self._is_latent_dict)

    def stack(self, tree):
        """The inverse of :meth:`unstack`: dicts keyed by the original latents (all of them)
        become dicts keyed by the stacked ones."""
        originals = set(self.families)

        def convert(node):
            if not (isinstance(node, dict) and set(node) == originals):
                return node
            out = {name: value for name, value in node.items() if name not in self.grouped}
            for key, (members, _) in self.groups.items():
                parts = [node[member.name] for member in members]
                out[key] = jax.tree_util.tree_map(
                    lambda *leaves, ms=members: _concatenate(leaves, ms), *parts
                )
            return {name: out[name] for name in sorted(out)}

        return _map_dicts(convert, tree, lambda keys: set(keys) == originals)

    # --- the target -----------------------------------------------------------------------
    def target(self, target: Target) -> Target:
        """``target`` on the stacked latents: the model receives its own dict (sliced from the
        stacked arrays), its local log joints are concatenated into the stacked latents'."""
        full, local = target.logdensity_fn, target.local_logdensity_fn
        unstack, stack_local = self.unstack_values, self.stack_values
        if target.takes_data:
            logdensity_fn = lambda latents, data: full(unstack(latents), data)  # noqa: E731
            local_fn = None
            if local is not None:
                local_fn = lambda latents, data: stack_local(local(unstack(latents), data))  # noqa: E731
        else:
            logdensity_fn = lambda latents: full(unstack(latents))  # noqa: E731
            local_fn = None if local is None else (lambda latents: stack_local(local(unstack(latents))))
        members = {key: tuple((m.name, m.size) for m in group) for key, (group, _) in self.groups.items()}
        return target._replace(
            logdensity_fn=logdensity_fn,
            local_logdensity_fn=local_fn,
            families=self.stacked_families,
            members=members,
        )

    def unstack_values(self, latents: dict) -> dict:
        """A dict of stacked latent arrays (any leading batch axes) as the model's dict."""
        out = {name: value for name, value in latents.items() if name not in self.groups}
        for key, (members, family) in self.groups.items():
            value = latents[key]
            axis = value.ndim - 1 - family.event_ndim  # the rows' axis
            batch = value.shape[:axis]
            for member in members:
                piece = jax.lax.slice_in_dim(value, member.start, member.start + member.size, axis=axis)
                out[member.name] = piece.reshape(batch + member.shape)
        return out

    def stack_values(self, values: dict) -> dict:
        """Per-latent arrays of the latents' shapes (local log joints) stacked (flattened)."""
        out = {name: value for name, value in values.items() if name not in self.grouped}
        for key, (members, _) in self.groups.items():
            missing = [member.name for member in members if member.name not in values]
            if missing:
                raise ModelError(f"local_logdensity_fn returned no entry for latents {missing}")
            out[key] = jnp.concatenate(
                [jnp.reshape(jnp.broadcast_to(values[m.name], m.batch_shape), (m.size,)) for m in members]
            )
        return out


def _slice(leaf, member: Member, xp=jnp):
    leaf = xp.asarray(leaf)
    return leaf[member.start : member.start + member.size].reshape(member.batch_shape + leaf.shape[1:])


def _slice_on_host(leaf, member: Member):
    if jax.dtypes.issubdtype(getattr(leaf, "dtype", np.float32), jax.dtypes.prng_key):
        return _slice(leaf, member)  # a key has no NumPy form
    return _slice(leaf, member, np)


def _concatenate(leaves, members):
    pieces = [
        jnp.reshape(jnp.asarray(leaf), (m.size,) + jnp.shape(leaf)[len(m.batch_shape) :])
        for leaf, m in zip(leaves, members, strict=True)
    ]
    return jnp.concatenate(pieces, axis=0)


def _map_dicts(convert, tree, is_latent_dict):
    """``convert`` applied to every dict node of ``tree`` that ``is_latent_dict`` accepts."""
    return jax.tree_util.tree_map(
        convert, tree, is_leaf=lambda node: isinstance(node, dict) and is_latent_dict(node)
    )


def plan(families: dict) -> Stacking | None:
    """The stacking of ``families`` (None where no two latents can stack): latents of one
    :data:`STACKABLE` type with equal options, in sorted order of their names."""
    by_key: dict = {}
    for name in sorted(families):
        key = _options_key(families[name])
        if key is not None:
            by_key.setdefault(key, []).append(name)
    groups = {}
    for names in by_key.values():
        if len(names) < 2:
            continue
        members, start = [], 0
        for name in names:
            family = families[name]
            shape = tuple(family.shape)
            size = math.prod(family.batch_shape)
            members.append(Member(name, shape, start, size, family.event_ndim))
            start += size
        key = _group_name(names, families)
        groups[key] = (tuple(members), _stacked_family([families[name] for name in names], start))
    if not groups:
        return None
    grouped = frozenset(member.name for members, _ in groups.values() for member in members)
    stacked = {name: family for name, family in families.items() if name not in grouped}
    stacked.update({key: family for key, (_, family) in groups.items()})
    return Stacking(groups, dict(families), stacked, grouped)


def _stacked_family(members: list, size: int) -> Family:
    """One family of ``size`` rows for ``members`` (equal options by :func:`_options_key`):
    shape ``(size,)``, or ``(size, K)`` for Dirichlets of event size ``K``; Affines keep each
    member's ``loc`` and ``scale``, broadcast to its shape and flattened."""
    first = members[0]
    if type(first) is not Affine:
        event = tuple(first.shape[len(first.shape) - first.event_ndim :])
        stacked = dataclasses.replace(first, shape=(size, *event))
        starts = [getattr(m, "init_loc", None) for m in members]
        if any(np.ndim(start) or start != starts[0] for start in starts):  # members started apart
            flat = np.concatenate(
                [
                    np.broadcast_to(np.asarray(v, np.float32), m.shape).ravel()
                    for v, m in zip(starts, members, strict=True)
                ]
            )
            stacked = dataclasses.replace(stacked, init_loc=flat)
        return stacked

    def flat(values):
        return np.concatenate(
            [
                np.broadcast_to(np.asarray(v, np.float64), m.shape).ravel()
                for v, m in zip(values, members, strict=True)
            ]
        )

    return Affine(
        base=dataclasses.replace(first.base, shape=(size,)),
        loc=flat([m.loc for m in members]),
        scale=flat([m.scale for m in members]),
    )


def _group_name(names, families) -> str:
    """A name for the stacked latent that no latent has: ``"a+b+c"`` (its members)."""
    key = "+".join(names)
    while key in families:
        key = "_" + key
    return key
