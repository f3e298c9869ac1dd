#!/usr/bin/env python3
"""Zeroes the GPU code a shared library carries for other GPUs than the one it will run on, so that
the library compresses to a fraction of its size (scripts/torch-versions.sh pack: torch, NCCL and
NVSHMEM brought to an H100/H200 host in parts of a few tens of MiB).

    scripts/fatbin_prune.py --keep-sm 90 [--dry-run] [--json FILE] LIB.so...

A CUDA shared library holds its kernels in the ELF section .nv_fatbin (and, built with relocatable
device code, a copy for device linking in __nv_relfatbin, which no run reads): a run of fat binaries, each a
16-byte header (magic 0xBA55ED50, version 1, header size 16, size of what follows) and entries that tile
it exactly, each a header (kind 1 = PTX, 2 = ELF cubin; its own header size; the payload's size; the
SM version at byte 28) and its payload. A GPU of compute capability 9.0 runs only an sm_90 cubin
(SASS runs on its own major version alone) or PTX for compute_90 or lower, JIT-compiled. Every other
entry's payload is unusable there: this replaces those payloads with zeros and leaves everything else
byte for byte (the ELF, every entry header, the kept payloads), so the file keeps its size and
layout; the CUDA driver reads the headers to choose an image and loads only the one it chose.

Kept: cubins whose SM is --keep-sm, and PTX for compute --keep-sm or lower. A file is rewritten only
when every fat binary in those sections parses and its entries tile it exactly; otherwise it is left
as it is and the run fails. Fat binaries elsewhere (embedded in .lrodata for cuModuleLoadData, say)
are left alone. After writing, the file is parsed again and every kept payload and every
header compared with the original. Standard library only; prints one line per file.
"""
import argparse
import hashlib
import json
import struct
import sys

MAGIC = 0xBA55ED50
SECTIONS = (".nv_fatbin", "__nv_relfatbin")
KIND_PTX, KIND_ELF = 1, 2


class FatbinError(Exception):
    pass


def sections(data: bytes) -> dict:
    """name -> (offset, size) of an ELF64 little-endian file's sections."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise FatbinError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shentsize < 64 or shoff + shnum * shentsize > len(data):
        raise FatbinError("no readable section headers")
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off, strtab_size = headers[shstrndx][4], headers[shstrndx][5]
    out = {}
    for name_off, sh_type, _flags, _addr, offset, size in headers:
        end = data.index(b"\0", strtab_off + name_off, strtab_off + strtab_size)
        name = data[strtab_off + name_off:end].decode(errors="replace")
        if sh_type != 8:  # SHT_NOBITS occupies nothing in the file
            out[name] = (offset, size)
    return out


def entries(data: bytes, start: int, end: int) -> list:
    """Every entry of every fat binary in data[start:end]: dicts with blob, offset (of its header),
    header (its size), payload (offset, size), kind, sm. Raises FatbinError unless every fat binary's
    entries tile it exactly."""
    out, pos, blobs = [], start, 0
    magic = struct.pack("<I", MAGIC)
    while True:
        pos = data.find(magic, pos, end)
        if pos < 0:
            break
        version, header_size = struct.unpack_from("<HH", data, pos + 4)
        size, = struct.unpack_from("<Q", data, pos + 8)
        if version != 1 or header_size != 16 or pos + 16 + size > end:
            raise FatbinError(f"fat binary at {pos:#x}: version {version}, header {header_size}, size {size}: not understood")
        p, blob_end = pos + 16, pos + 16 + size
        while p < blob_end:
            kind, _ver, entry_header = struct.unpack_from("<HHI", data, p)
            payload, = struct.unpack_from("<Q", data, p + 8)
            sm, = struct.unpack_from("<I", data, p + 28)
            if kind not in (KIND_PTX, KIND_ELF) or not 0x40 <= entry_header <= 0x200 or p + entry_header + payload > blob_end:
                raise FatbinError(f"entry at {p:#x} of the fat binary at {pos:#x}: kind {kind}, header {entry_header}, "
                                  f"payload {payload}: not understood")
            out.append(dict(blob=pos, offset=p, header=entry_header, payload=(p + entry_header, payload), kind=kind, sm=sm))
            p += entry_header + payload
        if p != blob_end:
            raise FatbinError(f"the entries of the fat binary at {pos:#x} end at {p:#x}, not at {blob_end:#x}")
        blobs += 1
        pos = blob_end
    return out


def kept(entry: dict, keep_sm: int) -> bool:
    return entry["sm"] == keep_sm if entry["kind"] == KIND_ELF else entry["sm"] <= keep_sm


def digest(data, entry) -> str:
    start, size = entry["payload"]
    return hashlib.sha256(data[entry["offset"]:start]).hexdigest() + hashlib.sha256(data[start:start + size]).hexdigest()


def prune(path: str, keep_sm: int, dry_run: bool = False) -> dict:
    """Zeroes the payloads no sm_<keep_sm> GPU can use; returns what it kept and zeroed."""
    with open(path, "rb") as f:
        original = f.read()
    data = bytearray(original)
    try:
        found = sections(original)
    except FatbinError as e:
        return dict(file=path, skipped=str(e))
    report = dict(file=path, bytes=len(data), fatbin_bytes=0, kept={}, zeroed={}, fat_binaries=0)
    spans = [found[name] for name in SECTIONS if name in found]
    if not spans:
        report["skipped"] = "no " + " or ".join(SECTIONS) + " section"
        return report
    listed = [e for start, size in spans for e in entries(original, start, start + size)]
    report["fatbin_bytes"] = sum(size for _, size in spans)
    report["fat_binaries"] = len({e["blob"] for e in listed})
    before = {e["offset"]: digest(original, e) for e in listed}
    for e in listed:
        name = f"{'sm' if e['kind'] == KIND_ELF else 'ptx'}_{e['sm']}"
        bucket = report["kept" if kept(e, keep_sm) else "zeroed"]
        bucket[name] = bucket.get(name, 0) + e["payload"][1]
        if not kept(e, keep_sm):
            p, n = e["payload"]
            data[p:p + n] = bytes(n)
    usable_blobs = {e["blob"] for e in listed if kept(e, keep_sm)}
    report["fat_binaries_without_kept_code"] = report["fat_binaries"] - len(usable_blobs)
    if dry_run or not report["zeroed"]:
        return report
    after = bytes(data)
    relisted = [e for start, size in spans for e in entries(after, start, start + size)]
    if [(e["offset"], e["header"], e["payload"], e["kind"], e["sm"]) for e in relisted] != \
       [(e["offset"], e["header"], e["payload"], e["kind"], e["sm"]) for e in listed]:
        raise FatbinError(f"{path}: the entries changed while zeroing")
    for e in relisted:
        if original[e["offset"]:e["payload"][0]] != after[e["offset"]:e["payload"][0]]:
            raise FatbinError(f"{path}: the header at {e['offset']:#x} changed")
        if kept(e, keep_sm) and digest(after, e) != before[e["offset"]]:
            raise FatbinError(f"{path}: the kept payload at {e['offset']:#x} changed")
    edges = sorted(spans)
    outside = [(0, edges[0][0])] + [(a + n, b) for (a, n), (b, _) in zip(edges, edges[1:])] + [(edges[-1][0] + edges[-1][1], len(after))]
    if any(original[a:b] != after[a:b] for a, b in outside):
        raise FatbinError(f"{path}: bytes outside {' and '.join(SECTIONS)} changed")
    with open(path, "r+b") as f:
        f.write(after)
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep-sm", type=int, required=True, help="the SM version kept, e.g. 90 for H100/H200")
    ap.add_argument("--dry-run", action="store_true", help="say what would be zeroed, write nothing")
    ap.add_argument("--json", default="", help="also write every file's report here")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    reports, status = [], 0
    for path in args.files:
        try:
            r = prune(path, args.keep_sm, args.dry_run)
        except (FatbinError, OSError) as e:
            r, status = dict(file=path, error=str(e)), 1
        reports.append(r)
        if "error" in r:
            print(f"fatbin_prune: {path}: FAILED: {r['error']}")
        elif "zeroed" not in r or not r.get("fat_binaries"):
            print(f"fatbin_prune: {path}: unchanged ({r.get('skipped', 'nothing to zero')})")
        else:
            mib = lambda d: sum(d.values()) / 2**20  # noqa: E731
            print(f"fatbin_prune: {path}: {r['fat_binaries']} fat binaries, kept {mib(r['kept']):.1f} MiB "
                  f"({', '.join(sorted(r['kept']))}), zeroed {mib(r['zeroed']):.1f} MiB ({', '.join(sorted(r['zeroed']))}); "
                  f"{r['fat_binaries_without_kept_code']} fat binaries had no code for sm_{args.keep_sm}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
