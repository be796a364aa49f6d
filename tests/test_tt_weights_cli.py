"""otpu-tt convert / weights info / weights check / upload from the command line: output, JSON, the
precision gate, exit codes, and every bad input refused by name without a traceback."""
import json
import struct
import zlib

import gguf
import numpy as np
import pytest

from otpu_core.cli import run_app
from otpu_core.tt.simdev import sim_dir
from otpu_tt.cli import app

from test_tt_fttw_format import write_gguf


def run(args, capsys):
    code = run_app(app, "otpu-tt", [str(a) for a in args])
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    return code, out.out, out.err


def tiny_model(rng, layers=2, dim=64, ff=96, vocab=100):
    t = {"token_embd.weight": rng.standard_normal((vocab, dim)).astype(np.float16),
         "output_norm.weight": np.ones(dim, np.float32)}
    for i in range(layers):
        t[f"blk.{i}.attn_norm.weight"] = (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32)
        t[f"blk.{i}.attn_q.weight"] = rng.standard_normal((dim, dim)).astype(np.float32)
        t[f"blk.{i}.ffn_up.weight"] = rng.standard_normal((ff, dim)).astype(np.float16)
        q = gguf.quants.quantize(rng.standard_normal((dim, ff)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
        t[f"blk.{i}.ffn_down.weight"] = (q, gguf.GGMLQuantizationType.Q8_0)
    t["output.weight"] = rng.standard_normal((vocab, dim)).astype(np.float32)
    return t


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(path, tiny_model(np.random.default_rng(0)))
    return path


def converted(tmp_path, model, capsys, *extra):
    out = tmp_path / "m.fttw"
    code, _, err = run(["convert", model, out, *extra], capsys)
    assert code == 0, err
    return out


def test_convert_info_check_round_trip(tmp_path, model, capsys):
    ledger = tmp_path / "ledger.toml"
    ledger.write_text('[[tensor]]\nmatch = "token_embd.weight"\nformat = "bf16"\n\n'
                      '[[tensor]]\nmatch = "blk.*.ffn_down.weight"\nformat = "Bfp4_b"\nmin_pcc = 0.98\n')
    out = tmp_path / "m.fttw"
    code, text, _ = run(["convert", model, out, "--ledger", ledger, "--json"], capsys)
    summary = json.loads(text)
    assert code == 0 and summary["tensors"] == 11 and summary["by_format"]["Bfp4_b"]["tensors"] == 2
    assert summary["by_format"]["Float32"]["tensors"] == 3 and summary["by_format"]["Float16_b"]["tensors"] == 1
    code, text, _ = run(["weights", "info", out, "--json"], capsys)
    info = json.loads(text)
    by = {e["name"]: e for e in info["entries"]}
    assert code == 0 and info["version"] == 1 and len(by) == 11
    assert by["token_embd.weight"]["layout"] == "SOURCE" and by["token_embd.weight"]["format"] == "Float16_b"
    assert by["blk.0.ffn_up.weight"]["layout"] == "MATMUL_NMAJOR" and by["blk.0.ffn_up.weight"]["format"] == "Bfp8_b"
    assert by["blk.0.ffn_up.weight"]["tile_rows"] == 2 and by["blk.0.ffn_up.weight"]["tile_cols"] == 3     # K x N tiles
    assert by["blk.1.ffn_down.weight"]["source_type"] == "Q8_0" and by["blk.1.ffn_down.weight"]["min_pcc"] == 0.98
    assert by["output_norm.weight"]["layout"] == "FLAT" and by["output_norm.weight"]["shape"] == [64]
    assert all(e["offset"] % 64 == 0 and e["dram_addr"] % 64 == 0 for e in by.values())
    assert len({e["bank"] for e in by.values()}) == 8          # spread over every bank
    code, text, _ = run(["weights", "info", out], capsys)
    assert code == 0 and "MATMUL_NMAJOR" in text and "token_embd.weight" in text
    code, text, _ = run(["weights", "check", out, model, "--json"], capsys)
    report = json.loads(text)
    assert code == 0 and report["failed"] == 0 and report["tensors"] == 11
    rows = {r["name"]: r for r in report["results"]}
    assert rows["blk.0.attn_norm.weight"]["max_abs"] == 0.0 and rows["blk.0.attn_norm.weight"]["pcc"] == pytest.approx(1.0)
    assert 0.99990 < report["worst"]["Bfp8_b"]["pcc"] < 1.0 and 0.98 < report["worst"]["Bfp4_b"]["pcc"] < 0.999
    assert 0 < rows["blk.0.attn_q.weight"]["max_abs"] < 0.07
    code, text, _ = run(["weights", "check", out, model], capsys)
    assert code == 0 and "11 tensors: 11 pass, 0 fail" in text and "worst Bfp4_b PCC" in text


def test_the_gate_fails_a_tensor_under_its_threshold(tmp_path, model, capsys):
    ledger = tmp_path / "strict.toml"
    ledger.write_text('[[tensor]]\nmatch = "blk.1.attn_q.weight"\nformat = "bfp4"\nmin_pcc = 0.9999\n\n'
                      '[[tensor]]\nmatch = "output.weight"\nmax_abs = 0.001\n')
    out = converted(tmp_path, model, capsys, "--ledger", ledger)
    code, text, _ = run(["weights", "check", out, model, "--json"], capsys)
    report = json.loads(text)
    failed = {r["name"]: r["problem"] for r in report["results"] if not r["passed"]}
    assert code == 1 and set(failed) == {"blk.1.attn_q.weight", "output.weight"}
    assert "under 0.9999" in failed["blk.1.attn_q.weight"] and "over 0.001" in failed["output.weight"]
    code, text, _ = run(["weights", "check", out, model], capsys)
    assert code == 1 and "FAIL" in text and "2 fail" in text


def test_upload_lands_where_the_directory_says(tmp_path, model, capsys):
    out = converted(tmp_path, model, capsys, "--default", "bfp4")
    code, text, _ = run(["upload", out, "--dev", "tt:sim:w", "--verify", "--json"], capsys)
    result = json.loads(text)
    assert code == 0 and result["tensors"] == 11 and result["verified"] and result["dev"] == "tt:sim:w"
    info = json.loads(run(["weights", "info", out, "--json"], capsys)[1])
    blob = out.read_bytes()
    banks = sim_dir("w") / "dram"
    for e in info["entries"]:             # read the simulated GDDR files directly, not through the NoC
        with open(banks / f"bank{e['bank']}.bin", "rb") as f:
            f.seek(e["dram_addr"])
            assert f.read(e["nbytes"]) == blob[e["offset"]:e["offset"] + e["nbytes"]], e["name"]
    head = 64 + 256 * info["tensors"]
    with open(banks / "bank0.bin", "rb") as f:
        assert f.read(head) == blob[:head]
    code, text, _ = run(["upload", out, "--dev", "tt:sim:w"], capsys)
    assert code == 0 and "11 tensors" in text and "DRAM banks" in text


def _rewrite_header(path, **fields):
    data = bytearray(path.read_bytes())
    if "version" in fields:
        struct.pack_into("<I", data, 4, fields["version"])
    struct.pack_into("<I", data, 60, zlib.crc32(bytes(data[:60])))
    path.write_bytes(bytes(data))


def test_bad_fttw_files_exit_2_naming_the_problem(tmp_path, model, capsys):
    out = converted(tmp_path, model, capsys)
    good = out.read_bytes()
    cases = {"truncated": good[:len(good) - 100], "short": good[:40], "magic": b"NOPE" + good[4:],
             "gguf": model.read_bytes()}
    flipped = bytearray(good)
    flipped[64 + 10] ^= 0xFF                     # a byte of the first tensor's name
    cases["directory"] = bytes(flipped)
    flipped = bytearray(good)
    flipped[20] ^= 0x01                          # the alignment field, header CRC not updated
    cases["header"] = bytes(flipped)
    expected = {"truncated": "truncated: the header says", "short": "truncated", "magic": "not an FTTW file",
                "gguf": "not an FTTW file (a GGUF model", "directory": "directory checksum mismatch",
                "header": "header checksum mismatch"}
    for what, data in cases.items():
        bad = tmp_path / f"{what}.fttw"
        bad.write_bytes(data)
        for cmd in (["weights", "info", bad], ["upload", bad, "--dev", "tt:sim:x"], ["weights", "check", bad, model]):
            code, _, err = run(cmd, capsys)
            assert code == 2 and str(bad) in err and expected[what] in err, (what, cmd, err)
    newer = tmp_path / "newer.fttw"
    newer.write_bytes(good)
    _rewrite_header(newer, version=2)
    code, _, err = run(["weights", "info", newer], capsys)
    assert code == 2 and "version 2 is newer than this tool reads (up to 1)" in err
    code, _, err = run(["weights", "info", tmp_path / "absent.fttw"], capsys)
    assert code == 2 and "no such FTTW file" in err


def test_corrupt_tensor_data_is_caught_by_check_and_upload(tmp_path, model, capsys):
    out = converted(tmp_path, model, capsys)
    info = json.loads(run(["weights", "info", out, "--json"], capsys)[1])
    e = next(x for x in info["entries"] if x["name"] == "blk.0.ffn_up.weight")
    data = bytearray(out.read_bytes())
    data[e["offset"] + 100] ^= 0x10
    out.write_bytes(bytes(data))
    code, text, _ = run(["weights", "check", out, model, "--json"], capsys)
    bad = [r for r in json.loads(text)["results"] if not r["passed"]]
    assert code == 1 and [r["name"] for r in bad] == ["blk.0.ffn_up.weight"] and "CRC-32" in bad[0]["problem"]
    code, _, err = run(["upload", out, "--dev", "tt:sim:c"], capsys)
    assert code == 2 and "'blk.0.ffn_up.weight' does not match its CRC-32" in err


def test_bad_inputs_to_convert_exit_2_and_write_nothing(tmp_path, model, capsys):
    out = tmp_path / "o.fttw"
    code, _, err = run(["convert", tmp_path / "none.gguf", out], capsys)
    assert code == 2 and "no such GGUF file" in err
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"hello world" * 10)
    code, _, err = run(["convert", junk, out], capsys)
    assert code == 2 and "not a GGUF file" in err
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model.read_bytes()[:-5000])
    code, _, err = run(["convert", cut, out], capsys)
    assert code == 2 and str(cut) in err and "truncated" in err
    nan = tmp_path / "nan.gguf"
    w = np.ones((40, 64), np.float32)
    w[33, 5] = np.nan
    write_gguf(nan, {"a.weight": np.ones((32, 32), np.float32), "bad.weight": w})
    code, _, err = run(["convert", nan, out], capsys)
    assert code == 2 and "'bad.weight'" in err and "row 33, column 5" in err
    assert not out.exists() and not (tmp_path / "o.fttw.partial").exists()
    code, _, err = run(["convert", model, out, "--default", "bfp16"], capsys)
    assert code == 2 and "--default bfp16" in err
    code, _, err = run(["convert", model, tmp_path / "nodir" / "o.fttw"], capsys)
    assert code == 2 and "does not exist" in err
    code, _, err = run(["convert", model, model], capsys)
    assert code == 2 and "is the model itself" in err and model.read_bytes()[:4] == b"GGUF"
    assert not out.exists()


@pytest.mark.parametrize("text,expected", [
    ('[[tensor]]\nmatch = "*"\nformat = "bfp16"\n', "tensor rule 1 (match '*'): format = 'bfp16' is not one of fp32, bf16"),
    ('[[tensor]]\nmatch = "*"\nlayout = "tiled"\n', "layout = 'tiled' is not one of source, nmajor"),
    ('[[tensor]]\nformat = "bfp8"\n', "tensor rule 1: needs match"),
    ('[[tensor]]\nmatch = "*"\nmin_pcc = 2\n', "min_pcc = 2: a PCC threshold is a number from -1 to 1"),
    ('[[tensor]]\nmatch = "*"\nprecision = "bfp8"\n', "unknown key 'precision'; allowed: match, format"),
    ('[gate]\nbfp9 = 0.9\n', "[gate] key 'bfp9' is not a format"),
    ('defaults = 1\n', "unknown key 'defaults'"),
    ('[[tensor]\n', "not valid TOML"),
])
def test_ledger_mistakes_are_named(tmp_path, model, capsys, text, expected):
    ledger = tmp_path / "bad.toml"
    ledger.write_text(text)
    code, _, err = run(["convert", model, tmp_path / "o.fttw", "--ledger", ledger], capsys)
    assert code == 2 and str(ledger) in err and expected in err, err


def test_a_ledger_rule_that_matches_nothing_is_warned_about(tmp_path, model, capsys):
    ledger = tmp_path / "typo.toml"
    ledger.write_text('[[tensor]]\nmatch = "blk.*.ffn_dwn.weight"\nformat = "bfp4"\n')
    code, _, err = run(["convert", model, tmp_path / "o.fttw", "--ledger", ledger], capsys)
    assert code == 0 and "ledger rule 1 (match 'blk.*.ffn_dwn.weight') matched no tensor" in err


def test_help_names_the_weight_commands(capsys):
    code, text, _ = run(["--help"], capsys)
    assert code == 0 and all(c in text for c in ("convert", "upload", "weights"))
    code, text, _ = run(["weights", "--help"], capsys)
    assert code == 0 and "info" in text and "check" in text


@pytest.mark.slow
@pytest.mark.parametrize("fmt,floor", [("bfp8", 0.9999), ("bfp4", 0.985)])
def test_gate_over_a_219_tensor_model(tmp_path, capsys, fmt, floor):
    """The seed's gate table: 24 layers of 9 tensors plus 3 (219), Gaussian weights; the worst
    tensor's PCC is where the seed found it (Bfp8 0.999967, Bfp4 0.991455)."""
    rng = np.random.default_rng(21)
    dim, ff = 64, 128
    t = {"token_embd.weight": (0.02 * rng.standard_normal((256, dim))).astype(np.float16),
         "output_norm.weight": np.ones(dim, np.float32),
         "output.weight": (0.02 * rng.standard_normal((256, dim))).astype(np.float16)}
    for i in range(24):
        for n in ("attn_norm", "ffn_norm"):
            t[f"blk.{i}.{n}.weight"] = (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32)
        for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t[f"blk.{i}.{n}.weight"] = (0.02 * rng.standard_normal((dim, dim))).astype(np.float16)
        t[f"blk.{i}.ffn_gate.weight"] = (0.02 * rng.standard_normal((ff, dim))).astype(np.float16)
        t[f"blk.{i}.ffn_up.weight"] = (0.02 * rng.standard_normal((ff, dim))).astype(np.float16)
        t[f"blk.{i}.ffn_down.weight"] = (0.02 * rng.standard_normal((dim, ff))).astype(np.float16)
    assert len(t) == 219
    write_gguf(tmp_path / "m.gguf", t)
    out = converted(tmp_path, tmp_path / "m.gguf", capsys, "--default", fmt)
    code, text, _ = run(["weights", "check", out, tmp_path / "m.gguf", "--json"], capsys)
    report = json.loads(text)
    worst = report["worst"][{"bfp8": "Bfp8_b", "bfp4": "Bfp4_b"}[fmt]]
    print(f"{fmt}: worst PCC {worst['pcc']:.6f} ({worst['name']}), max-abs {worst['max_abs']:.4g} over 219 tensors")
    assert code == 0 and report["tensors"] == 219 and report["failed"] == 0
    assert floor < worst["pcc"] < 1.0 and 0 < worst["max_abs"] < 0.03


@pytest.mark.parametrize("args,named", [
    (["convert", "{m}", ""], "OUT.fttw ''"), (["convert", "", "{o}"], "MODEL.gguf ''"),
    (["convert", "{m}", "{o}", "--ledger", ""], "--ledger ''"), (["weights", "info", ""], "FILE ''"),
    (["weights", "check", "{o}", ""], "MODEL.gguf ''"), (["upload", "", "--dev", "tt:sim:e"], "FILE ''")])
def test_an_empty_path_is_refused_by_name_not_read_as_the_current_directory(tmp_path, model, capsys, args, named):
    code, _, err = run([a.format(m=model, o=tmp_path / "o.fttw") for a in args], capsys)
    assert code == 2 and f"{named}: empty" in err


def test_a_full_disk_fails_before_the_work_naming_the_file(tmp_path, model, capsys, monkeypatch):
    """The output is allocated first: no room is exit 2 naming OUT and the size, and nothing is
    left; a file system without fallocate still gets the same file."""
    import errno
    import os
    out = tmp_path / "o.fttw"
    code, _, _ = run(["convert", model, out], capsys)
    assert code == 0
    want = out.read_bytes()
    out.unlink()

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "posix_fallocate", full)
    code, _, err = run(["convert", model, out], capsys)
    assert code == 2 and str(out) in err and "No space left on device" in err and f"needs {len(want)} bytes" in err
    assert not out.exists() and not (tmp_path / "o.fttw.partial").exists()

    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    code, _, _ = run(["convert", model, out], capsys)
    assert code == 0 and out.read_bytes() == want
