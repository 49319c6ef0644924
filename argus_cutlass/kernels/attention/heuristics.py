"""The fixed configuration heuristic of the attention family: FlashAttention-3's tile per head dim.

FA3 (``hopper/tile_size.h``, ``tile_size_fwd_sm90``, 16-bit inputs, P in registers) uses 192 x 128
for d = 64, 128 x 176 (non-causal) / 128 x 128 (causal) for d = 128, 128 x 112 for d = 192 and
128 x 80 for d = 256 (the last two at the shared-memory limit with 2 stages). For d = 96 FA3 keeps P
in shared memory at 192 x 144; with P in registers we take two consumer warpgroups (240 registers
each) at 128 x 128. The agent's tuned entries override these per shape bucket.
"""

from __future__ import annotations

from argus_cutlass.kernels.attention.config import AttentionConfig

#: head dim -> (tile_m, tile_n non-causal, tile_n causal)
FA3_TILES: dict[int, tuple[int, int, int]] = {
    64: (192, 128, 128),
    96: (128, 128, 128),
    128: (128, 176, 128),
    192: (128, 112, 112),
    256: (128, 80, 80),
}


def default_config(head_dim: int, dtype: str = "bf16", causal: bool = False, varlen: bool = False) -> AttentionConfig:
    """The heuristic configuration for a head dim (2 K/V stages, ping-pong consumer warpgroups).

    >>> default_config(128, causal=True).tile_n, default_config(128).tile_n
    (128, 176)

    Raises:
        argus_cutlass.errors.ConfigError: ``attention.head_dim`` for a head dim the family does not build.
    """
    from argus_cutlass.errors import ConfigError

    if head_dim not in FA3_TILES:
        raise ConfigError("attention.head_dim", f"head_dim={head_dim}: the attention kernels are built for head dims "
                          f"{sorted(FA3_TILES)}", "pad the head dim to the next supported one")
    tile_m, tile_n, tile_n_causal = FA3_TILES[head_dim]
    return AttentionConfig(dtype=dtype, head_dim=head_dim, causal=causal, varlen=varlen, tile_m=tile_m,
                           tile_n=tile_n_causal if causal else tile_n, stages=2)
