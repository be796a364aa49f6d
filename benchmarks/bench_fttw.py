"""GGUF to FTTW conversion: time and peak RSS on a generated GGUF of at least 1 GiB.

Generates a llama-shaped F16 checkpoint (dim 2048, ffn 5632, vocab 32000: 8 layers is 1.01 GiB of
tensors) into a temporary directory under /tmp, removed afterwards, never kept. Baselines, run
in this process on the same file: reading it once (sequential 16 MiB reads, page cache warm, as
the convert's own reads then are; and again from the disk, the file evicted from the page cache
before each read and each convert, as after a reboot), and the seed's figures for a full model on 2 cores (55.5 s, 210 MiB
peak RSS). Each convert runs in a child process so its peak RSS (VmHWM) is its own; a small
model (1 layer) is converted too, so the RSS ratio shows whether memory is flat in model size.
The clock runs around `convert()` alone: the child imports numpy, gguf and the converter and
loads its C kernel (`tilepack`, built once per machine) first, as any caller has them loaded. Reads and converts alternate `--repeat` times and the best of
each is compared; CPU times are printed beside (a loaded machine inflates wall time, much less
CPU time), with the load average. Writing the output's size alone through the page cache is
timed too: the part of a convert no packing can remove.

    .venv/bin/python benchmarks/bench_fttw.py [--layers 8] [--default bfp8] [--repeat 3] [--keep]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SEED_SECONDS, SEED_RSS_MIB = 55.5, 210.0
DIM, FFN, VOCAB = 2048, 5632, 32000


def generate(path: Path, layers: int) -> int:
    """A llama-shaped F16 GGUF, written tensor by tensor (never the whole model in memory)."""
    import gguf
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (VOCAB, DIM), "output_norm.weight": (DIM,)}
    for i in range(layers):
        shapes.update({f"blk.{i}.attn_norm.weight": (DIM,), f"blk.{i}.ffn_norm.weight": (DIM,)})
        for n in ("q", "k", "v", "output"):
            shapes[f"blk.{i}.attn_{n}.weight"] = (DIM, DIM)
        shapes.update({f"blk.{i}.ffn_gate.weight": (FFN, DIM), f"blk.{i}.ffn_up.weight": (FFN, DIM),
                       f"blk.{i}.ffn_down.weight": (DIM, FFN)})
    shapes["output.weight"] = (VOCAB, DIM)
    w = gguf.GGUFWriter(str(path), "llama")
    for name, shape in shapes.items():
        dtype = np.float32 if len(shape) == 1 else np.float16
        w.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = 0
    for name, shape in shapes.items():
        if len(shape) == 1:
            a = (1 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        else:
            a = (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float16)
        w.write_tensor_data(a)
        total += a.nbytes
    w.close()
    return total


def read_once(path: Path) -> float:
    buf = bytearray(16 << 20)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return time.perf_counter() - t0


CHILD = """
import json, resource, sys, time
import gguf                          # imported before the clock, as the converter's own modules are
from otpu_core.tt import bfp, tilepack
from otpu_core.tt.convert import convert
native = tilepack.library() is not None
c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
r = convert(sys.argv[1], sys.argv[2], default=bfp.format_named(sys.argv[3]))
seconds = time.perf_counter() - t0
c1 = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM: this process image's own peak (ru_maxrss would count the parent's pages shared at fork)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
use = resource.getrusage(resource.RUSAGE_SELF)        # CPU time: what a loaded machine does not inflate
print(json.dumps({"seconds": seconds, "cpu_s": use.ru_utime + use.ru_stime, "file_bytes": r.file_bytes,
                  "convert_cpu_s": c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime,
                  "rss_mib": hwm / 1024, "native": native}))
"""


def convert_child(gguf_path: Path, out: Path, fmt: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(gguf_path), str(out), fmt], stdout=subprocess.PIPE)
    if proc.returncode:
        raise SystemExit(f"convert failed ({proc.returncode})")
    return json.loads(proc.stdout)


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache (written back first), so the next read comes from
    the disk: what a convert after a reboot, or of a file larger than the free memory, reads."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cold_runs(src: Path, out: Path, fmt: str, repeat: int) -> dict:
    """Reading once and converting with the source evicted before each run, interleaved."""
    reads, convs = [], []
    for _ in range(repeat):
        evict(src)
        reads.append(read_once(src))
        evict(src)
        convs.append(convert_child(src, out, fmt)["seconds"])
        out.unlink()
    return {"cold_read_once_s": round(min(reads), 3), "cold_convert_s": round(min(convs), 3),
            "cold_convert_over_read": round(min(convs) / min(reads), 2)}


def write_once(path: Path, nbytes: int) -> float:
    """Writing `nbytes` to a new file through the page cache, 1 MiB at a time: what the convert's
    own output costs before any of its work (a floor, not a baseline)."""
    buf = bytes(range(256)) * 4096
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        for _ in range(nbytes // len(buf)):
            f.write(buf)
        f.write(buf[:nbytes % len(buf)])
    seconds = time.perf_counter() - t0
    path.unlink()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8, help="layers of the large model (8 = 1.01 GiB)")
    ap.add_argument("--default", default="bfp8", help="format of the matrices")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement (the best is compared)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files (printed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="otpu-bench-fttw-", dir="/tmp"))
    try:
        rows = {}
        for label, layers in (("small", 1), ("large", args.layers)):
            src = work / f"{label}.gguf"
            t0 = time.perf_counter()
            size = generate(src, layers)
            gen = time.perf_counter() - t0
            read_once(src)                       # warm the page cache, as a second pass would find it
            reads, read_cpu, convs = [], [], []
            for _ in range(args.repeat):         # interleaved, so both see the same load
                c0 = time.process_time()
                reads.append(read_once(src))
                read_cpu.append(time.process_time() - c0)
                convs.append(convert_child(src, work / f"{label}.fttw", args.default))
                (work / f"{label}.fttw").unlink()
            best = min(convs, key=lambda c: c["seconds"])
            read = min(reads)
            writes = [write_once(work / "floor.bin", best["file_bytes"]) for _ in range(args.repeat)]
            rows[label] = {"gguf_bytes": src.stat().st_size, "tensor_bytes": size, "generate_s": round(gen, 2),
                           "native": best["native"], "read_once_s": round(read, 3),
                           "read_once_cpu_s": round(min(read_cpu), 3), "convert_s": round(best["seconds"], 3),
                           "convert_runs_s": [round(c["seconds"], 3) for c in convs],
                           "convert_cpu_s": round(best["convert_cpu_s"], 3),
                           "process_cpu_s": round(best["cpu_s"], 2),
                           "convert_over_read": round(best["seconds"] / read, 2),
                           "convert_cpu_over_read_cpu": round(best["convert_cpu_s"] / min(read_cpu), 2),
                           "write_output_once_s": round(min(writes), 3),
                           "peak_rss_mib": round(max(c["rss_mib"] for c in convs), 1), "fttw_bytes": best["file_bytes"]}
            if label == "large":
                rows[label].update(cold_runs(src, work / f"{label}.fttw", args.default, args.repeat))
            if not args.keep:
                src.unlink()
        large, small = rows["large"], rows["small"]
        gib = large["gguf_bytes"] / (1 << 30)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(json.dumps(rows, indent=2))
        print(f"load average {load} on {os.cpu_count()} cores; native kernel: {'yes' if large['native'] else 'no (numpy)'}")
        print(f"large model: {gib:.2f} GiB F16 -> {args.default}: convert {large['convert_s']:.2f} s (best of "
              f"{args.repeat}), reading it once {large['read_once_s']:.3f} s: ratio {large['convert_over_read']:.2f}x "
              f"(goal <= 2x); CPU {large['convert_cpu_s']:.2f} s against {large['read_once_cpu_s']:.3f} s: "
              f"{large['convert_cpu_over_read_cpu']:.2f}x")
        print(f"from the disk (the GGUF evicted from the page cache before each run): convert "
              f"{large['cold_convert_s']:.2f} s, reading it once {large['cold_read_once_s']:.3f} s: ratio "
              f"{large['cold_convert_over_read']:.2f}x (goal <= 2x)")
        print(f"writing its {large['fttw_bytes'] / (1 << 20):.0f} MiB of output alone through the page cache: "
              f"{large['write_output_once_s']:.3f} s ({large['write_output_once_s'] / large['read_once_s']:.2f}x the read)")
        print(f"peak RSS {large['peak_rss_mib']:.0f} MiB at {gib:.2f} GiB, {small['peak_rss_mib']:.0f} MiB at "
              f"{small['gguf_bytes'] / (1 << 30):.2f} GiB: ratio {large['peak_rss_mib'] / small['peak_rss_mib']:.2f} "
              f"(flat = 1.0)")
        print(f"against the seed (full model, 2 cores): {large['convert_s'] / SEED_SECONDS:.3f}x its {SEED_SECONDS} s, "
              f"{large['peak_rss_mib'] / SEED_RSS_MIB:.2f}x its {SEED_RSS_MIB:.0f} MiB peak RSS")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
