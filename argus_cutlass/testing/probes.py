"""What the hardware model predicts a kernel computes: the numeric side of silicon agreement.

The verifier's transfer functions say which global element every MMA operand slot reads.
TMA writes the gmem box into shared memory (:func:`~argus_cutlass.verify.absint.tag_image`),
and GMMA reads it back through its own smem view (``MmaRead.view``). Run on actual
numbers, the same functions predict the output tile of a CTA, including for a *wrong*
program. If TMA writes SW128 and the descriptor reads SW64, for example, the model says
which A element lands in each slot, and so which wrong D the GPU must produce.
:func:`predict_tile` computes that prediction. Probe kernels on the GPU (one-hot inputs)
are then compared with it element by element. Agreement on the mutated programs is what
shows that the model describes the hardware and not only itself (VERIFIER.md, "silicon
agreement").

Scope: the mainloop data path of one CTA tile (TMA box -> smem -> descriptor -> MMA slot)
over ``K = n_k_tiles * tile_k``, k-tile ``t`` in stage ``t mod S``. The pipeline protocol is
not simulated here; G6 is checked separately. A slot that reads an element no TMA box
wrote, or reads outside the buffer, has no predictable value. Such slots are reported in
the mask, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from argus_cutlass.dsl.ir import Program
from argus_cutlass.verify.absint import read_tags, tag_image

__all__ = ["TilePrediction", "one_hot_inputs", "one_hot_probes", "operand_sources", "predict_tile", "swizzle_probe_configs"]


@dataclass(frozen=True)
class TilePrediction:
    """Model output of one CTA tile.

    Attributes:
        d: float64 ``(tile_m, tile_n)``, ``sum_t sum_k A[src_A(m, k, t)] * B[src_B(n, k, t)]``.
        predictable: bool ``(tile_m, tile_n)``, False where some slot of that output reads an
            smem element whose content the model cannot name (unwritten or outside the buffer).
    """

    d: np.ndarray
    predictable: np.ndarray


def operand_sources(program: Program, operand: str) -> tuple[np.ndarray, np.ndarray]:
    """Global (mn, k) read by every MMA slot of ``operand`` at each stage.

    Returns:
        ``(mn, k)``: int64 arrays of shape ``(tile_mn, tile_k, S)``. For a slot at stage
        ``s``, ``k`` is the k within the k-tile loaded into that stage, in ``[0, tile_k)``.
        Both are negative where the slot reads an unwritten element or one outside the
        buffer.
    """
    read = program.read(operand)
    load = program.load_into(read.src)
    image = tag_image(program, load)
    _off, tags, valid = read_tags(program, read, image, program.stages)
    f_mn, f_k = list(image.fields)[:2]
    stage = np.arange(program.stages)[None, None, :]
    mn, k = tags[f_mn], tags[f_k]
    ok = valid & (mn >= 0) & (k >= 0)
    k_in_tile = np.where(ok, k - stage * load.tile_k, -1)
    return np.where(ok, mn, -1), k_in_tile


def predict_tile(program: Program, a: np.ndarray, b: np.ndarray) -> TilePrediction:
    """The model's output tile for gmem tiles ``a`` (``tile_m x K``) and ``b`` (``tile_n x K``).

    Args:
        program: the GEMM program (possibly mutated, e.g. ``replace_node("read", "A", view=...)``).
        a, b: float arrays, ``K`` a multiple of the program's ``tile_k``. They are the CTA's
            A rows and B rows (B stored N x K), so the correct result is ``a @ b.T``.

    Raises:
        ValueError: shapes that do not match the program's tile.
    """
    ra, rb = program.read("A"), program.read("B")
    tile_m, tile_n, tile_k = ra.tile_mn, rb.tile_mn, ra.tile_k
    if a.shape[0] != tile_m or b.shape[0] != tile_n or a.shape[1] != b.shape[1] or a.shape[1] % tile_k:
        raise ValueError(f"a {a.shape} / b {b.shape} do not fit tile {tile_m}x{tile_n}x{tile_k}")
    am, ak = operand_sources(program, "A")
    bn, bk = operand_sources(program, "B")
    d = np.zeros((tile_m, tile_n))
    bad_a = np.zeros(tile_m, dtype=bool)
    bad_b = np.zeros(tile_n, dtype=bool)
    for t in range(a.shape[1] // tile_k):
        s = t % program.stages
        va = (am[:, :, s] >= 0) & (am[:, :, s] < tile_m)
        vb = (bn[:, :, s] >= 0) & (bn[:, :, s] < tile_n)
        bad_a |= ~va.all(axis=1)
        bad_b |= ~vb.all(axis=1)
        a_read = np.where(va, a[np.where(va, am[:, :, s], 0), np.where(va, ak[:, :, s] + t * tile_k, 0)], 0.0)
        b_read = np.where(vb, b[np.where(vb, bn[:, :, s], 0), np.where(vb, bk[:, :, s] + t * tile_k, 0)], 0.0)
        d += a_read @ b_read.T
    return TilePrediction(d, ~(bad_a[:, None] | bad_b[None, :]))


def swizzle_probe_configs(dtype: str = "fp16", out_dtype: str = "fp32") -> dict[str, object]:
    """One-CTA configurations that put each operand major (K, MN) in every GMMA swizzle mode.

    The K-major ones take their swizzle from ``tile_k``: 64, 32 and 16 halves give SW128,
    SW64 and SW32. The MN-major ones (layout ``nt``, B stored K x N) take it from ``tile_n``
    in the same way. The values are ``GemmConfig`` objects, keyed ``"K-SW128"`` etc.
    """
    from argus_cutlass.kernels.gemm.config import GemmConfig

    pp = dict(dtype=dtype, out_dtype=out_dtype, cluster_m=1, cluster_n=1, stages=4, schedule="pingpong",
              epi_m=64, epi_n=16)
    return {
        "K-SW128": GemmConfig(tile_m=64, tile_n=64, tile_k=64, **pp),
        "K-SW64": GemmConfig(tile_m=64, tile_n=64, tile_k=32, **pp),
        "K-SW32": GemmConfig(tile_m=64, tile_n=64, tile_k=16, **pp),
        "MN-SW128": GemmConfig(layout="nt", tile_m=64, tile_n=64, tile_k=64, **pp),
        "MN-SW64": GemmConfig(layout="nt", tile_m=64, tile_n=32, tile_k=64, **pp),
        "MN-SW32": GemmConfig(layout="nt", tile_m=64, tile_n=16, tile_k=64, **pp),
    }


def one_hot_probes(tile_mn: int, k: int, count: int = 8) -> list[tuple[int, int]]:
    """``count`` (mn, k) positions spread over rows, 16-byte chunks and k-tiles (deterministic):
    row ``i * 7 + 3`` and column ``i * 37 + 5``, both wrapped."""
    return [((i * 7 + 3) % tile_mn, (i * 37 + 5) % k) for i in range(count)]


def one_hot_inputs(m: int, n: int, k: int, count: int = 8):
    """The probe inputs: ``count`` one-hot A tiles with B all ones, then ``count`` one-hot B
    tiles with A all ones (positions from :func:`one_hot_probes`).

    Yields:
        ``(operand, mn, k_index, a, b)`` with ``a`` ``(m, k)`` and ``b`` ``(n, k)`` float64.
    """
    for operand, rows in (("A", m), ("B", n)):
        for mn, kk in one_hot_probes(rows, k, count):
            a, b = np.ones((m, k)), np.ones((n, k))
            hot = np.zeros((rows, k))
            hot[mn, kk] = 1.0
            if operand == "A":
                a = hot
            else:
                b = hot
            yield operand, mn, kk, a, b
