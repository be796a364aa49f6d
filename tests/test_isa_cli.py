"""`otpu asm` / `otpu disasm` as a user runs them: files round trip, JSON, exit 2 without a traceback."""
import json
import subprocess
import sys

from otpu_core import asm, isa

SOURCE = """\
# dot of 16 int4 rows against one ACT row, then a scaled exp2
    li rd=r1 imm=2
    loop count=r1 body=@next
    mm sa=r2+0x1000 ssa=r3+0x2000 out=64 n=16 kb=2 rs=128 m=1 srs=8 wf=int4 acc ! mxu=0
    vop.exp2sub dst=64 a=64 rows=1 cols=16 bmode=scalar imm=0.5 ! mxu=0 mask=0x1
next:
    halt chain ra=r8 rb=r9 ! sync
"""


def _otpu(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "otpu_core", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_asm_disasm_round_trip_of_a_file(tmp_path):
    src = tmp_path / "prog.s"
    src.write_text(SOURCE)
    r = _otpu("asm", str(src), "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["instructions"] == 5 and summary["wait_table"] is True and summary["bytes"] == 5 * 40
    image = (tmp_path / "prog.bin").read_bytes()
    program = asm.parse(SOURCE)
    assert image == isa.encode_program(program.instrs, program.waits)
    # disassemble, reassemble the listing, and get the same bytes
    r = _otpu("disasm", str(tmp_path / "prog.bin"), "--waits", "-o", str(tmp_path / "back.s"))
    assert r.returncode == 0, r.stderr
    r = _otpu("asm", str(tmp_path / "back.s"), "-o", str(tmp_path / "back.bin"))
    assert r.returncode == 0 and "5 instructions, 200 bytes (program + WAITC table)" in r.stdout
    assert (tmp_path / "back.bin").read_bytes() == image


def test_public_image_and_json_listing(tmp_path):
    src = tmp_path / "p.s"
    src.write_text(SOURCE)
    assert _otpu("asm", str(src), "--no-waits", "-o", str(tmp_path / "p.bin")).returncode == 0
    assert (tmp_path / "p.bin").stat().st_size == 5 * 32
    r = _otpu("disasm", str(tmp_path / "p.bin"))
    assert r.returncode == 0 and "loop body=@L4 count=r1" in r.stdout and "!" not in r.stdout
    r = _otpu("disasm", str(tmp_path / "p.bin"), "--json")
    doc = json.loads(r.stdout)
    assert [d["op"] for d in doc] == ["LI", "LOOP", "MM", "VOP", "HALT"]
    assert doc[2]["words"][0] == f"0x{0x20 | 2 << 8 | 3 << 12 | (0x02 | 1 << 4) << 24:08x}"
    assert doc[3]["fields"]["imm"] == 0x3F000000 and doc[4]["text"] == "halt ra=r8 rb=r9 chain"


def test_bad_files_exit_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.s"
    bad.write_text("nop\nmm n=70000\n")
    r = _otpu("asm", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "line 2: 'mm n=70000': MM n=70000 does not fit its 16-bit field" in r.stderr
    r = _otpu("asm", str(tmp_path / "missing.s"))
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(32) + bytes([0x99]) + bytes(31))
    r = _otpu("disasm", str(junk))
    assert r.returncode == 2 and "instruction 1, word 0: unknown opcode 0x99" in r.stderr and "Traceback" not in r.stderr
    junk.write_bytes(bytes(33))
    r = _otpu("disasm", str(junk))
    assert r.returncode == 2 and "not a whole number of 32-byte instructions" in r.stderr
    r = _otpu("disasm", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_help_texts():
    r = _otpu("asm", "--help")
    assert r.returncode == 0 and "Assemble openTPU assembly" in r.stdout and "--waits" in r.stdout
    r = _otpu("disasm", "--help")
    assert r.returncode == 0 and "--json" in r.stdout
