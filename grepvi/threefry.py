r"""``jax.random.bits`` of a Threefry key as one fused loop: the same bits, faster on CPU.

JAX hashes a block counter per output word with Threefry-2x32 (Salmon et al. 2011, 20 rounds
of add, rotate and xor on two 32-bit words) and, under its partitionable default, returns
``x_1 \oplus x_2`` of the block at counter ``(hi, lo)`` = the word's flat index. On CPU it
lowers the 20 rounds as a rolled loop of 5 iterations (a smaller program to compile): each
iteration writes both words of every block to memory, so drawing the 1.23 million uniforms of
the Olivetti DEF's largest latent made ten passes over 10 MB arrays. :func:`bits` applies the
same rounds unrolled, which XLA fuses into one elementwise loop with the uniforms' consumers:
the same bits (``tests/test_threefry.py`` checks equality), 4.1 -> 2.0 ms for 1.39 million
words on two cores (alone; fused with the arithmetic that reads them, less).

Used by :mod:`grepvi.sampling` for calls of more than ``FUSED_BITS_SIZE`` (30,000) words only: the
unrolled rounds are about 100 operations for the compiler per call, which a small model's
step (whose draws cost nothing) would pay in compile time, and they are fast only where LLVM
vectorizes them (``-O3``, the large models' step programs and JAX's default; at ``-O1`` the
Olivetti DEF's step took 45.9 ms with them, 38.4 with ``jax.random.bits``, 27.4 at ``-O3``).
Inside a window every call is unrolled now (below), so there :func:`bits` and
``jax.random.bits`` are the same program; it stays for the programs lowered outside one.

**Small models' step programs lower every Threefry call unrolled** (:func:`unrolled_lowering`,
entered by :func:`grepvi.inference.driver.make_window` around its window's lowering, for models
of up to 10,000 latent elements: the Olivetti DEF's window took 139 ms a step with it against
81, its hashes fused into their readers and computed again in each). The rolled loop is
a ``while`` of 5 trips whose body swaps the key schedule's words: on CPU each trip runs the
body's copies and fusions as separate thunks, about 85 per call, whatever the call's size. A
small model's step makes 6 such calls (the step's key split, the repeat's ``fold_in``, the
estimate's split, the draws' splits and bits), and a later stage's step repeats all but the
first up to 64 times: in the default window of the Dugongs model (``jax.profiler``) the step
ran 738 thunks, 309 of them copies, most in those loops. Unrolled, the same bits (the
lowering JAX uses on GPU for the same primitive) cost a fusion or two each.

Reference:
  J. K. Salmon, M. A. Moraes, R. O. Dror and D. E. Shaw, "Parallel random numbers: as easy as
  1, 2, 3", SC 2011.
"""

import contextlib
import math
import threading

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["bits", "fused", "seed_key", "seed_key_data", "unrolled_lowering"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def fused(rng_key) -> bool:
    """Whether :func:`bits` reproduces ``jax.random.bits(rng_key, shape, uint32)`` (a
    Threefry-2x32 key under JAX's partitionable bit layout); else it calls that function."""
    if not jax.config.jax_threefry_partitionable:
        return False
    if jax.dtypes.issubdtype(rng_key.dtype, jax.dtypes.prng_key):
        return str(jax.random.key_impl(rng_key)) == "threefry2x32"
    return (
        rng_key.dtype == jnp.uint32
        and rng_key.shape[-1:] == (2,)
        and jax.config.jax_default_prng_impl == "threefry2x32"
    )


def seed_key_data(seed: int) -> np.ndarray | jax.Array:
    """``jax.random.PRNGKey(seed)`` (the raw ``uint32[2]`` Threefry key) built in NumPy.

    JAX seeds a Threefry key with a compiled program (``_threefry_seed``, and ``stage`` for the
    integer): 25-45 ms of XLA compilation in a fresh process, on the path of every fit. A seed
    in ``[0, 2**32)`` gives the key ``(0, seed)`` (the seed's high and low 32-bit words) with or
    without ``jax_enable_x64``; any other seed, or another default PRNG, is seeded by JAX (its
    array as JAX returns it: inside a trace, a traced key)."""
    if _seeded_in_numpy(seed):
        return np.array([0, int(seed)], np.uint32)
    return jax.random.PRNGKey(seed)


def seed_key(seed: int) -> jax.Array:
    """``jax.random.key(seed)`` (a typed Threefry key) without a compilation
    (:func:`seed_key_data`)."""
    if _seeded_in_numpy(seed):
        return jax.random.wrap_key_data(seed_key_data(seed), impl="threefry2x32")
    return jax.random.key(seed)


def _seeded_in_numpy(seed) -> bool:
    return (
        isinstance(seed, int | np.integer)
        and not isinstance(seed, bool | np.bool_)
        and 0 <= int(seed) < 2**32
        and jax.config.jax_default_prng_impl == "threefry2x32"
    )


def bits(rng_key, shape) -> jax.Array:
    """``uint32`` random bits of ``shape``: ``jax.random.bits(rng_key, shape, jnp.uint32)``,
    bit for bit, with the Threefry rounds unrolled (see the module docstring)."""
    shape = tuple(int(size) for size in shape)
    size = math.prod(shape)
    if not fused(rng_key) or size >= 2**32:
        return jax.random.bits(rng_key, shape, jnp.uint32)
    data = (
        jax.random.key_data(rng_key) if jax.dtypes.issubdtype(rng_key.dtype, jax.dtypes.prng_key) else rng_key
    )
    low = jax.lax.iota(jnp.uint32, size).reshape(shape)
    first, second = _threefry2x32(data[0], data[1], jnp.zeros_like(low), low)
    return first ^ second


def _rotate_left(x, distance):
    return (x << np.uint32(distance)) | (x >> np.uint32(32 - distance))


def _threefry2x32(key1, key2, x1, x2):
    """Threefry-2x32 with 20 rounds of the two words ``(x1, x2)`` under the key ``(key1, key2)``
    (the algorithm of ``jax._src.random.threefry2x32``, unrolled)."""
    keys = (key1, key2, key1 ^ key2 ^ _PARITY)
    x = [x1 + keys[0], x2 + keys[1]]
    for block in range(5):
        for distance in _ROTATIONS[block % 2]:
            x[0] = x[0] + x[1]
            x[1] = x[0] ^ _rotate_left(x[1], distance)
        x[0] = x[0] + keys[(block + 1) % 3]
        x[1] = x[1] + keys[(block + 2) % 3] + np.uint32(block + 1)
    return x


_LOWERING_LOCK = threading.RLock()

# Words per hash up to which unrolled_lowering unrolls the rounds. XLA fuses an unrolled hash,
# cheap elementwise code, into every fusion that reads it, so a large one would be hashed again
# per reader; the rolled loop writes its words to memory once, and its per-trip costs are
# small beside a large array's. The small models' hashes (every draw of a step of up to
# 10,000 latent elements, batched over its draws) stay below it; the large models' bits come
# from :func:`bits` already (above ``sampling.FUSED_BITS_SIZE``). The same split as
# ``fusion_boundary.SMALL_TREE_ELEMENTS``.
UNROLLED_MAX_WORDS = 10_000


@contextlib.contextmanager
def unrolled_lowering():
    """Within the block, programs lowered for CPU hash with Threefry's 20 rounds unrolled (the
    lowering JAX uses on GPU) where a call hashes up to ``UNROLLED_MAX_WORDS`` words, instead
    of JAX's CPU default, a rolled loop of 5 trips. Every call gives the same bits; what
    changes is the program: a fusion or two per call instead of a ``while`` whose trips run
    about 85 thunks (see the module docstring).

    Measured (``benchmarks/threefry_lowering.py``, the default procedure's fit from a fresh
    process each, ``docs/performance.md``): the same iterations to the same answer; the
    horseshoe 26.9 -> 18.3 s and Salmonella 42.5 -> 27.2 s (their later stages average 64 to
    256 draws a step, each repeat hashing again), Mendel 7.4 -> 5.5 s, Dugongs 11.9 -> 11.2 s;
    the window's compile time within its noise.

    JAX has no public switch for it: the block replaces the CPU rule of its ``threefry2x32``
    primitive in the lowering registry and restores it on exit (under a lock: lowering in
    another thread meanwhile would get the unrolled rounds too, the same bits). Where JAX's
    internals differ from the ones this was written for, the block does nothing.
    """
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as implementation

        primitive = implementation.threefry2x32_p
        unrolled = implementation._threefry2x32_lowering_rule
        table = mlir._platform_specific_lowerings["cpu"]
        rolled = table[primitive].rule
    except (ImportError, AttributeError, KeyError, TypeError):
        yield
        return

    def unrolled_if_small(ctx, *args, **params):
        words = math.prod(ctx.avals_out[0].shape)
        return (unrolled if words <= UNROLLED_MAX_WORDS else rolled)(ctx, *args, **params)

    with _LOWERING_LOCK:
        previous = table[primitive]
        mlir.register_lowering(primitive, unrolled_if_small, platform="cpu")
        try:
            yield
        finally:
            table[primitive] = previous
