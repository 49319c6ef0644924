"""The GMMA matrix descriptor model (layout.gmma_desc) and the verifier rule gmma.descriptor.

The nvcc test compiles a host-only program that asks CuTe's own ``make_gmma_desc`` for the
descriptors of the same layouts. Agreement there means our encoder and CuTe's agree on
start offset, LBO, SBO and layout type, for both majors and every swizzle mode.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from argus_cutlass.build.toolchain import find_cutlass, find_nvcc
from argus_cutlass.dsl.atoms import GmmaOp, GmmaSmemAtom
from argus_cutlass.dsl.ir import MmaRead, SmemView, SourceLoc
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.layout.gmma import view_layout
from argus_cutlass.layout.gmma_desc import (
    DescriptorError,
    GmmaDescriptor,
    decode_bytes,
    descriptor_plan,
    encode,
    plan_descriptor,
)
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.absint import check_descriptors

#: (major, swizzle bytes, tile_mn, tile_k, stages): both majors, every swizzle mode
CASES = [("K", 128, 64, 64, 2), ("K", 64, 64, 32, 2), ("K", 32, 64, 16, 2), ("K", 16, 64, 16, 2),
         ("MN", 128, 128, 64, 2), ("MN", 64, 64, 64, 2), ("MN", 32, 64, 64, 2), ("MN", 16, 64, 64, 2)]


def _view(major, sw, mn, k, stages):
    atom = GmmaSmemAtom(major, sw, 16)
    return SmemView(atom, (mn, k, stages))


def _layout(major, sw, mn, k, stages):
    v = _view(major, sw, mn, k, stages)
    return view_layout(v.atom, v.shape, v.order)


def _our_descs(major, sw, mn, k, stages):
    """(stage, k_block) -> (start offset bytes, lbo, sbo, layout type) for one 64-row wgmma."""
    lay = _layout(major, sw, mn, k, stages)
    out = {}
    for s in range(stages):
        for kb in range(k // 16):
            d = encode(lay.layout, lay.swizzle.bits, major, 2, 0, 0, 16 * kb, s, 64, 16)
            out[(s, kb)] = (16 * d.start, d.lbo, d.sbo, d.layout_type)
    return out


def test_bits_round_trip_and_field_overflow():
    d = GmmaDescriptor(start=0x3FFF, lbo=1, sbo=64, base_offset=0, layout_type=3)
    assert GmmaDescriptor.from_bits(d.bits()) == d
    with pytest.raises(DescriptorError, match="start=16384"):
        GmmaDescriptor(start=1 << 14, lbo=1, sbo=64, base_offset=0, layout_type=1).bits()


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-SW{c[1]}" for c in CASES])
def test_decode_of_encode_is_the_layout(case):
    major, sw, mn, k, stages = case
    lay = _layout(major, sw, mn, k, stages)
    m_, k_ = np.meshgrid(np.arange(64), np.arange(16), indexing="ij")
    for (s, kb), _ in _our_descs(major, sw, mn, k, stages).items():
        d = encode(lay.layout, lay.swizzle.bits, major, 2, 1024, 0, 16 * kb, s, 64, 16)
        hw = decode_bytes(d, major, 2, m_, k_)
        assert (hw == 1024 + 2 * np.asarray(lay(m_, 16 * kb + k_, s))).all()


def test_non_canonical_layout_is_refused():
    lay = _layout("K", 128, 64, 64, 2)
    from argus_cutlass.layout.algebra import Layout

    padded = Layout((64, 64, 2), (128, 1, 8192))  # rows padded to 256 B: SW128 rows must be 128 B apart
    with pytest.raises(DescriptorError, match="not a canonical SW128"):
        encode(padded, 3, "K", 2, 0, 0, 16, 0, 64, 16)
    assert encode(lay.layout, 3, "K", 2, 0, 0, 16, 0, 64, 16).sbo == 64  # 8 rows x 128 B


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-SW{c[1]}" for c in CASES])
def test_plan_descriptor_is_encode_of_every_subtile(case):
    """What the kernel prints (one base descriptor + start-address advances per stage and k-block)
    is, field for field, the descriptor ``encode`` derives for that sub-tile."""
    major, sw, mn, k, stages = case
    view = _view(major, sw, mn, k, stages)
    op = GmmaOp(64, 64, 16, "fp16", major, major)
    read = MmaRead("gmma_A", "A", "sA", view, op, mn, k, 1, SourceLoc("x", 0))
    plan = descriptor_plan(read)
    lay = _layout(major, sw, mn, k, stages)
    for s in range(stages):
        for kb in range(k // 16):
            want = encode(lay.layout, lay.swizzle.bits, major, 2, 1024, 0, 16 * kb, s, 64, 16)
            assert plan_descriptor(plan, 1024, s, 0, 0, kb) == want


def test_rule_proves_shipped_configs_and_rejects_a_bad_read():
    report = verify_gemm(build_program(GemmConfig()))
    assert any(p.rule == "gmma.descriptor" for p in report.proofs) and report.ok
    program = build_program(GemmConfig(layout="nt", cluster_m=1))
    proofs, violations = check_descriptors(program)
    assert not violations and "LBO=512" in proofs[1].summary  # B: 4 SW128 MN atoms of 64 along N
    assert "14-bit start address masked" in proofs[0].summary
    # a view no descriptor can express (the buffer is not a tiling of the atom)
    bad = program.replace_node("read", "A", view=SmemView(program.read("A").view.atom, (96, 64, 4)))
    _, violations = check_descriptors(bad)
    assert violations and violations[0].invariant == "G1" and "no GMMA descriptor expresses" in violations[0].message


def test_start_address_field_overflow_is_found():
    """A buffer whose stages reach past 2^18 bytes: the kernel's 14-bit start field wraps."""
    p = build_program(GemmConfig(tile_n=128, tile_k=128, cluster_m=1, stages=5))  # B stage 4 starts past 256 KiB
    _, violations = check_descriptors(p)
    assert violations and "overflows its 14 bits" in violations[0].message


def test_descriptor_advance_follows_the_reads_op():
    """The template forms the descriptors from the read's op; the instruction is the MMA's. A read
    op of K = 8 advances 8 columns per k-block while the wgmma consumes 16 (the mutation suite's
    ``desc_a_advance_k8``); a read op of M = 128 puts warpgroup 1 at row 128 instead of 64."""
    p = build_program(GemmConfig(cluster_m=1))
    _, v = check_descriptors(p.replace_node("read", "A", **{"op.k": 8}))
    assert v and v[0].message.startswith("operand A stage 0 warpgroup 0 rep 0 k_block 1:")
    assert "reads byte 16 for slot (mn=0, k=16) but the view places it at 32" in v[0].message
    assert v[0].counterexample.k_block == 1 and v[0].counterexample.smem_offset == {"A": 16}
    _, v = check_descriptors(p.replace_node("read", "A", **{"op.m": 128}))
    assert v and "warpgroup 1" in v[0].message and "is not the MMA's 64x256x16" in v[0].message


_HOST_PROGRAM = r"""
#include <cstdio>
#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
using namespace cute;
using T = cutlass::half_t;
alignas(1024) static T buf[2 * 128 * 64];

template <GMMA::Major Mj, class Atom, int MN, int K>
void emit(const char* name) {
  constexpr bool kmaj = Mj == GMMA::Major::K;
  auto lay = tile_to_shape(Atom{}, Shape<Int<MN>, Int<K>, _2>{},
                           conditional_t<kmaj, Step<_1, _2, _3>, Step<_2, _1, _3>>{});
  Tensor s = make_tensor(make_smem_ptr(buf), lay);
  for (int st = 0; st < 2; ++st) {
    for (int kb = 0; kb < K / 16; ++kb) {
      Tensor sub = local_tile(s(_, _, st), Shape<_64, _16>{}, make_coord(0, kb));
      auto d = SM90::GMMA::make_gmma_desc<Mj>(sub);
      long off = long((char const*)raw_pointer_cast(sub.data()) - (char const*)buf);
      printf("{\"case\": \"%s\", \"stage\": %d, \"kb\": %d, \"start\": %ld, \"lbo\": %d, \"sbo\": %d, \"type\": %d}\n",
             name, st, kb, off, int(d.bitfield.leading_byte_offset_), int(d.bitfield.stride_byte_offset_),
             int(d.bitfield.layout_type_));
    }
  }
}

int main() {
  emit<GMMA::Major::K, GMMA::Layout_K_SW128_Atom<T>, 64, 64>("K-SW128");
  emit<GMMA::Major::K, GMMA::Layout_K_SW64_Atom<T>, 64, 32>("K-SW64");
  emit<GMMA::Major::K, GMMA::Layout_K_SW32_Atom<T>, 64, 16>("K-SW32");
  emit<GMMA::Major::K, GMMA::Layout_K_INTER_Atom<T>, 64, 16>("K-SW16");
  emit<GMMA::Major::MN, GMMA::Layout_MN_SW128_Atom<T>, 128, 64>("MN-SW128");
  emit<GMMA::Major::MN, GMMA::Layout_MN_SW64_Atom<T>, 64, 64>("MN-SW64");
  emit<GMMA::Major::MN, GMMA::Layout_MN_SW32_Atom<T>, 64, 64>("MN-SW32");
  emit<GMMA::Major::MN, GMMA::Layout_MN_INTER_Atom<T>, 64, 64>("MN-SW16");
  return 0;
}
"""


@pytest.mark.nvcc
def test_encoder_agrees_with_cutes_make_gmma_desc(tmp_path):
    """Host-only CuTe (no GPU): make_gmma_desc's LBO, SBO, layout type and the sub-tile start
    offset equal ours, field for field, for every (stage, k-block) of every case."""
    src = tmp_path / "desc.cu"
    src.write_text(_HOST_PROGRAM)
    tc = find_cutlass()
    exe = tmp_path / "desc"
    cmd = [str(find_nvcc().path), "-std=c++17", "-O0", "--expt-relaxed-constexpr", *tc.include_flags(),
           "-o", str(exe), str(src)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == sum(2 * (c[3] // 16) for c in CASES)
    for major, sw, mn, k, stages in CASES:
        ours = _our_descs(major, sw, mn, k, stages)
        theirs = {(r["stage"], r["kb"]): (r["start"], r["lbo"], r["sbo"], r["type"])
                  for r in rows if r["case"] == f"{major}-SW{sw}"}
        assert ours == theirs, (major, sw, ours, theirs)
