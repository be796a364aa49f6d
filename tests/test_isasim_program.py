"""A whole program on the simulator: RMSNorm, a quantised matmul and SiLU, against float64."""
import numpy as np

from otpu_core import formats, isa
from otpu_core.asm import assemble
from otpu_core.isasim import Machine

D = 32
ROWS, K, N = 3, 64, 48
X_DRAM, W_DRAM, S_DRAM, Y_DRAM = 0x1000, 0x10000, 0x40000, 0x50000
LOG2E = float(np.float32(np.log2(np.e)))

PROGRAM = f"""
    ld dram=r8 tmem=0 n={ROWS * K}                                       # x [3, 64]
    vop.rssq dst=200 a=0 rows={ROWS} cols={K} drs=1 ars={K}             # sum of squares per row
    vop.mul dst=200 a=200 rows={ROWS} cols=1 drs=1 ars=1 bmode=scalar imm={1 / K}
    vop.add dst=200 a=200 rows={ROWS} cols=1 drs=1 ars=1 bmode=scalar imm=1e-6
    vop.rsqrt dst=200 a=200 rows={ROWS} cols=1 drs=1 ars=1               # 1 / rms
    qact src=0 rows={ROWS} ab=0 kb={K // D} srs={K} rscale_addr=200 rscale
    mm sa=r9 ssa=r10 out=400 n={N} kb={K // D} rs={K} srs={4 * K // D} m={ROWS} ors={N + 1}
    vop.mul dst=800 a=400 rows={ROWS} cols={N} drs={N} ars={N + 1} bmode=scalar imm={-LOG2E}
    vop.exp2 dst=800 a=800 rows={ROWS} cols={N} drs={N} ars={N}
    vop.add dst=800 a=800 rows={ROWS} cols={N} drs={N} ars={N} bmode=scalar imm=1.0
    vop.recip dst=800 a=800 rows={ROWS} cols={N} drs={N} ars={N}
    vop.mul dst=800 a=800 b=400 rows={ROWS} cols={N} drs={N} ars={N} brs={N + 1}   # h * sigmoid(h)
    st dram=r11 tmem=800 n={ROWS * N}
    halt
"""


def test_rmsnorm_matmul_silu_program_against_float64():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((ROWS, K)).astype(np.float32) * 3
    w = rng.standard_normal((N, K))
    pw = formats.quantize(w, isa.WF_INT8, D)
    m = Machine("sim-small")
    m.write_dram(X_DRAM, x)
    m.write_dram(W_DRAM, pw.rows)
    m.write_dram(S_DRAM, pw.scales)
    m.load(assemble(PROGRAM), [X_DRAM, W_DRAM, S_DRAM, Y_DRAM])
    m.run()
    got = m.read_dram(Y_DRAM, 4 * ROWS * N).view(np.float32).reshape(ROWS, N).astype(np.float64)
    x64 = x.astype(np.float64)
    normed = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-6)
    h = normed @ w.T
    ref = h / (1 + np.exp(-h))
    err = np.abs(got - ref).max()
    cos = (got.ravel() @ ref.ravel()) / np.linalg.norm(got) / np.linalg.norm(ref)
    # int8 activations and weights: about 1% error on h, none added by the fp32 pipeline
    assert cos > 0.9995 and err < 0.05 * np.abs(ref).max(), (err, cos)
    c = m.counters()
    assert c["ICOUNT"] == 14 and c["MXU_MAC"] == N * (K // D) and c["CYCLES"] > c["VPU_BUSY"] > 0
