"""Gemma 4's per-layer embedding table served from the checkpoint's own file (checkpoint.RowTable): every row the
host hands the card is the float32 of the file's values, decoded here independently (numpy's float16, bfloat16's
16-bit shift, gguf's own Q8_0 dequantiser), with nothing of the table converted or cached."""
import llmtiny
import numpy as np
import pytest

from otpu_core.llm import checkpoint, convert, synthetic
from otpu_core.target import load as load_target


def _bf16(a):
    return ((np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16) << 16).view(np.float32)


@pytest.mark.parametrize("kind, stored", [("gguf", "F16"), ("gguf", "BF16"), ("gguf", "Q8_0"), ("gguf", "F32"),
                                          ("hf", "BF16"), ("hf", "F16")])
def test_served_rows_are_the_files_values_as_float32(tmp_path, kind, stored):
    import gguf
    cfg = llmtiny.config("gemma4")
    w = synthetic.random_weights(cfg, 3)
    if kind == "gguf":
        path = synthetic.write_gguf(tmp_path / "g.gguf", cfg, w, llmtiny.tokenizer(), types={"ple": stored})
        ple = w["ple"]
        qt = gguf.GGMLQuantizationType[stored]      # BF16 and Q8_0 as gguf's own quantiser wrote them
        want = {"F16": lambda: ple.astype(np.float16).astype(np.float32), "F32": lambda: ple}.get(
            stored, lambda: gguf.quants.dequantize(gguf.quants.quantize(ple, qt), qt))()
    else:
        path = synthetic.write_hf(tmp_path / "h", cfg, w, llmtiny.tokenizer(), dtype=stored)
        want = _bf16(w["ple"]) if stored == "BF16" else w["ple"].astype(np.float16).astype(np.float32)
    ck = checkpoint.open_checkpoint(path)
    conv = convert.convert(ck, "int8", load_target("sim-small"), cache=False)
    table = conv.tensors["ple"]
    assert isinstance(table, checkpoint.RowTable) and table.stored == stored and len(table) == cfg.vocab
    assert "ple" not in __import__("json").loads((conv.path / "index.json").read_text())["tensors"]
    whole = ck.get("ple")
    for i in (0, 1, 17, cfg.vocab - 1):
        row = table[i]
        assert row.dtype == np.float32 and np.array_equal(row.view(np.uint32), want[i].view(np.uint32)), (stored, i)
        assert np.array_equal(row.view(np.uint32), whole[i].view(np.uint32))
    with pytest.raises(IndexError, match=f"row {cfg.vocab} of ple"):
        table[cfg.vocab]


def test_a_row_that_is_not_finite_is_refused_by_tensor_and_place(tmp_path):
    from otpu_core.llm.errors import ModelError
    cfg = llmtiny.config("gemma4")
    w = synthetic.random_weights(cfg, 3)
    w["ple"][5, 7] = np.nan
    ck = checkpoint.open_checkpoint(synthetic.write_gguf(tmp_path / "g.gguf", cfg, w, llmtiny.tokenizer()))
    table = checkpoint.RowTable(ck, "ple")
    assert np.isfinite(table[4]).all()
    with pytest.raises(ModelError, match=r"g.gguf: tensor 'ple' holds nan at \[5, 7\]"):
        table[5]
