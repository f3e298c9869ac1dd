"""scripts/torch-versions.sh's parts on the CPU (issue 45): split, batch, stage, assemble and ready over
small fake archives in a temporary folder (a missing part, a corrupt part, the complete set, a stage
run again); scripts/fatbin_prune.py over a synthetic ELF with a .nv_fatbin section; and
scripts/torch_versions_report.py over a fake configuration folder."""
import io
import json
import os
import struct
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "torch-versions.sh")
PART = 3000  # bytes a part (44 MiB on the real thing)
LIBS = "nvidia-nccl-2.30.7-nvshmem-3.7.2.tar.xz"


def make_archive(path, files):
    """A .tar.xz of files {name: bytes}."""
    with tarfile.open(path, "w:xz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def parts(tmp_path):
    """Three archives split into parts; run(*args) runs the script with every folder in tmp_path."""
    src = tmp_path / "src"
    src.mkdir()
    contents = {
        LIBS: {"nvidia/nccl/lib/libnccl.so.2": os.urandom(4000), "nvidia/nvshmem/lib/libnvshmem_host.so.3": os.urandom(1500)},
        "torch-2.14.1.tar.xz": {"torch/__init__.py": b"__version__ = '2.14.1'\n", "torch/lib/libtorch.so": os.urandom(5000)},
        "torch-2.15.0.tar.xz": {"torch/__init__.py": b"__version__ = '2.15.0'\n", "torch/lib/libtorch.so": os.urandom(6000)},
    }
    for name, files in contents.items():
        make_archive(src / name, files)
    env = dict(os.environ, TORCH_PARTS_ALL=str(tmp_path / "all"), TORCH_PARTS_CARRY=str(tmp_path / "carry"),
               TORCH_PARTS_STAGE=str(tmp_path / "stage"), TORCH_VERSIONS_ROOT=str(tmp_path / "root"),
               TORCH_PARTS_BYTES=str(PART), TORCH_PARTS_BATCH_BYTES=str(2 * PART))

    def run(*args, check=True):
        out = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        if check:
            assert out.returncode == 0, out.stdout + out.stderr
        return out

    run("split", *(str(src / n) for n in contents))
    return run, tmp_path, contents


def manifest(tmp_path):
    return [line.split() for line in open(tmp_path / "all" / "manifest.txt") if not line.startswith("#")]


def test_split_writes_parts_and_a_manifest_that_adds_up(parts):
    run, tmp, contents = parts
    m = manifest(tmp)
    listed = [p for p in m if p[0] == "part"]
    archives = [a for a in m if a[0] == "archive"]
    assert [a[1] for a in archives] == list(contents)
    total = sum(int(a[3]) for a in archives)
    assert sum(int(p[3]) for p in listed) == total and all(int(p[3]) <= PART for p in listed)
    assert [int(a[4]) for a in archives] == [0, int(archives[0][3]), int(archives[0][3]) + int(archives[1][3])]
    assert ["libs", "2.14.1", "nccl"] in m and ["libs", "2.15.0", "nccl", "nvshmem"] in m
    batches = run("batches").stdout.splitlines()
    assert len(batches) == (len(listed) + 1) // 2  # two parts a batch (TORCH_PARTS_BATCH_BYTES)
    assert run("batch", str(len(batches)), check=False).returncode != 0


def test_every_batch_staged_unpacks_every_version(parts):
    run, tmp, contents = parts
    count = len(run("batches").stdout.splitlines())
    for k in range(count):
        out = run("batch", str(k))
        carried = sorted(os.listdir(tmp / "carry"))
        assert "manifest.txt" in carried and len(carried) in (2, 3), carried
        out = run("stage").stdout
        if k < count - 1:
            assert "missing" in out
    assert "every part is here" in out, out
    for v in ("2.14.1", "2.15.0"):
        where = run("ready", v).stdout.strip()
        assert where == str(tmp / "root" / v)
        assert open(os.path.join(where, "torch", "__init__.py")).read() == f"__version__ = '{v}'\n"
        assert open(os.path.join(where, "nvidia", "nccl", "lib", "libnccl.so.2"), "rb").read() == \
            contents[LIBS]["nvidia/nccl/lib/libnccl.so.2"]
    assert os.path.isdir(tmp / "root" / "2.15.0" / "nvidia" / "nvshmem")
    assert not os.path.exists(tmp / "root" / "2.14.1" / "nvidia" / "nvshmem")  # 2.14.1 runs with the host's
    again = run("stage").stdout  # nothing carried anew: nothing unpacked again
    assert "unpacked in" not in again and "every part is here" in again


def test_a_missing_part_is_named_and_the_other_versions_still_unpack(parts):
    run, tmp, _ = parts
    m = manifest(tmp)
    last = [p[1] for p in m if p[0] == "part"][-1]  # the last part: torch 2.15.0's alone
    count = len(run("batches").stdout.splitlines())
    for k in range(count):
        run("batch", str(k))
        if os.path.exists(tmp / "carry" / last):
            os.remove(tmp / "carry" / last)
        out = run("stage").stdout
    assert f"missing 1: {last}" in out, out
    assert run("ready", "2.14.1").returncode == 0
    refused = run("ready", "2.15.0", check=False)
    assert refused.returncode != 0 and last in refused.stdout


def test_a_corrupt_part_is_refused_and_removed(parts):
    run, tmp, _ = parts
    run("batch", "0")
    name = sorted(n for n in os.listdir(tmp / "carry") if n.startswith("part-"))[0]
    path = tmp / "carry" / name
    data = bytearray(open(path, "rb").read())
    data[100] ^= 0xFF
    os.remove(path)  # a new file: the carried one is a hard link to the packed part
    with open(path, "wb") as f:
        f.write(data)
    out = run("stage", check=False)
    assert out.returncode != 0 and f"BAD: {name}" in out.stdout
    assert not os.path.exists(tmp / "stage" / name)
    run("batch", "0")
    assert "BAD" not in run("stage").stdout and os.path.exists(tmp / "stage" / name)


# ---- scripts/fatbin_prune.py ----

def fatbin(entries):
    """A fat binary: header, then each (kind, sm, payload) with a 64-byte entry header."""
    body = b""
    for kind, sm, payload in entries:
        header = bytearray(64)
        struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 64, len(payload))
        struct.pack_into("<I", header, 28, sm)
        body += bytes(header) + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf(section_data):
    """A 64-bit little-endian ELF with sections .nv_fatbin (section_data) and .shstrtab."""
    names = b"\0.nv_fatbin\0.shstrtab\0"
    data_off = 64
    names_off = data_off + len(section_data)
    shoff = (names_off + len(names) + 7) & ~7
    head = bytearray(64)
    head[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 2)
    sh = bytes(64)
    sh += struct.pack("<IIQQQQ", 1, 1, 0, 0, data_off, len(section_data)) + bytes(24)
    sh += struct.pack("<IIQQQQ", 11, 3, 0, 0, names_off, len(names)) + bytes(24)
    blob = bytes(head) + section_data + names
    return blob + bytes(shoff - len(blob)) + sh


@pytest.fixture
def prune():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import fatbin_prune
    yield fatbin_prune
    sys.path.remove(os.path.join(ROOT, "scripts"))


def test_fatbin_prune_zeroes_what_sm90_cannot_run(tmp_path, prune):
    entries = [(2, 80, b"A" * 100), (2, 90, b"B" * 120), (1, 120, b"C" * 48), (1, 80, b"D" * 40)]
    section = fatbin(entries) + bytes(8) + fatbin([(2, 100, b"E" * 64), (2, 90, b"F" * 32)])
    path = tmp_path / "lib.so"
    path.write_bytes(elf(section))
    before = path.read_bytes()
    report = prune.prune(str(path), 90)
    after = path.read_bytes()
    assert len(after) == len(before) and report["fat_binaries"] == 2
    for kept in (b"B" * 120, b"D" * 40, b"F" * 32):
        assert kept in after
    for gone in (b"A" * 100, b"C" * 48, b"E" * 64):
        assert gone not in after
    assert report["zeroed"] == {"sm_80": 100, "ptx_120": 48, "sm_100": 64} and report["kept"] == {"sm_90": 152, "ptx_80": 40}
    assert after[:64] == before[:64] and after[-64 * 3:] == before[-64 * 3:]  # the ELF header and section headers


def test_fatbin_prune_leaves_a_fat_binary_it_does_not_understand(tmp_path, prune):
    broken = bytearray(fatbin([(2, 80, b"A" * 100), (2, 90, b"B" * 120)]))
    struct.pack_into("<Q", broken, 8, len(broken) - 16 - 8)  # the entries no longer tile the fat binary
    path = tmp_path / "lib.so"
    path.write_bytes(elf(bytes(broken) + bytes(8)))
    before = path.read_bytes()
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fatbin_prune.py"), "--keep-sm", "90", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "FAILED" in out.stdout
    assert path.read_bytes() == before


# ---- scripts/torch_versions_report.py ----

def test_report_gathers_rows_and_figures(tmp_path):
    folder = tmp_path / "torchversions-2.15.0"
    (folder / "probe").mkdir(parents=True)
    (folder / "versions.txt").write_text("torch 2.15.0+cu132 (CUDA 13.2, built with NCCL 2.30.7), \"nccl\" makes ProcessGroupNCCL2\n")
    (folder / "torch-layer.log").write_text("CHECK results: ok\nCHECK graph: FAILED\nCHECK teardown: skipped (x)\nRESULT FAILED\n")
    (folder / "copyengine-main.log").write_text("noise\nRESULT ok: 9 checks\n")
    (folder / "probe.json").write_text(json.dumps(dict(torch="2.15.0", implementation="ProcessGroupNCCL2", result="RESULT ok",
                                                        summary=dict(hook_registrations_on_ncclpool_segments={"world": 6}),
                                                        rank_results=[dict(segments=[], steps=[dict(step="a", groups={})])])))
    rows = tmp_path / "rows.txt"
    rows.write_text("     torchversions 2.15.0   torch 2.15.0\nFAIL   torch layer checks   1 ok, 1 failed\n       time   95 s\n")
    out = tmp_path / "tv.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "torch_versions_report.py"), "--rows", str(rows), "--out", str(out),
                    str(folder)], check=True, capture_output=True, timeout=60)
    j = json.load(open(out))
    c = j["configs"][0]
    assert c["config"] == "2.15.0" and c["seconds"] == 95 and j["failed_rows"] == ["FAIL   torch layer checks   1 ok, 1 failed"]
    assert c["torch_layer"] == dict(ok=1, failed=["graph"], skipped=1, result="RESULT FAILED")
    assert c["copy_engine"] == {"main": "RESULT ok: 9 checks", "off": None}
    assert c["probe"]["summary"]["hook_registrations_on_ncclpool_segments"] == {"world": 6} and c["fsdp2"] is None


def test_parts_of_an_earlier_pack_are_dropped_without_failing_the_call(parts):
    run, tmp, contents = parts
    for k in (0, 1):
        run("batch", str(k))
        run("stage")
    src = tmp / "src"
    for name, files in contents.items():  # packed again: other bytes, another manifest
        make_archive(src / name, {n: os.urandom(len(d)) for n, d in files.items()})
    run("split", *(str(src / n) for n in contents))
    run("batch", "0")
    out = run("stage")  # batch 1's parts, staged for the first manifest, no longer match: not an error
    assert "staged before, does not match this manifest: removed" in out.stdout and "BAD" not in out.stdout
