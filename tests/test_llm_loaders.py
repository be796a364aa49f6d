"""Model files: configs from config.json and GGUF metadata, GGUF dequantisation against the ggml
block formulas written out here, llama.cpp's permuted q/k undone, safetensors dtypes, and every
loader error named (and exit 2 through the CLI, no traceback)."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

import llmtiny
from otpu_core.llm import checkpoint, families
from otpu_core.llm.errors import ModelError


# -- configs ------------------------------------------------------------------------------------------

def test_unknown_architecture_is_refused_by_name(tmp_path):
    cfg = llmtiny.config()
    d, _ = llmtiny.write(tmp_path, cfg)
    c = json.loads((d / "config.json").read_text())
    c["architectures"] = ["MambaForCausalLM"]
    (d / "config.json").write_text(json.dumps(c))
    with pytest.raises(ModelError, match="architecture 'MambaForCausalLM' is not supported") as e:
        checkpoint.open_checkpoint(d)
    assert "Qwen3ForCausalLM" in e.value.hint


def test_gguf_and_hf_configs_agree(tmp_path):
    for fam in ("qwen3", "llama", "smollm3"):
        cfg = llmtiny.config(fam, D=32, rope_theta=50000.0)
        g, _ = llmtiny.write(tmp_path, cfg, "gguf")
        h, _ = llmtiny.write(tmp_path, cfg, "hf")
        a, b = checkpoint.open_checkpoint(g).config, checkpoint.open_checkpoint(h).config
        for k in ("family", "vocab", "d", "layers", "heads", "kv_heads", "head_dim", "ffn", "norm_eps", "rope_theta",
                  "nope_layers", "tied"):
            want = getattr(b, k)
            assert getattr(a, k) == (pytest.approx(want, rel=1e-7) if isinstance(want, float) else want), (fam, k)
        assert a.nope_layers == ((3,) if fam == "smollm3" else ())


def _hf_llama3_inv_freq(theta, dim, factor, low, high, old):
    """transformers' _compute_llama3_parameters, written out in numpy."""
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, inv_freq_llama)


def test_llama3_rope_scaling_matches_transformers_formula(tmp_path):
    sc = dict(llmtiny.LLAMA3_SCALING)
    cfg = llmtiny.config("llama", D=32, rope_theta=500000.0)
    for kind in ("hf", "gguf"):
        p, _ = llmtiny.write(tmp_path, cfg, kind, rope_scaling=sc)
        got = checkpoint.open_checkpoint(p).config.inv_freq()
        want = _hf_llama3_inv_freq(500000.0, 32, 8.0, 1.0, 4.0, 64)
        assert np.allclose(got, want, rtol=1e-6, atol=0), kind      # gguf stores the factors as F32
        assert not np.allclose(want, 1.0 / 500000.0 ** (np.arange(0, 32, 2) / 32))   # the scaling did something


# -- GGUF tensors -------------------------------------------------------------------------------------

def _f16(b):
    return np.frombuffer(bytes(b), np.float16).astype(np.float64)


def _ref_q8_0(raw):       # 34-byte blocks: fp16 d, 32 int8
    blk = raw.reshape(-1, 34)
    return (_f16(blk[:, :2].tobytes())[:, None] * blk[:, 2:].view(np.int8)).reshape(-1)


def _ref_q4_0(raw):       # 18-byte blocks: fp16 d, 16 bytes: low nibbles are elements 0..15
    blk = raw.reshape(-1, 18)
    d = _f16(blk[:, :2].tobytes())[:, None]
    q = blk[:, 2:]
    return (d * (np.concatenate([q & 15, q >> 4], axis=1).astype(np.float64) - 8)).reshape(-1)


def _scale_min_k4(j, s):
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def _ref_q4_k(raw):       # 144-byte super-blocks of 256
    out = []
    for blk in raw.reshape(-1, 144):
        d, dmin = _f16(blk[0:2])[0], _f16(blk[2:4])[0]
        sc, qs = blk[4:16], blk[16:144]
        y = np.zeros(256)
        for j in range(4):
            s1, m1 = _scale_min_k4(2 * j, sc)
            s2, m2 = _scale_min_k4(2 * j + 1, sc)
            q = qs[32 * j:32 * j + 32]
            y[64 * j:64 * j + 32] = d * s1 * (q & 0xF) - dmin * m1
            y[64 * j + 32:64 * j + 64] = d * s2 * (q >> 4) - dmin * m2
        out.append(y)
    return np.concatenate(out)


def _ref_q6_k(raw):       # 210-byte super-blocks: ql[128], qh[64], scales[16] int8, fp16 d
    out = []
    for blk in raw.reshape(-1, 210):
        ql, qh, sc, d = blk[:128], blk[128:192], blk[192:208].view(np.int8), _f16(blk[208:210])[0]
        y = np.zeros(256)
        for half in range(2):
            l8, h8, s8, n = ql[64 * half:], qh[32 * half:], sc[8 * half:], 128 * half
            for l in range(32):
                i = l // 16
                q1 = int((l8[l] & 0xF) | (((h8[l] >> 0) & 3) << 4)) - 32
                q2 = int((l8[l + 32] & 0xF) | (((h8[l] >> 2) & 3) << 4)) - 32
                q3 = int((l8[l] >> 4) | (((h8[l] >> 4) & 3) << 4)) - 32
                q4 = int((l8[l + 32] >> 4) | (((h8[l] >> 6) & 3) << 4)) - 32
                y[n + l], y[n + l + 32] = d * s8[i] * q1, d * s8[i + 2] * q2
                y[n + l + 64], y[n + l + 96] = d * s8[i + 4] * q3, d * s8[i + 6] * q4
        out.append(y)
    return np.concatenate(out)


REFS = {"Q8_0": _ref_q8_0, "Q4_0": _ref_q4_0, "Q4_K": _ref_q4_k, "Q6_K": _ref_q6_k}


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K"])
def test_gguf_types_dequantise_like_the_ggml_formulas(tmp_path, qtype):
    from gguf import GGUFReader
    cfg = llmtiny.config("qwen3", D=128, d=256, heads=2, kv_heads=1, ffn=256)
    p, w = llmtiny.write(tmp_path, cfg, "gguf", types={"wg": qtype, "wu": qtype})
    ck = checkpoint.open_checkpoint(p)
    assert ck.raw_types["wg.0"] == qtype
    got = ck.get("wg.1").astype(np.float64)
    if qtype in REFS:
        raw = next(t for t in GGUFReader(str(p)).tensors if t.name == "blk.1.ffn_gate.weight").data
        want = REFS[qtype](np.asarray(raw, np.uint8).reshape(-1)).reshape(got.shape)
    else:
        dt = {"F32": np.float32, "F16": np.float16}.get(qtype)
        src = w["wg.1"]
        want = (src.astype(dt) if dt else ((src.view(np.uint32) + 0x7FFF + ((src.view(np.uint32) >> 16) & 1))
                                          & 0xFFFF0000).view(np.float32)).astype(np.float64)
    err = np.abs(got - want).max()
    assert err <= 1e-6 * max(1.0, np.abs(want).max()), (qtype, err)
    if qtype in ("Q8_0", "Q4_0", "F16", "BF16"):           # gguf's quantiser: close to the weights
        cos = float((got * w["wg.1"]).sum() / np.linalg.norm(got) / np.linalg.norm(w["wg.1"]))
        assert cos > (0.99 if qtype == "Q4_0" else 0.9999), (qtype, cos)


@pytest.mark.parametrize("family", ["llama", "smollm3", "qwen3"])
def test_gguf_q_k_rows_come_back_in_hugging_face_order(tmp_path, family):
    cfg = llmtiny.config(family, D=32)
    g, w = llmtiny.write(tmp_path, cfg, "gguf", types={"wq": "F32", "wk": "F32"})
    ck = checkpoint.open_checkpoint(g)
    assert families.by_name(family).gguf_permuted_qk == (family != "qwen3")
    for name in ("wq.0", "wk.1"):
        assert np.array_equal(ck.get(name), w[name]), name
    raw = next(t for t in __import__("gguf").GGUFReader(str(g)).tensors if t.name == "blk.0.attn_q.weight").data
    assert np.array_equal(raw, w["wq.0"]) == (family == "qwen3")       # the file itself holds permuted rows


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
def test_safetensors_dtypes(tmp_path, dtype):
    cfg = llmtiny.config("llama", D=32)
    d, w = llmtiny.write(tmp_path, cfg, "hf", dtype=dtype)
    ck = checkpoint.open_checkpoint(d)
    got, src = ck.get("wo.1"), w["wo.1"]
    tol = {"F32": 0, "F16": 1e-3, "BF16": 8e-3}[dtype]
    assert np.abs(got - src).max() <= tol * np.abs(src).max()
    assert ck.get("head").shape == (cfg.vocab, cfg.d)


def test_content_fingerprint_follows_the_bytes(tmp_path):
    cfg = llmtiny.config()
    p, _ = llmtiny.write(tmp_path, cfg, "gguf")
    a = checkpoint.open_checkpoint(p).fingerprint()
    assert checkpoint.open_checkpoint(p).fingerprint() == a
    (tmp_path / "b").mkdir()
    q, _ = llmtiny.write(tmp_path / "b", cfg, "gguf", seed=1)
    assert checkpoint.open_checkpoint(q).fingerprint() != a


# -- loader errors ------------------------------------------------------------------------------------

def _gguf(tmp_path, **kw):
    return llmtiny.write(tmp_path, llmtiny.config(**kw), "gguf")[0]


def test_truncated_gguf(tmp_path):
    p = _gguf(tmp_path)
    data = p.read_bytes()
    p.write_bytes(data[:len(data) - 1000])
    with pytest.raises(ModelError, match=r"truncated: tensor '.*' needs bytes up to \d+ but the file has"):
        checkpoint.open_checkpoint(p)


def test_wrong_magic(tmp_path):
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUX" + bytes(200))
    with pytest.raises(ModelError, match=r"not a GGUF file \(magic b'GGUX'"):
        checkpoint.open_checkpoint(p)


def test_missing_tensor(tmp_path):
    import gguf
    cfg = llmtiny.config()
    p, w = llmtiny.write(tmp_path, cfg, "gguf")
    src = gguf.GGUFReader(str(p))
    out = gguf.GGUFWriter(str(tmp_path / "cut.gguf"), "qwen3")
    for k, f in src.fields.items():
        if not k.startswith("GGUF.") and k != "general.architecture":
            vt = f.types[0]
            if vt == gguf.GGUFValueType.ARRAY:
                out.add_array(k, f.contents())
            else:
                out.add_key_value(k, f.contents(), vt)
    for t in src.tensors:
        if t.name != "blk.1.ffn_down.weight":
            out.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    out.write_header_to_file(), out.write_kv_data_to_file(), out.write_tensors_to_file(), out.close()
    with pytest.raises(ModelError, match="missing tensor 'blk.1.ffn_down.weight'"):
        checkpoint.open_checkpoint(tmp_path / "cut.gguf")


def test_shape_mismatch_and_config_that_disagrees(tmp_path):
    cfg = llmtiny.config()
    d, _ = llmtiny.write(tmp_path, cfg)
    c = json.loads((d / "config.json").read_text())
    c["num_key_value_heads"] = 4
    (d / "config.json").write_text(json.dumps(c))
    with pytest.raises(ModelError, match=r"tensor 'model.layers.0.self_attn.k_proj.weight' has shape \[64, 64\] "
                                         r"but the config needs \[128, 64\]"):
        checkpoint.open_checkpoint(d)
    c["num_key_value_heads"], c["vocab_size"] = 2, 999
    (d / "config.json").write_text(json.dumps(c))
    with pytest.raises(ModelError, match=r"'model.embed_tokens.weight' has shape \[\d+, 64\] but the config needs "
                                         r"\[999, 64\]"):
        checkpoint.open_checkpoint(d)


def test_unsupported_quantisation_type(tmp_path):
    cfg = llmtiny.config(D=128, d=256, heads=2, kv_heads=1, ffn=256)
    p, _ = llmtiny.write(tmp_path, cfg, "gguf", types={"wu": "Q5_K"})
    with pytest.raises(ModelError, match=r"tensor 'blk.0.ffn_up.weight' is stored as Q5_K") as e:
        checkpoint.open_checkpoint(p)
    assert "Q4_K" in e.value.hint


def test_missing_config_key_and_bad_json(tmp_path):
    d, _ = llmtiny.write(tmp_path, llmtiny.config())
    c = json.loads((d / "config.json").read_text())
    del c["intermediate_size"]
    (d / "config.json").write_text(json.dumps(c))
    with pytest.raises(ModelError, match=r"config.json: missing key 'intermediate_size'"):
        checkpoint.open_checkpoint(d)
    (d / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        checkpoint.open_checkpoint(d)


@pytest.mark.parametrize("edit,message", [
    ({"layer_types": ["full_attention", "sliding_attention"], "use_sliding_window": True, "sliding_window": 4},
     "layer_types[1] = 'sliding_attention' is not supported in a qwen3 model"),
    ({"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
     "use_sliding_window = true (sliding_window 4): sliding-window attention is not supported in a qwen3 model"),
])
def test_sliding_window_layers_are_refused_where_attention_is_full(tmp_path, edit, message):
    """transformers gives Qwen3's layers a window when layer_types (or use_sliding_window without it) says
    so; read as full attention they would be silently wrong past the window."""
    d, _ = llmtiny.write(tmp_path, llmtiny.config())
    c = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**c, **edit}))
    with pytest.raises(ModelError) as e:
        checkpoint.open_checkpoint(d)
    assert message in e.value.message and "config.json" in e.value.message
    (d / "config.json").write_text(json.dumps({**c, "layer_types": ["full_attention"] * 2, "use_sliding_window": False,
                                               "sliding_window": None}))
    assert checkpoint.open_checkpoint(d).config.kinds == ("attention",) * 2


def test_loader_errors_exit_2_without_traceback(tmp_path):
    p = _gguf(tmp_path)
    p.write_bytes(p.read_bytes()[:-1000])
    r = subprocess.run([sys.executable, "-m", "otpu_chat.cli", "convert", str(p)], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "otpu-chat: error:" in r.stderr and "truncated" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "otpu_chat.cli", "convert", str(tmp_path / "nope.gguf")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr
