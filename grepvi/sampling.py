r"""Fast draws of ``log z`` for ``z ~ Gamma(alpha, 1)``, exact in log space.

G-REP (Ruiz, Titsias & Blei 2016) needs one draw per variational gamma element per iteration
(about 460,000 for the paper's sparse gamma DEF) and no gradient through the draw: the
gradient flows through the standardization ``eps = T^{-1}(z; v)``, so the draw is wrapped in
:func:`jax.lax.stop_gradient`. :func:`jax.random.gamma` runs a rejection ``while_loop`` per
element and is about 20 times slower on CPU.

Method (Marsaglia & Tsang 2000). For ``alpha >= 1`` let ``d = alpha - 1/3``,
``c = 1 / sqrt(9 d)``, ``x ~ N(0, 1)``, ``u ~ U(0, 1)`` and ``v = (1 + c x)^3``. The proposal
``d v`` is accepted when ``v > 0`` and

.. math::

    \log u < \tfrac12 x^2 + d - d v + d \log v
           = 3 d \,\big(\log(1 + y) - y + y^2/2 - y^3/3\big), \qquad y = c x,

or by the cheap squeeze ``u < 1 - 0.0331 x^4``, a lower bound of the same test. The right-hand
form (an identity, since ``x^2 = 9 d y^2``) has no cancellation for large ``d``; near ``y = 0``
it is summed as the series ``-y^4/4 + y^5/5 - ...``. The draw is
``log z = log d + 3 log1p(c x)``. A proposal is accepted with probability 0.9516 at
``alpha = 1`` (the minimum), rising towards 1 as ``alpha`` grows.

For ``alpha < 1`` the boost ``z = g u^{1/alpha}``, with ``g ~ Gamma(alpha + 1)`` and an
independent ``u ~ U(0, 1)``, is applied in log space,

.. math::

    \log z = \log g + \frac{\log u}{\alpha},

so ``alpha = 1e-3`` gives a finite ``log z`` near ``-1e3`` where ``z`` underflows float32.

Vectorization of large arrays (more than ``SMALL_SIZE`` = 1,024 elements per call), in two
stages; keeping the first accepted proposal per element is exactly the sequential rejection
sampler, so the stages change the cost, not the distribution.

1. One proposal for every element; at least 95% accept.
2. A :func:`jax.lax.while_loop` runs while any element is pending. Each round compacts the
   pending elements (:func:`_first_pending`, the equivalent of ``jnp.nonzero`` with a static
   size of ``n/16 + 64``, at least 8 standard deviations above the worst-case 4.84% for any
   ``n``), and an inner loop gives every compacted element one proposal per round until
   each has one accepted (about five rounds for 20,000 of them). One outer round nearly
   always suffices.

The bits of the large arrays' uniforms come from :func:`grepvi.threefry.bits`: those of
``jax.random.bits``, with the Threefry rounds unrolled so that XLA fuses them with the
arithmetic that reads them (JAX lowers them on CPU as a loop that writes every block to
memory five times). On the Olivetti DEF's largest latent (409,600 shapes, two cores) one
call took 10.2 ms before this design and 4.7 ms with it: the Threefry loop, ``jnp.nonzero``
(2.7 ms: a cumulative sum and a scatter over every element) and four proposals for every
compacted element (an ``argmax`` and a gather over them: 3.4 ms for 25,664 elements) were
the cost. The pending elements are read off the NaNs of ``log g`` where they are needed, not
carried as flags: XLA on CPU copies an elementwise computation into each of its consumers,
so a proposal read both by the flags and by the draws was computed twice. (Using both words
of each Threefry block, where ``jax.random.bits`` under JAX's partitionable default hashes a
block per word, made the DEF's draw 9.1 -> 6.6 ms in an earlier design; with those bits two
fits lost their way more often (a prior-only model of 2,000 Gamma(0.1, 0.1) units had 1-2
units whose q-mean drifted to 1e6 in 3 seeds of 3, none in 3 with ``jax.random.bits``),
which was not explained, so it was taken back: the bits here are ``jax.random.bits``'s.)

Tiny arrays (up to ``TINY_SIZE`` = 256 elements: the latents of small models, drawn up to 64
times per step under ``vmap``): every shape below 2 is boosted to ``[2, 3)`` (twice below 1:
``log z = log g + log u_2 / (alpha + 1) + log u_1 / alpha`` with ``g ~ Gamma(alpha + 2)``; once
from 1 to 2), and every element gets ``TINY_PROPOSALS`` = 5 proposals at once, from one call
of the bit generator: 12 random words an element, and no loop runs. Compilation is what costs
there, not draws: the loop and its Threefry programs, batched by ``vmap``, made the sampler 1.1
s of CPU time to compile on one element, 0.4 s without (and the default procedure's step
program on a gamma-Poisson model 3.2 s, then 1.9 s). The first accepted of the 5 is the
rejection sampler's draw unless all 5 are rejected, which has probability ``0.01834^5 = 2.1e-9``
per element at the worst shape, 2 (far below the ``6e-8`` of the uniforms' truncation below;
the rejection rates, by quadrature of the acceptance test: 0.0483 at 1, 0.0183 at 2, 0.0111
at 3); such an element gets its first proposal with ``v > 0`` (a draw of the proposal
distribution, within a few percent of the gamma) instead. The earlier tiny path (boosts below
1 only, 8 proposals: 17 words an element, ``0.0484^8 = 3e-11``) cost 1.22-1.33 times as much
in one process (64 repeats of ``vmap``ped draws, the small models' compiler options and
unrolled Threefry: 3 shapes x 51 draws 203 against 153 us a repeat, 5 x 17 84 against 67, 10
x 25 229 against 172, 30 x 8 213 against 174). The draws are much of the Monte Carlo-bound
stages of small gamma models: Kline's island tools (three gamma latents, 64 repeats of 51
draws a step in its last stage) took 6.46-7.75 ms a step with the earlier path and 5.41-6.47
with this one (five fits each, alternating; the machine's speed drifted between them).

Uniforms are made from random bits on the open interval ``(0, 1)``, ``(k + 1/2) 2^-23`` in
float32 (``2^-52`` in float64), so ``log u`` is never ``-inf``: ``-log u`` is capped at
``24 log 2 = 16.6`` in float32 (36.7 in float64), a truncation of the exponential tail of
probability ``6e-8`` (``1e-16``). ``log z`` is finite for every ``alpha`` down to about
``1e-37`` in float32.

Middle arrays (``TINY_SIZE`` to ``SMALL_SIZE`` = 1,024 elements): stage 1 as for large
arrays, then one loop-free round of stage 2: the rejected elements compacted (``n/16 + 64``
of them at most, found by :func:`_first_pending` as in the large path) and given 8 proposals
each with the tiny path's fallback; a rejected element beyond that room (probability below
``1e-15``) gets ``log d``. Every uniform comes from one call of the bit generator. Eight
proposals for all 1,002 latents of a 1,000-group gamma-Poisson cost 1.16 ms a step at three
draws under ``vmap``, this path 0.39 ms (its compilation 0.3 s longer); the default
procedure's fit of that model took 10.4 s instead of 11.4 (twice: 10.2 against 11.5), fresh
process, compilation included. The compaction was first a comparison count (the ``j``-th
pending element is where the cumulative count first exceeds ``j``: a ``(n/16 + 64) x n``
comparison and sum, 127 x 1,002 there), which was the largest kernel of the draw; with
:func:`_first_pending` (the flags packed in words, a binary search of the words' counts) the
default procedure's step on that model took 0.23 instead of 0.36 ms at one draw and 0.47-0.60
instead of 0.88-0.96 ms at three (twenty-second session).

One draw for the small latents of a model (:func:`with_one_gamma_draw`): a model's gamma,
beta and Dirichlet latents each call :func:`log_gamma` (a beta twice), and each call is a
copy of the sampler in the step's program. The requests of at most ``GATHERED_SIZE`` (16,384)
elements each are gathered and drawn by one call over the concatenated shapes: the same
distribution (each element's draw is its own), one copy of the sampler to compile and one set
of kernels to run (rat tumours, two betas and a gamma: five copies before; the Olivetti DEF's
four smaller latents: the sampler's compilation 5.8 -> 3.4 s, the same time per step).

References:
  G. Marsaglia and W. W. Tsang, "A simple method for generating gamma variables",
  ACM Transactions on Mathematical Software 26(3), 363-372, 2000.
  F. J. R. Ruiz, M. K. Titsias and D. M. Blei, "The generalized reparameterization gradient",
  NeurIPS 2016.
"""

import contextvars
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import threefry
from grepvi.errors import ConfigError
from grepvi.fusion_boundary import computed_once, predicate_of

__all__ = ["log_gamma", "log_gamma_reference", "with_one_gamma_draw"]

# Below this |y| the acceptance exponent uses its series (see _log1p_remainder).
_SERIES_THRESHOLD = 0.1


def log_gamma(rng_key, shape, sample_shape=(), dtype=None, num_proposals=1):
    r"""Draw ``log z`` for ``z ~ Gamma(shape, 1)`` (Marsaglia-Tsang in log space).

    .. math::

        p(z) = \frac{z^{\alpha - 1} e^{-z}}{\Gamma(\alpha)}, \qquad
        \mathbb{E}[\log z] = \psi(\alpha), \qquad
        \operatorname{Var}[\log z] = \psi_1(\alpha).

    Divide by a rate ``beta`` by subtracting ``log beta``. The result is wrapped in
    :func:`jax.lax.stop_gradient`: no gradient flows to ``shape`` (G-REP differentiates the
    standardization, not the sampler). Works under ``jit`` and ``vmap`` and is a deterministic
    function of ``rng_key``.

    Args:
      rng_key: a ``jax.random`` key (typed or raw ``uint32``).
      shape: concentration ``alpha > 0``, any array shape. ``alpha <= 0`` or NaN gives NaN,
        ``alpha = inf`` gives ``inf``.
      sample_shape: leading shape of independent draws; the output shape is
        ``sample_shape + shape.shape``.
      dtype: ``float32`` or ``float64``. ``None`` takes the dtype of a floating ``shape``, else
        JAX's default float (``float64`` under ``jax_enable_x64``). ``float64`` without x64
        falls back to ``float32``, as in ``jax.random``.
      num_proposals: proposals drawn at once, per round of the inner loop, for each element
        the first proposal left pending (stage 2 in the module docstring; arrays of more than
        ``SMALL_SIZE`` elements); the first accepted is kept. Exposed for tests.

    Returns:
      Array of ``log z`` with shape ``sample_shape + jnp.shape(shape)`` and dtype ``dtype``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> log_z = log_gamma(jax.random.key(0), jnp.array([1e-3, 0.5, 30.0]), (2,))
      >>> log_z.shape, bool(jnp.isfinite(log_z).all())
      ((2, 3), True)
    """
    dtype = _resolve_dtype(shape, dtype)
    if int(num_proposals) < 1:
        raise ConfigError(f"num_proposals must be a positive integer, got {num_proposals!r}")
    shape = jax.lax.stop_gradient(jnp.asarray(shape, dtype))
    sample_shape = tuple(int(size) for size in sample_shape)
    gathered = _GATHERED.get()
    if gathered is not None:
        return gathered.request(shape, sample_shape, int(num_proposals))
    return _log_gamma(rng_key, shape, sample_shape, int(num_proposals))


class _Gathered:
    """The :func:`log_gamma` requests of one call of ``fn`` in :func:`with_one_gamma_draw`:
    recorded (answered with zeros), then served from one draw, in the same order."""

    def __init__(self, served=None):
        self.requests = []
        self.served = served

    def request(self, shape, sample_shape, num_proposals):
        out_shape = sample_shape + shape.shape
        if self.served is None:
            self.requests.append((shape, sample_shape, num_proposals))
            return jnp.zeros(out_shape, shape.dtype)
        index = len(self.requests)
        self.requests.append(None)
        if index >= len(self.served) or self.served[index].shape != out_shape:
            raise RuntimeError("with_one_gamma_draw: fn made different log_gamma calls on its second run")
        return self.served[index]

    def draw(self, rng_key):
        """Every recorded request: the small ones from one call of the sampler per dtype and
        proposal count, each larger one from a call of its own."""
        groups = {}
        for index, request in enumerate(self.requests):
            shape, _, num_proposals = request
            group = (shape.dtype, num_proposals) if _is_small(request) else ("alone", index)
            groups.setdefault(group, []).append(index)
        served = [None] * len(self.requests)
        for key, (group, indices) in zip(jax.random.split(rng_key, len(groups)), groups.items(), strict=True):
            if group[0] == "alone":
                shape, sample_shape, num_proposals = self.requests[indices[0]]
                served[indices[0]] = _log_gamma(key, shape, sample_shape, num_proposals)
                continue
            num_proposals = group[1]
            flats = [
                jnp.broadcast_to(self.requests[i][0], self.requests[i][1] + self.requests[i][0].shape).ravel()
                for i in indices
            ]
            drawn = _log_gamma(key, jnp.concatenate(flats), (), num_proposals)
            offset = 0
            for i, flat in zip(indices, flats, strict=True):
                shape, sample_shape, _ = self.requests[i]
                served[i] = drawn[offset : offset + flat.size].reshape(sample_shape + shape.shape)
                offset += flat.size
        return served


_GATHERED = contextvars.ContextVar("grepvi_gathered_log_gammas", default=None)


def with_one_gamma_draw(fn, rng_key):
    """``fn(key)`` with its small :func:`log_gamma` calls drawn by one call of the sampler.

    ``fn`` runs twice: first to record its requests (each answered with zeros; under ``jit``
    what it computed from them is dead code), then with each request served its draw. The
    requests of at most ``GATHERED_SIZE`` (16,384) elements each are concatenated and drawn by
    one call; larger ones by a call of their own (a concatenation of the Olivetti DEF's
    463,800 shapes cost XLA 10 ms a step on CPU, its elementwise producers fused into a
    branchy copy). Draws are as independent as separate calls' (each element is its own).
    With fewer than two small requests, ``fn(rng_key)`` runs as it is. ``fn`` must make the
    same calls both times (a pure function of its key and closed-over arrays).

    Each call is a copy of the sampler in the step's program, and each copy costs about 0.3-1
    s of compilation and a fixed time per step: the demo's DEF (four latents, 1,744 elements)
    started its first step at 5.1-5.2 s instead of 6.4 and ran 0.56 ms a step instead of
    0.92-1.03 with its four calls gathered.
    """
    recorder = _Gathered()
    token = _GATHERED.set(recorder)
    try:
        fn(rng_key)
    finally:
        _GATHERED.reset(token)
    if sum(_is_small(request) for request in recorder.requests) < 2:
        return fn(rng_key)
    gamma_key, key = jax.random.split(rng_key)
    server = _Gathered(recorder.draw(gamma_key))
    token = _GATHERED.set(server)
    try:
        out = fn(key)
    finally:
        _GATHERED.reset(token)
    if len(server.requests) != len(server.served):
        raise RuntimeError("with_one_gamma_draw: fn made different log_gamma calls on its second run")
    return out


def _is_small(request) -> bool:
    shape, sample_shape, _ = request
    return math.prod(sample_shape + shape.shape) <= GATHERED_SIZE


def log_gamma_reference(rng_key, shape, sample_shape=()):
    """``log z`` for ``z ~ Gamma(shape, 1)`` by :func:`jax.random.loggamma`, for comparison.

    Same distribution and output shape as :func:`log_gamma` (not the same draws); it runs a
    per-element rejection ``while_loop`` and is an order of magnitude slower on CPU.
    """
    shape = jax.lax.stop_gradient(jnp.asarray(shape, _resolve_dtype(shape, None)))
    out_shape = tuple(sample_shape) + shape.shape
    return jax.lax.stop_gradient(jax.random.loggamma(rng_key, shape, out_shape, dtype=shape.dtype))


def _resolve_dtype(shape, dtype):
    if dtype is None:
        shape_dtype = getattr(shape, "dtype", None)
        if shape_dtype is not None and jnp.issubdtype(shape_dtype, jnp.floating):
            dtype = shape_dtype
        else:
            dtype = jnp.result_type(float)
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise ConfigError(f"dtype must be float32 or float64, got {dtype}")
    return dtype


# Elements per call (``sample_shape`` included; a ``vmap`` counts per call) up to which every
# element gets TINY_PROPOSALS proposals at once, its shape boosted to at least 2 (TINY_SIZE),
# or one proposal and one loop-free compacted round of SMALL_PROPOSALS each (SMALL_SIZE);
# above, the while_loop (see the module docstring).
TINY_SIZE = 256
SMALL_SIZE = 1024
SMALL_PROPOSALS = 8
TINY_PROPOSALS = 5
# proposal normals up to this many (the tiny path's): computed once (:mod:`grepvi.fusion_boundary`)
BOUNDARY_SIZE = SMALL_PROPOSALS * TINY_SIZE  # the middle path's compacted round's too
GATHERED_SIZE = 16_384
# Random words per call above which the bits come from grepvi.threefry (fused): 3 words per
# element of the large path's first stage, so only arrays of more than 10,000 elements, whose
# models' step programs compile with LLVM at -O3 (compilation_cache.SMALL_MODEL_ELEMENTS,
# LARGE_MODEL_COMPILER_OPTIONS), which vectorizes the fused rounds (at -O1 they ran as scalar
# code, and the DEF's step took 45.9 ms instead of 27.4). The tiny and middle paths' calls
# (at most 5,120 words) stay below it.
FUSED_BITS_SIZE = 30_000


@functools.partial(jax.jit, static_argnums=(2, 3))
def _log_gamma(rng_key, shape, sample_shape, num_proposals):
    out_shape = sample_shape + shape.shape
    alpha = jnp.broadcast_to(shape, out_shape).ravel()
    if alpha.size == 0:
        return alpha.reshape(out_shape)
    # Non-positive, NaN or infinite shapes never accept; they are excluded from `pending`.
    is_regular = (alpha > 0) & (alpha < jnp.inf)
    if alpha.size <= TINY_SIZE:
        log_z = _tiny_log_gamma(rng_key, alpha)
    else:
        is_boosted = alpha < 1
        boosted_alpha = jnp.where(is_boosted, alpha + 1, alpha)
        if alpha.size <= SMALL_SIZE:
            # One proposal for every element, then one compacted round for the pending ones;
            # every uniform from one call of the bit generator.
            size, capacity = alpha.size, _capacity(alpha.size)
            uniforms = _open_uniform(rng_key, (3 * size + 2 * SMALL_PROPOSALS * capacity,), alpha.dtype)
            first, second = uniforms[: 3 * size].reshape(3, size), uniforms[3 * size :]
            log_g = _marsaglia_tsang_from_uniforms(boosted_alpha, first[0], first[1])
            pending = jnp.isnan(log_g) & is_regular
            second = second.reshape(2 * SMALL_PROPOSALS, capacity)
            log_g = _finish_pending_once(second, boosted_alpha, log_g, pending)
            log_uniform = jnp.log(first[2])
        else:
            key_first, key_pending = jax.random.split(rng_key)
            # Stage 1: one proposal for every element (at least 95% accept), and the boost's
            # uniform, from one call of the bit generator.
            uniforms = _open_uniform(key_first, (3,) + alpha.shape, alpha.dtype)
            log_g = _marsaglia_tsang_from_uniforms(boosted_alpha, uniforms[0], uniforms[1])
            # Stage 2 (and, rarely, more rounds): the pending elements, compacted.
            log_g = _finish_pending(key_pending, boosted_alpha, log_g, is_regular, num_proposals)
            log_uniform = jnp.log(uniforms[2])
        log_z = log_g + jnp.where(is_boosted, log_uniform / alpha, 0)
    log_z = jnp.where(is_regular, log_z, jnp.where(alpha == jnp.inf, jnp.inf, jnp.nan))
    return jax.lax.stop_gradient(log_z.reshape(out_shape))


def _tiny_log_gamma(rng_key, alpha):
    """``log z`` for a tiny flat ``alpha`` (module docstring): every shape below 2 boosted to
    ``[2, 3)``, then ``TINY_PROPOSALS`` proposals each, every uniform from one call of the bit
    generator. ``Gamma(a) = Gamma(a + 1) U^(1/a)``: twice below 1 (from ``a + 2`` to ``a + 1``,
    then to ``a``), once from 1 to 2."""
    uniforms = _open_uniform(rng_key, (2 * TINY_PROPOSALS + 2,) + alpha.shape, alpha.dtype)
    uniforms = computed_once(uniforms, predicate_of(alpha))  # hashed once, not per reader
    boosts = jnp.where(alpha < 1, 2, jnp.where(alpha < 2, 1, 0)).astype(alpha.dtype)
    log_g = _marsaglia_tsang_from_uniforms(
        alpha + boosts, uniforms[:TINY_PROPOSALS], uniforms[TINY_PROPOSALS:-2], fallback=True
    )
    second = jnp.where(boosts > 1, jnp.log(uniforms[-2]) / (alpha + 1), 0)
    first = jnp.where(boosts > 0, jnp.log(uniforms[-1]) / alpha, 0)
    return log_g + second + first


def _marsaglia_tsang(rng_key, alpha, num_proposals):
    """``log g`` from the first accepted of ``num_proposals`` proposals (``alpha >= 1``).

    The proposals are drawn at once along a new leading axis (normals and uniforms from one
    call of the bit generator); elements where none was accepted are NaN.
    """
    uniforms = _open_uniform(rng_key, (2, num_proposals) + alpha.shape, alpha.dtype)
    return _marsaglia_tsang_from_uniforms(alpha, uniforms[0], uniforms[1])


def _marsaglia_tsang_from_uniforms(alpha, uniform_for_normal, uniform, fallback=False):
    """``log g`` of the first accepted proposal along the leading axis of the uniforms (or
    of the one proposal when they have ``alpha``'s shape); NaN where none was accepted.

    ``fallback``: where none was accepted (probability ``0.0484^K`` for ``K`` proposals at
    the worst shape), the first proposal with ``v > 0`` instead of NaN (a draw of the
    proposal distribution), and ``log d`` if there is none (probability ``0.007^K``).

    (One NaN-marked output lets XLA fuse a proposal into a single loop; a separate boolean
    output makes it compute the proposal twice.)
    """
    dtype = alpha.dtype
    d = alpha - 1 / 3
    c = jax.lax.rsqrt(9 * d)
    # read by the proposal's three terms and the fallback: in memory once (small draws only,
    # :mod:`grepvi.fusion_boundary`; the predicate from alpha, unbatched where draws are vmapped)
    normal = computed_once(_normal_from_uniform(uniform_for_normal), predicate_of(alpha), BOUNDARY_SIZE)
    log_v, accepted = _proposal(normal, uniform, d, c)
    if fallback:
        positive = c * normal > -1
        log_g = jnp.where(accepted | positive, jnp.log(d) + log_v, jnp.log(d))
        first = jnp.argmax(accepted, axis=0)
        first = jnp.where(jnp.any(accepted, axis=0), first, jnp.argmax(positive, axis=0))
        return jnp.take_along_axis(log_g, first[None], axis=0)[0]
    log_g = jnp.where(accepted, jnp.log(d) + log_v, jnp.asarray(jnp.nan, dtype))
    if log_g.shape == alpha.shape:
        return log_g
    if log_g.shape[0] == 1:
        return log_g[0]
    first = jnp.argmax(accepted, axis=0)
    return jnp.take_along_axis(log_g, first[None], axis=0)[0]


def _proposal(normal, uniform, d, c):
    """``(log v, accepted)`` for one Marsaglia-Tsang proposal per element."""
    y = c * normal
    is_positive = y > -1
    y = jnp.where(is_positive, y, 0)
    log1p_y = jnp.log1p(y)
    normal_squared = normal * normal
    squeeze = uniform < 1 - 0.0331 * normal_squared * normal_squared
    log_ratio = 3 * d * _log1p_remainder(y, log1p_y)
    accepted = is_positive & (squeeze | (jnp.log(uniform) < log_ratio))
    return 3 * log1p_y, accepted


def _log1p_remainder(y, log1p_y):
    """``log(1 + y) - y + y^2/2 - y^3/3``, accurate also for small ``|y|``.

    For ``|y| < 0.1`` the alternating series ``sum_{k >= 4} (-1)^(k+1) y^k / k`` is summed to
    the dtype's precision (8 terms in float32, 16 in float64); elsewhere the direct form loses
    at most ``4 eps / |y|^3`` relative.
    """
    num_terms = 8 if y.dtype == jnp.float32 else 16
    series = jnp.zeros_like(y)
    for power in reversed(range(4, 4 + num_terms)):
        series = series * y + (1 if power % 2 else -1) / power
    series = series * (y * y) * (y * y)
    direct = log1p_y - y * (1 - y * (0.5 - y / 3))
    return jnp.where(jnp.abs(y) < _SERIES_THRESHOLD, series, direct)


def _finish_pending(rng_key, alpha, log_g, is_regular, num_proposals):
    """Draw ``log g`` where it is NaN and ``is_regular`` (flat arrays, ``alpha >= 1``).

    A ``while_loop`` runs while any element is pending; each round compacts up to
    ``n/16 + 64`` pending elements (:func:`_first_pending`) and gives each
    ``num_proposals`` proposals at once. Costs one ``any`` when nothing is pending.

    The loop carries ``log g`` alone and reads the pending elements off its NaNs: XLA on CPU
    copies an elementwise computation into each of its consumers, so a proposal read by both
    the pending flags and the draws was computed twice (409,600 elements: 12.6 ms a call
    where one pass takes 3).
    """
    capacity = _capacity(alpha.size)

    def pending_of(log_g):
        return jnp.isnan(log_g) & is_regular

    def has_pending(state):
        return jnp.any(pending_of(state[1]))

    def finish_round(state):
        iteration, log_g = state
        index = _first_pending(pending_of(log_g), capacity)
        subset_alpha = alpha.at[index].get(mode="fill", fill_value=1)
        key = jax.random.fold_in(rng_key, iteration)
        subset_log_g = _until_accepted(key, subset_alpha, index < alpha.size, num_proposals)
        return iteration + 1, log_g.at[index].set(subset_log_g, mode="drop")

    return jax.lax.while_loop(has_pending, finish_round, (jnp.zeros((), jnp.uint32), log_g))[1]


def _until_accepted(rng_key, alpha, wanted, num_proposals):
    """``log g`` for every ``wanted`` element (NaN elsewhere): rounds of ``num_proposals``
    proposals for every element, each kept where its element has none accepted yet, until
    every wanted element has one (about five rounds for 25,000 elements)."""

    def has_pending(state):
        return jnp.any(jnp.isnan(state[1]) & wanted)

    def draw_round(state):
        iteration, log_g = state
        proposal = _marsaglia_tsang(jax.random.fold_in(rng_key, iteration), alpha, num_proposals)
        return iteration + 1, jnp.where(jnp.isnan(log_g) & wanted, proposal, log_g)

    start = jnp.full(alpha.shape, jnp.nan, alpha.dtype)
    return jax.lax.while_loop(has_pending, draw_round, (jnp.zeros((), jnp.uint32), start))[1]


def _first_pending(pending, capacity):
    """The indices of the first ``capacity`` true elements of the flat boolean ``pending``, in
    order, then ``pending.size``: ``jnp.nonzero(pending, size=capacity, fill_value=size)``.

    ``jnp.nonzero`` counts with a cumulative sum and a scatter over every element (2.7 ms for
    409,600 on two cores: as long as drawing them). Here the flags are packed 32 to a word
    (a sum of shifted bits), the words' population counts summed cumulatively (1/32 of the
    elements), and each requested index found from its word: the word by binary search of
    the counts, the bit by five halvings of the word's population count (0.8 ms).
    """
    size = pending.size
    num_words = -(-size // 32)
    flags = jnp.pad(pending, (0, num_words * 32 - size)).reshape(num_words, 32).astype(jnp.uint32)
    words = jnp.sum(flags << jnp.arange(32, dtype=jnp.uint32), axis=1, dtype=jnp.uint32)
    counts = jax.lax.population_count(words).astype(jnp.int32)
    through = jnp.cumsum(counts)  # pending elements up to and including each word
    wanted = jnp.arange(capacity, dtype=jnp.int32)
    word = jnp.searchsorted(through, wanted + 1, side="left", method="scan_unrolled").astype(jnp.int32)
    word = jnp.minimum(word, num_words - 1)
    rank = wanted - (through[word] - counts[word])  # which set bit of the word
    bits, position = words[word], jnp.zeros_like(wanted)
    for width in (16, 8, 4, 2, 1):
        below = jax.lax.population_count(bits & np.uint32((1 << width) - 1)).astype(jnp.int32)
        higher = rank >= below
        rank = jnp.where(higher, rank - below, rank)
        position = jnp.where(higher, position + width, position)
        bits = jnp.where(higher, bits >> np.uint32(width), bits)
    return jnp.where(wanted < through[-1], word * 32 + position, size)


def _capacity(size):
    """Pending elements one compacted round takes: ``n/16 + 64``, at least 8 standard
    deviations above the worst-case 4.84% rejected, for any ``n``."""
    return min(size, math.ceil(size / 16) + 64)


def _finish_pending_once(uniforms, alpha, log_g, pending):
    """Draw ``log g`` where ``pending`` (flat arrays, ``alpha >= 1``) without a loop.

    One compaction of up to :func:`_capacity` pending elements gives each
    ``SMALL_PROPOSALS`` proposals at once (``uniforms``: ``(2 SMALL_PROPOSALS, capacity)``),
    with the small path's fallback. A pending element beyond the capacity (probability below
    ``1e-15``) gets ``log d``, the log of the proposal's mode.
    """
    capacity = uniforms.shape[1]
    # rank[i]: pending elements up to and including i (serves each its compacted draw)
    rank = jnp.cumsum(pending.astype(jnp.int32))
    index = _first_pending(pending, capacity)
    subset_alpha = alpha.at[index].get(mode="fill", fill_value=1)
    subset_log_g = _marsaglia_tsang_from_uniforms(
        subset_alpha, uniforms[:SMALL_PROPOSALS], uniforms[SMALL_PROPOSALS:], fallback=True
    )
    served = subset_log_g.at[rank - 1].get(mode="fill", fill_value=jnp.nan)
    log_g = jnp.where(pending, served, log_g)
    return jnp.where(jnp.isnan(log_g) & pending, jnp.log(alpha - 1 / 3), log_g)


def _open_uniform(rng_key, shape, dtype):
    """Uniform draws on the open interval ``(0, 1)``: ``(k + 1/2) 2^-m`` for ``m`` mantissa
    bits and uniform integer ``k``, so neither 0 nor 1 occurs and ``log u`` is finite.

    The top ``m`` random bits fill the mantissa of a float in ``[1, 2)`` (exact, no integer
    to float conversion); subtracting 1 and adding ``2^-(m+1)`` is exact too.
    """
    if dtype == jnp.float32:
        bits_dtype, exponent_of_one = jnp.uint32, 0x3F800000
    else:
        bits_dtype, exponent_of_one = jnp.uint64, 0x3FF0000000000000
    mantissa_bits = np.finfo(dtype).nmant
    if bits_dtype == jnp.uint32 and math.prod(shape) > FUSED_BITS_SIZE:
        bits = threefry.bits(rng_key, shape)  # the same bits, the rounds fused
    else:
        bits = jax.random.bits(rng_key, shape, bits_dtype)
    shift = np.dtype(bits_dtype).itemsize * 8 - mantissa_bits
    one_to_two = jax.lax.bitcast_convert_type((bits >> shift) | np.array(exponent_of_one, bits_dtype), dtype)
    return (one_to_two - 1) + 2.0 ** -(mantissa_bits + 1)


def _standard_normal(rng_key, shape, dtype):
    """Standard normal draws from :func:`_open_uniform` (see :func:`_normal_from_uniform`)."""
    return _normal_from_uniform(_open_uniform(rng_key, shape, dtype))


def _normal_from_uniform(uniform):
    """``sqrt(2) erfinv(2u - 1)`` for ``u`` on the open interval of :func:`_open_uniform`
    (``2u - 1`` is exact, so the draws are symmetric and finite)."""
    return np.sqrt(2).astype(uniform.dtype) * jax.lax.erf_inv(2 * uniform - 1)
