"""`otpu ol compile` through the real CLI entry (`run_app`, as the console script): report, JSON,
image, errors."""
import json
from types import SimpleNamespace

from otpu_core import isa
from otpu_core.cli import build_app, run_app

KERNELS = '''
from otpu_core import ol

def scale(x, y, factor=2):
    ol.store(y, ol.exp2(ol.load(x) - 1.0) * float(factor))

def scale_args(target):
    return dict(x=ol.Tensor(128, (4, 64)), y=ol.Tensor(4096, (4, 64)))

def broken(x, y):
    ol.store(y, ol.load(x) + ol.load(x)[:, 0:3])

def broken_args(target):
    return dict(x=ol.Tensor(128, (4, 64)), y=ol.Tensor(4096, (4, 64)))

def typo(x, y):
    ol.store(y, ol.lod(x))

def typo_args(target):
    return dict(x=ol.Tensor(128, (4, 64)), y=ol.Tensor(4096, (4, 64)))
'''


def _run(args, tmp_path, capsys):
    f = tmp_path / "k.py"
    f.write_text(KERNELS)
    capsys.readouterr()
    code = run_app(build_app(), "otpu", ["ol", "compile", str(f)] + args)
    out = capsys.readouterr()
    return SimpleNamespace(exit_code=code, output=out.out + out.err)


def test_compile_json_report_and_image(tmp_path, capsys):
    img = tmp_path / "k.bin"
    r = _run(["-k", "scale", "--target", "sim-small", "--arg", "factor=3", "--json", "-o", str(img),
              "--asm", str(tmp_path / "k.s")], tmp_path, capsys)
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["instructions"] == 5 and rep["peepholes"]["exp2sub"] == {"instrs": 1, "words": 512}
    instrs = isa.decode_program(img.read_bytes())
    assert [i.op.name for i in instrs] == ["LD", "VOP", "VOP", "ST", "HALT"]
    assert instrs[2]["imm"] == isa.f32_bits(3.0)
    assert "vop.exp2sub" in (tmp_path / "k.s").read_text()


def test_compile_table_output(tmp_path, capsys):
    r = _run(["-k", "scale", "--target", "sim-small"], tmp_path, capsys)
    assert r.exit_code == 0 and "5 instructions" in r.output and "exp2sub" in r.output


def test_errors_exit_2_without_traceback(tmp_path, capsys):
    r = _run(["-k", "broken", "--target", "sim-small"], tmp_path, capsys)
    assert r.exit_code == 2 and "(4, 64)" in r.output and "(4, 3)" in r.output and "Traceback" not in r.output
    r = _run(["-k", "typo", "--target", "sim-small"], tmp_path, capsys)
    assert r.exit_code == 2 and "has no attribute 'lod'" in r.output and "AttributeError" not in r.output and "k.py:" in r.output and "Traceback" not in r.output
    r = _run(["-k", "nothere", "--target", "sim-small"], tmp_path, capsys)
    assert r.exit_code == 2 and "no kernel function" in r.output
    r = _run(["-k", "scale", "--arg", "factor"], tmp_path, capsys)
    assert r.exit_code == 2 and "NAME=INTEGER" in r.output


def test_output_paths_are_checked_before_the_kernel_file_is_loaded(tmp_path, capsys):
    marker = tmp_path / "imported"
    f = tmp_path / "k.py"
    f.write_text(f"open({str(marker)!r}, 'w').close()\n" + KERNELS)
    for option in ("-o", "--asm"):
        for path, text in ((tmp_path, "is a directory"),
                           (tmp_path / "nonexist" / "k.bin", f"directory {tmp_path / 'nonexist'} does not exist")):
            code = run_app(build_app(), "otpu", ["ol", "compile", str(f), "-k", "scale", "-t", "sim-small", option,
                                                 str(path)])
            err = capsys.readouterr().err
            name = "--output" if option == "-o" else "--asm"
            assert code == 2 and f"{name} {path}: {text}" in err and "Traceback" not in err
    assert not marker.exists()            # refused before the user's file was imported or anything compiled
