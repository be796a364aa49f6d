"""Random `ol` programs: generated kernel source (nested expressions, so peepholes can fire),
compiled with peepholes on and off and run on the golden simulator. Both runs must give the
same bits, and the same bits as an independent model of the same expressions built from
otpu_core.fp32 (the machine's arithmetic definition), which checks operand modes, swaps,
in-place updates and every fusion."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from otpu_core import fp32 as F
from otpu_core import ol
from otpu_core.ol.runtime import Image

T = "sim-small"
ROWS, COLS = 3, 40

# template, result kind, model; operands: m = matrix (ROWS, COLS), r = per-row (ROWS,), c = per-column (COLS,)
OPS = [
    ("{m0} + {m1}", "m", lambda m0, m1, r0, c0: F.add(m0, m1)),
    ("{m0} - {m1}", "m", lambda m0, m1, r0, c0: F.sub(m0, m1)),
    ("{m0} * {m1}", "m", lambda m0, m1, r0, c0: F.mul(m0, m1)),
    ("ol.maximum({m0}, {m1})", "m", lambda m0, m1, r0, c0: F.fmax(m0, m1)),
    ("{m0} * {r0}[:, None]", "m", lambda m0, m1, r0, c0: F.mul(m0, r0[:, None])),
    ("{m0} - {c0}[None, :]", "m", lambda m0, m1, r0, c0: F.sub(m0, c0[None, :])),
    ("0.5 - {m0}", "m", lambda m0, m1, r0, c0: F.sub(np.float32(0.5), m0)),
    ("ol.exp2({m0} - {r0}[:, None])", "m", lambda m0, m1, r0, c0: F.exp2(F.sub(m0, r0[:, None]))),
    ("ol.exp2({m0} - {m1})", "m", lambda m0, m1, r0, c0: F.exp2(F.sub(m0, m1))),
    ("ol.recip(ol.abs({m0}) + 1.0)", "m", lambda m0, m1, r0, c0: F.recip(F.add(F.fabs(m0), np.float32(1.0)))),
    ("{r0}[:, None] - {c0}[None, :]", "m", lambda m0, m1, r0, c0: F.sub(r0[:, None], c0[None, :])),
    ("ol.sum({m0} * {m1})", "r", lambda m0, m1, r0, c0: F.rdot(m0, m1)),
    ("ol.sum({m0} * {m0})", "r", lambda m0, m1, r0, c0: F.rssq(m0)),
    ("ol.sum({m0} * {c0}[None, :])", "r", lambda m0, m1, r0, c0: F.rdot(m0, c0[None, :])),
    ("ol.max({m0})", "r", lambda m0, m1, r0, c0: F.chain_max(m0)),
    ("ol.sum({m0})", "r", lambda m0, m1, r0, c0: F.rsum(m0)),
    ("ol.rsqrt({r0} * {r0} + 1.0)", "r", lambda m0, m1, r0, c0: F.rsqrt(F.add(F.mul(r0, r0), np.float32(1.0)))),
]


def _pick(vals, kind, i):
    names = [n for n, k in vals if k == kind]
    return names[i % len(names)]


def _program(steps):
    """Kernel source plus the list of (name, kind) values it stores, and a model evaluator."""
    vals = [("m_a", "m"), ("m_b", "m"), ("r_a", "r"), ("c_a", "c")]
    lines, plan = [], []
    for n, (op, i, j, k, inplace) in enumerate(steps):
        template, kind, model = OPS[op % len(OPS)]
        m0, m1, r0 = _pick(vals, "m", i), _pick(vals, "m", j), _pick(vals, "r", k)
        c0 = "c_a"
        expr = template.format(m0=m0, m1=m1, r0=r0, c0=c0)
        name = f"v{n}"
        same_kind = [v for v, kk in vals if kk == kind and v.startswith("v")]
        if inplace and same_kind:
            name = same_kind[-1]
            lines.append(f"    {name}.set({expr})")
        else:
            lines.append(f"    {name} = {expr}")
            vals.append((name, kind))
        plan.append((name, kind, model, (m0, m1, r0, c0)))
    outs = [v for v, _ in vals if v.startswith("v")]
    src = ["def kernel(A, B, R, C, " + ", ".join(f"o_{v}" for v in outs) + "):",
           "    m_a, m_b, r_a, c_a = ol.load(A), ol.load(B), ol.load(R), ol.load(C)"]
    src += lines + [f"    ol.store(o_{v}, {v})" for v in outs]
    return "\n".join(src) + "\n", outs, dict(vals), plan


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 9), st.integers(0, 9), st.integers(0, 9),
                                st.booleans()), min_size=1, max_size=7),
       seed=st.integers(0, 2**16))
def test_random_programs_same_bits_with_and_without_peepholes_and_as_the_model(steps, seed):
    src, outs, kinds, plan = _program(steps)
    ns = {"ol": ol}
    exec(compile(src, "<random ol program>", "exec"), ns)
    rng = np.random.default_rng(seed)
    data = {"A": rng.standard_normal((ROWS, COLS)).astype(np.float32),
            "B": rng.standard_normal((ROWS, COLS)).astype(np.float32),
            "R": rng.standard_normal(ROWS).astype(np.float32), "C": rng.standard_normal(COLS).astype(np.float32)}
    shapes = {"m": (ROWS, COLS), "r": (ROWS,)}
    results = {}
    for peepholes in (True, False):
        img = Image(T)
        args = {k: img.tensor(v) for k, v in data.items()}
        args.update({f"o_{v}": img.tensor(shape=shapes[kinds[v]]) for v in outs})
        prog = ol.compile_kernel(ns["kernel"], T, peepholes=peepholes, **args)
        m = img.run(prog)
        results[peepholes] = {v: img.read(args[f"o_{v}"], m).view(np.uint32) for v in outs}
    env = {"m_a": F.as_bits(data["A"]), "m_b": F.as_bits(data["B"]), "r_a": F.as_bits(data["R"]),
           "c_a": F.as_bits(data["C"])}
    for name, kind, model, (m0, m1, r0, c0) in plan:
        env[name] = np.asarray(model(env[m0], env[m1], env[r0], env[c0]), np.uint32)
    for v in outs:
        assert np.array_equal(results[True][v], results[False][v]), (v, src)
        assert np.array_equal(results[True][v], env[v].reshape(results[True][v].shape)), (v, src)
