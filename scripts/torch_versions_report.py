#!/usr/bin/env python3
"""One JSON of gpu-check's section torchversions (scripts/gpu-check-torch-versions.sh): every row it
printed and, per configuration folder ($OUT/torchversions-<config>/), the figures its files hold.

    scripts/torch_versions_report.py --rows ROWS.txt --out torchversions.json DIR...

Per folder: the versions line; the torch layer checks (CHECK lines counted, the failed ones named);
the copy-engine and PDL RESULT lines (and the PDL JSON's wrong/launches per mode); FSDP2 per mode
(steady step, device memory against plain, whether the losses equal plain's) and its losses line;
the decode table; SGLang's failure cases (rank 0's outcome each); the nccl2 hook probe's summary and
RESULT (or the refusal's); the time the configuration took. A file that is missing or unreadable
gives its key as null (the rows say why). Standard library only.
"""
import argparse
import datetime
import json
import os
import re
import statistics


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def load(path):
    text = read(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def first(pattern, text):
    m = re.search(pattern, text or "", re.M)
    return m.group(0) if m else None


def checks(text):
    if text is None:
        return None
    lines = re.findall(r"^CHECK (.*): (ok|FAILED|skipped)", text, re.M)
    return dict(ok=sum(s == "ok" for _, s in lines), failed=[n for n, s in lines if s == "FAILED"],
                skipped=sum(s == "skipped" for _, s in lines), result=first(r"^RESULT.*$", text))


def pdl(path):
    j = load(path)
    if j is None:
        return None
    rows = j.get("results") or j.get("rows") or []
    out = {}
    for r in rows:
        launch = r.get("launch") or ("graph" if r.get("graph") else "eager")
        out[f"{r.get('mode')} {launch}"] = r.get("unavailable") or r.get("error") or \
            f"{r.get('wrong_all_ranks', r.get('wrong'))}/{r.get('launches_all_ranks', r.get('launches'))}"
    return dict(nccl=j.get("nccl_version"), wrong_per_launches=out)


def fsdp2(folder):
    rows = load(os.path.join(folder, "fsdp2", "fsdp2.json"))
    text = read(os.path.join(folder, "fsdp2.txt"))
    if rows is None:
        return None
    modes = {}
    for r in rows:
        m = modes.setdefault(r["spec"], dict(step_ms=[], used_gib=[], unavailable=r.get("unavailable")))
        if "steady_step_ms" in r:
            m["step_ms"].append(r["steady_step_ms"])
        if "device_used_gib" in r:
            m["used_gib"].append(r["device_used_gib"])
    plain = modes.get("plain", {}).get("used_gib")
    out = {}
    for spec, m in modes.items():
        used = statistics.median(m["used_gib"]) if m["used_gib"] else None
        out[spec] = dict(steady_step_ms=statistics.median(m["step_ms"]) if m["step_ms"] else None, device_used_gib=used,
                         memory_vs_plain_pct=round((used / statistics.median(plain) - 1) * 100, 2) if used and plain else None,
                         unavailable=m["unavailable"])
    return dict(modes=out, losses=first(r"^losses:.*$", text))


def decode(folder):
    text = read(os.path.join(folder, "decode.txt"))
    if text is None:
        return None
    table = re.search(r"^decode all-reduce.*?^ratio.*?$", text, re.M | re.S)
    return dict(table=table.group(0).splitlines() if table else None, wrong=first(r"^WRONG RESULT.*$", text))


def sglang(folder):
    j = load(os.path.join(folder, "sglang.json"))
    if j is None:
        return None
    cases = {}
    for c in j.get("cases", []):
        outcomes = [r.get("outcome") for r in c.get("ranks", [])]
        cases[c["name"]] = dict(rc=c.get("rc"), rank0=outcomes[0] if outcomes else None, ranks=len(outcomes))
    return dict(cases=cases, failures=j.get("failures"))


def probe(folder, name):
    j = load(os.path.join(folder, f"{name}.json"))
    if j is None:
        return None
    keep = {k: j.get(k) for k in ("torch", "implementation", "nccl_loaded", "nccl_built", "use_nccl2", "alloc_conf", "result", "error")}
    keep["summary"] = j.get("summary")
    if name == "refusal":
        keep["ranks"] = j.get("rank_results")
    else:  # rank 0's per-segment table and the steps' counts, without the per-line detail
        ranks = j.get("rank_results") or []
        if ranks and ranks[0]:
            keep["segments_rank0"] = ranks[0].get("segments")
            keep["steps_rank0"] = [{k: s.get(k) for k in ("step", "groups", "window_exports", "ipc_register", "ipc_deregister",
                                                          "cleanup", "nccl_warnings", "torch_warnings", "alloc_ms", "trimmed_bytes",
                                                          "torch_segments_left", "seconds", "finished", "ncclpool_handles")
                                    if k in s} for s in ranks[0].get("steps", [])]
    return keep


def configuration(folder):
    name = os.path.basename(os.path.normpath(folder))[len("torchversions-"):]
    log = read(os.path.join(folder, "torch-layer.log"))
    return dict(
        config=name, versions=(read(os.path.join(folder, "versions.txt")) or "").strip() or None,
        torch_layer=checks(log),
        copy_engine={m: first(r"^RESULT.*$", read(os.path.join(folder, f"copyengine-{m}.log"))) for m in ("main", "off")},
        pdl={s: dict(result=first(r"^RESULT.*$", read(os.path.join(folder, f"pdl-{s}.log"))), **(pdl(os.path.join(folder, f"pdl-{s}.json")) or {}))
             for s in ("on", "auto") if os.path.exists(os.path.join(folder, f"pdl-{s}.log"))},
        fsdp2=fsdp2(folder), decode=decode(folder), sglang=sglang(folder),
        probe=probe(folder, "probe"), refusal=probe(folder, "refusal"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", required=True, help="the section's rows, one a line (gpu-check's summary format)")
    ap.add_argument("--out", required=True)
    ap.add_argument("folders", nargs="*")
    args = ap.parse_args(argv)
    rows = [line.rstrip("\n") for line in open(args.rows)] if os.path.exists(args.rows) else []
    times, current = {}, None
    for line in rows:  # "       time   123 s" after each configuration's rows
        m = re.match(r"^\S*\s+torchversions (\S+)", line)
        if m:
            current = m.group(1)
        m = re.match(r"^\s+time\s+(\d+) s$", line)
        if m and current:
            times[current] = int(m.group(1))
    # The commit is the caller's to state (NCCLPOOL_GPU_CHECK_COMMIT; the data folder's name and README
    # otherwise): a GPU host's copy of the work tree may carry a stale .git, whose HEAD would be wrong.
    commit = os.environ.get("NCCLPOOL_GPU_CHECK_COMMIT", "")
    configs = [configuration(f) for f in args.folders]
    for c in configs:
        c["seconds"] = times.get(c["config"])
    out = dict(made=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), commit=commit or None,
               failed_rows=[r for r in rows if r.startswith("FAIL")], rows=rows, configs=configs)
    with open(args.out + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"torch_versions_report: {len(configs)} configuration(s), {len(rows)} rows ({len(out['failed_rows'])} failed) -> {args.out}")


if __name__ == "__main__":
    main()
