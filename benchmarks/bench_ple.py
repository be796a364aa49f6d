"""Gemma 4 E2B's per-layer embedding table on the host: peak memory serving its rows from the file.

The table (262,144 x 35 x 256; 4.7 GB as BF16, 9.4 GB as float32) stays in the checkpoint's file
(`checkpoint.RowTable`): each row the card asks for is read alone and turned to float32. This
writes an E2B-shaped BF16 table as a safetensors file and as a GGUF (random bits), then in fresh
processes measures the peak RSS (VmHWM) growth of serving random rows through a `RowTable` over each
file's own row reader, against the baseline of reading the table whole as float32 (what the
conversion did before: `ckpt.get("ple")`), measured on a slice of `--whole-rows` rows and scaled
by rows (the float32 copy and its temporaries grow with the rows).

Run: python benchmarks/bench_ple.py [--rows 262144] [--whole-rows 16384] [--serve 1000] [--dir D]
(needs about 2 x 4.7 GB of disk at E2B's rows; the files are removed unless --keep).
"""
from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PLE_COLS = 35 * 256                  # E2B: 35 layers of 256-wide per-layer inputs
HF_NAME = "model.embed_tokens_per_layer.weight"
GGUF_NAME = "per_layer_token_embd.weight"


def write_tables(d: Path, rows: int) -> tuple[Path, Path]:
    """A BF16 [rows, PLE_COLS] table of random bits as safetensors, and the same bytes as a GGUF."""
    import gguf
    st, gg = d / f"ple_{rows}.safetensors", d / f"ple_{rows}.gguf"
    head = json.dumps({HF_NAME: {"dtype": "BF16", "shape": [rows, PLE_COLS],
                                 "data_offsets": [0, rows * PLE_COLS * 2]}}).encode()
    head += b" " * (-len(head) % 8)
    rng = np.random.default_rng(0)
    with open(st, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for r in range(0, rows, 4096):
            bits = rng.integers(0, 0x7f00, (min(4096, rows - r), PLE_COLS), dtype=np.uint16)
            f.write(bits.tobytes())            # positive, exponent below 0xff: finite values only
    data = np.memmap(st, dtype=np.uint16, mode="r", offset=8 + len(head), shape=(rows, PLE_COLS))
    w = gguf.GGUFWriter(str(gg), "gemma4")
    w.add_tensor(GGUF_NAME, data, raw_shape=(rows, PLE_COLS), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return st, gg


def _table(path: Path, rows: int):
    """A RowTable over the file's own row reader (the loaders wire the same readers into a Checkpoint)."""
    from bench_llm import GEMMA4_E2B

    from otpu_core.llm.checkpoint import Checkpoint, RowTable, TokenizerSource
    if path.suffix == ".gguf":
        from otpu_core.gguf_source import GgufModel
        src = GgufModel(path)
        t = next(x for x in src.tensors if x.name == GGUF_NAME)
        read_rows = lambda name, start, n: src.read_rows(t, start, n)      # noqa: E731
    else:
        from otpu_core.llm.safetensors_file import _Files
        files = _Files({HF_NAME: path})
        read_rows = lambda name, start, n: files.read_rows(HF_NAME, start, n)   # noqa: E731
    cfg = GEMMA4_E2B.with_(vocab=rows)
    ck = Checkpoint(path, path.suffix, cfg, [path], lambda name: read_rows(name, 0, rows), {"ple": "BF16"},
                    TokenizerSource(), rows=read_rows)
    return RowTable(ck, "ple")


def peak_rss() -> int:
    """This process's peak resident bytes (VmHWM: unlike ru_maxrss, not inherited from the parent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(mode: str, path: Path, rows: int, serve: int) -> None:
    """One measurement in this (fresh) process, the modules already imported: prints the growth of its peak
    RSS in bytes and the seconds as JSON."""
    import bench_llm  # noqa: F401

    from otpu_core import gguf_source  # noqa: F401
    from otpu_core.llm import checkpoint, safetensors_file  # noqa: F401
    base = peak_rss()
    t0 = time.perf_counter()
    if mode == "whole":
        from otpu_core.llm.safetensors_file import _Files
        table = _Files({HF_NAME: path}).read(HF_NAME)
        assert table.dtype == np.float32 and table.shape == (rows, PLE_COLS)
    else:
        table = _table(path, rows)
        for i in np.random.default_rng(1).integers(0, rows, serve):
            row = table[int(i)]
        assert row.dtype == np.float32 and row.shape == (PLE_COLS,)
    print(json.dumps({"grow": peak_rss() - base, "seconds": time.perf_counter() - t0}))


def measure(mode: str, path: Path, rows: int, serve: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(path), str(rows), str(serve)],
                         stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=262144)
    ap.add_argument("--whole-rows", type=int, default=16384)
    ap.add_argument("--serve", type=int, default=1000)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--child", nargs=4, metavar=("MODE", "PATH", "ROWS", "SERVE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], Path(a.child[1]), int(a.child[2]), int(a.child[3]))
    d = Path(tempfile.mkdtemp(prefix="bench_ple.", dir=a.dir))
    try:
        st, gg = write_tables(d, a.rows)
        small, _ = write_tables(d, a.whole_rows)
        whole = measure("whole", small, a.whole_rows, 0)
        scaled = whole["grow"] * a.rows / a.whole_rows
        print(f"table {a.rows} x {PLE_COLS} BF16: {st.stat().st_size / 1e9:.2f} GB in the file, "
              f"{a.rows * PLE_COLS * 4 / 1e9:.2f} GB as float32")
        print(f"baseline, read whole as float32: {whole['grow'] / 1e9:.3f} GB peak growth for {a.whole_rows} rows "
              f"({whole['seconds']:.2f} s), {scaled / 1e9:.2f} GB scaled to {a.rows}")
        for name, path in (("safetensors", st), ("GGUF", gg)):
            r = measure("rows", path, a.rows, a.serve)
            print(f"RowTable over the {name} file, {a.serve} random rows served: {r['grow'] / 1e6:.1f} MB peak growth "
                  f"({r['seconds']:.2f} s); baseline / this: {scaled / max(r['grow'], 1):.0f}x")
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
