"""otpu-lens on the command line: record, list, info, diff, html, export; bad files refused by name
(exit 2); the Perfetto export checked against the trace-event format; the server answers only the
page and its profiles, on 127.0.0.1, never cached; a model-like workload plugs into the registry."""
import gzip
import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from otpu_core import ol
from otpu_core.cli import run_app
from otpu_core.ol.runtime import Image
from otpu_lens import cli, fileformat, serve, workloads

T = "sim-small"


def lens(*args) -> int:
    return run_app(cli.app, "otpu-lens", list(args))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("lens")
    a, b = d / "a.otpuprof", d / "b.otpuprof"
    assert lens("record", "-o", str(a), "--engine", "sim", "-t", T, "-w", "attention") == 0
    assert lens("record", "-o", str(b), "--engine", "sim", "-t", T, "-w", "attention", "--tokens", "300") == 0
    return a, b


def test_record_writes_a_gzip_profile_and_info_reads_it(recorded, capsys):
    a, _ = recorded
    raw = a.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    doc = json.loads(gzip.decompress(raw))
    assert doc["format"] == "otpu-lens-profile" and doc["version"] == fileformat.VERSION == 2 and doc["profiles"][0]["kind"] == "sim"
    assert lens("info", str(a), "--json") == 0
    info = json.loads(capsys.readouterr().out)[0]
    p = info["profiles"][0]
    assert p["cycles"] == doc["profiles"][0]["cycles"] > 0 and p["config"]["target"] == T
    assert lens("info", str(a)) == 0
    assert f"{a}: otpu-lens-profile v2" in capsys.readouterr().out


def test_list_names_every_workload(capsys):
    assert lens("list", "--json") == 0
    names = {w["name"] for w in json.loads(capsys.readouterr().out)}
    assert {"decoder-layer", "attention", "matmul-int8", "rmsnorm", "softmax", "rope", "mlp", "greedy-head"} <= names


def test_diff_gives_class_deltas_and_moved_lines(recorded, capsys):
    a, b = recorded
    assert lens("diff", str(a), str(b), "--json") == 0
    d = json.loads(capsys.readouterr().out)
    pa, pb = (fileformat.read(x)["profiles"][0] for x in (a, b))
    assert d["cycles_delta"] == pb["cycles"] - pa["cycles"] != 0
    for row in d["classes"]:
        assert row["delta"] == row["b"] - row["a"]
    assert sum(r["a"] for r in d["classes"]) == sum(r["busy"] for r in pa["class_table"])
    assert d["sources"] and all(r["delta"] == r["b"] - r["a"] != 0 for r in d["sources"])
    assert lens("diff", str(a), str(b)) == 0
    assert "busy cycles per instruction class" in capsys.readouterr().out


def test_html_is_one_page_with_the_data_and_no_network(recorded, tmp_path, capsys):
    a, b = recorded
    out = tmp_path / "p.html"
    assert lens("html", str(a), str(b), "-o", str(out)) == 0
    text = out.read_text()
    head, rest = text.split('<script type="application/json" id="lens-data">', 1)
    block, code = rest.split("</script>", 1)
    code = (head + code).replace("http://www.w3.org/2000/svg", "")      # the SVG namespace name, not an address
    assert "http://" not in code and "https://" not in code and "<link" not in code
    assert "<script src" not in code and "<img" not in code and "import(" not in code
    assert "default-src 'none'" in text                        # and the page forbids any network but its own
    docs = json.loads(block)
    assert [d["profiles"][0]["cycles"] for d in docs] == [fileformat.read(x)["profiles"][0]["cycles"] for x in (a, b)]


@pytest.mark.parametrize("content,text", [
    (b"not a profile", "not an otpu-lens profile"),
    (json.dumps({"format": "chrome-trace", "version": 1}).encode(), "format 'chrome-trace' is not"),
    (gzip.compress(json.dumps({"format": "otpu-lens-profile", "version": 3, "profiles": []}).encode(), mtime=0),
     "version 3 is newer"),
    (json.dumps({"format": "otpu-lens-profile", "version": 1, "profiles": [{"kind": "sim"}]}).encode(),
     "profile 0 has no key"),
], ids=["not-json", "other-format", "newer-version", "missing-key"])
def test_bad_or_newer_files_are_refused_by_name(content, text, tmp_path, capsys):
    bad = tmp_path / "bad.otpuprof"
    bad.write_bytes(content)
    export = ("export", str(bad), "--perfetto", str(tmp_path / "x.json"))
    for args in (("info", str(bad)), ("open", str(bad), "--no-browser"), export):
        assert lens(*args) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and text in err and "Traceback" not in err


@pytest.mark.parametrize("args,text", [
    (("--engine", "fpga"), "--engine fpga: must be card or sim"),
    (("--keep", "middle"), "--keep middle: must be first or last"),
    (("-w", "rmsnorm", "--tokens", "3"), "--tokens: workload rmsnorm does not take it"),
    (("--model", "models/x"), "--model models/x: no such file, directory or known model"),
    (("-w", "nope"), "--workload nope: no such workload"),
    (("--engine", "sim", "--dev", "sim:x"), "--dev sim:x: --engine sim runs the timing model"),
])
def test_record_refuses_bad_options(args, text, tmp_path, capsys):
    assert lens("record", "-o", str(tmp_path / "x.otpuprof"), "-t", T, *args) == 2
    assert text in capsys.readouterr().err
    assert not (tmp_path / "x.otpuprof").exists()


def test_perfetto_export_follows_the_trace_event_format(recorded, tmp_path):
    a, _ = recorded
    out = tmp_path / "trace.json"
    assert lens("export", str(a), "--perfetto", str(out)) == 0
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    p = fileformat.read(a)["profiles"][0]
    slices = [e for e in events if e["ph"] == "X"]
    unit_slices = [e for e in slices if e["cat"] != "DRAM"]
    assert len(unit_slices) == p["traced"]
    for e in slices:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e) and e["dur"] >= 0
    tracks: dict = {}
    for e in slices:
        tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():             # per track: nested or disjoint, never partly overlapping
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for s, e in spans:
            while stack and stack[-1] <= s + 1e-9:
                stack.pop()
            assert not stack or e <= stack[-1] + 1e-9
            stack.append(e)
    counters: dict = {}
    for e in events:
        if e["ph"] == "C":
            assert isinstance(e["args"]["value"], float | int)
            counters.setdefault((e["pid"], e["name"]), []).append(e["ts"])
    assert counters and all(ts == sorted(ts) for ts in counters.values())
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(tracks) <= named
    assert any("source" in e["args"] and "attention.py" in e["args"]["source"] for e in unit_slices)
    # microseconds at the profile's clock
    last = max(e["ts"] + e["dur"] for e in unit_slices)
    assert last == pytest.approx(p["cycles"] / p["clock_mhz"], rel=0.01)
    # the MXU FIFO's empty share: per window, back in cycles, it adds up to the MXU_STARVE counter
    w = p["windows"][0]
    empty = [e["args"]["value"] for e in events if e["ph"] == "C" and e["name"] == "MXU FIFO empty %"]
    assert len(empty) == w["n"].size
    starve = p["slices"][0]["counters"]["MXU_STARVE"]
    assert starve > 0 and abs(sum(v * n / 100 for v, n in zip(empty, w["n"].tolist())) - starve) <= w["n"].size
    assert not any(e["name"].startswith("MXU FIFO level") for e in events)     # the timing model has no level


def test_perfetto_has_the_fifo_level_track_when_the_records_carry_it(recorded):
    from otpu_lens import perfetto
    p = fileformat.read(recorded[0])["profiles"][0]
    w = p["windows"][0]
    w["ff"] = np.arange(w["n"].size, dtype=np.int64) * 64          # as a card's Q records would sum it
    level = [e for e in perfetto.events(p) if e["ph"] == "C" and e["name"] == perfetto.FIFO_LEVEL]
    assert [e["args"]["value"] for e in level] == [round(f / max(n, 1), 2) for f, n in zip(w["ff"].tolist(),
                                                                                          w["n"].tolist())]


def test_the_server_serves_only_the_page_and_profiles_on_loopback(recorded):
    a, b = recorded
    server = serve.serve([a, b])
    serve.in_thread(server)
    base = serve.url_of(server)
    try:
        assert server.server_address[0] == "127.0.0.1" and base.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(base) as r:
            page = r.read().decode()
            assert r.headers["Cache-Control"] == "no-store" and r.headers["Content-Type"].startswith("text/html")
            assert '"/profile/0", "/profile/1"' in page
        with urllib.request.urlopen(base + "profile/1") as r:
            assert r.read() == b.read_bytes() and r.headers["Cache-Control"] == "no-store"
        for path in ("profile/2", "etc/passwd", "../a.otpuprof", "profile/x"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(base + path)
            assert e.value.code == 404 and e.value.headers["Cache-Control"] == "no-store"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(base, data=b"x", method="POST"))
        assert e.value.code == 405
    finally:
        server.shutdown()
        server.server_close()


def _double(x, y):
    ol.store(y, ol.load(x) * 2.0)


def test_a_model_like_workload_plugs_in_with_untraced_steps_and_dram_feedback(tmp_path, capsys):
    seen = []

    def build(ctx):
        img = Image(ctx.target)
        x = img.tensor(np.arange(8, dtype=np.float32))
        y = img.tensor(shape=(8,))
        prog = ol.compile_kernel(_double, ctx.target, x=x, y=y)
        yield workloads.Step("prompt", prog, prog.arg_words(), [(0, img.dram[: img.cursor].copy())], traced=False)
        got = np.frombuffer(ctx.read(y.base.const, 32).tobytes(), np.float32)
        seen.append(got.copy())                       # the step before ran on the engine: read its result
        for k in range(ctx.option("tokens", 1)):
            yield workloads.Step(f"token {k}", prog, prog.arg_words())

    workloads.workload("test-model", "a stand-in model", takes=("model", "prompt", "tokens"))(build)
    try:
        out = tmp_path / "m.otpuprof"
        assert lens("record", "-o", str(out), "--engine", "sim", "-t", T, "-w", "test-model", "--model", "m", "--prompt", "hi",
                    "--tokens", "2", "--json") == 0
        report = json.loads(capsys.readouterr().out)
        assert [p["name"].split(" (")[0] for p in report["profiles"]] == ["token 0", "token 1"]
        assert np.array_equal(seen[0], 2.0 * np.arange(8, dtype=np.float32))
    finally:
        workloads.REGISTRY.pop("test-model")


@pytest.mark.parametrize("values,dtype", [([0, 5, -7], "i1"), ([0, 300, -2], "i2"), ([70_000, -1], "i4"),
                                          ([1 << 40, 3], "f8"), ([], "i1")])
def test_packed_columns_take_the_smallest_type_and_round_trip(values, dtype):
    a = np.array(values, np.int64)
    col = fileformat.pack_column(a)
    assert col["dtype"] == dtype and np.array_equal(fileformat.unpack_column(col, "f", "k"), a)
    growing = np.cumsum(np.arange(1000, dtype=np.int64) * 3000)        # big values, small steps
    packed = fileformat.pack_column(growing, delta=True)
    assert packed["dtype"] == "i4" and np.array_equal(fileformat.unpack_column(packed, "f", "d"), growing)


def test_version_1_files_with_plain_window_lists_still_read(recorded, tmp_path):
    a, _ = recorded
    doc = json.loads(gzip.decompress(a.read_bytes()))
    p = fileformat.read(a)["profiles"][0]
    assert all(isinstance(v, dict) and "b64" in v for v in doc["profiles"][0]["windows"][0].values())
    doc["version"] = 1
    doc["profiles"][0]["windows"] = [{k: v.tolist() for k, v in w.items()} for w in p["windows"]]
    old = tmp_path / "v1.otpuprof"
    old.write_bytes(json.dumps(doc).encode())
    back = fileformat.read(old)["profiles"][0]
    assert {k: v.tolist() for k, v in back["windows"][0].items()} == {k: v.tolist() for k, v in p["windows"][0].items()}
    doc["profiles"][0]["windows"][0]["ms"] = {"dtype": "u8", "b64": ""}
    old.write_bytes(json.dumps(doc).encode())
    with pytest.raises(Exception, match="column 'windows.ms' is not a packed column"):
        fileformat.read(old)
