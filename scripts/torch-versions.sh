#!/usr/bin/env bash
# torch 2.14.1 and 2.15.0 (with NCCL 2.30.7 and NVSHMEM 3.7.2) brought to the GPU host, which reaches
# no index, in parts small enough to ride along with device calls (issue 45; gpu-check's section
# `torchversions` runs under them, docs/gpu-check.md says how).
#
# On a machine that reaches PyPI:
#   scripts/torch-versions.sh fetch     the cp312 manylinux x86_64 wheels into .whl/torch-wheels: torch 2.14.1
#                                       (cu130) and 2.15.0 (cu132), nvidia-nccl-cu13 2.30.7, nvidia-nvshmem-cu13 3.7.2
#   scripts/torch-versions.sh pack      what runs needs, made small, in parts of TORCH_PARTS_MIB (44) MiB under
#                                       .whl/torch-parts-all/ with manifest.txt (sha256 of every part and archive)
#   scripts/torch-versions.sh batch K   .whl/torch-parts/ emptied, then batch K (0-based) of the parts put there
#                                       (hard links) with the manifest: carry .whl/torch-parts in one device call
#   scripts/torch-versions.sh batches   how many batches there are, and what each holds
# On the GPU host (from the checkout's root, /tmp kept between calls while the machine stays warm):
#   scripts/torch-versions.sh stage     the carried parts copied to /tmp/ncclpool-torch-parts and checked
#                                       against the manifest (a bad one is removed and fails the call);
#                                       prints the parts still missing; unpacks every archive whose parts
#                                       are all there into /tmp/ncclpool-torch/<version> (once)
#   scripts/torch-versions.sh assemble  the unpacking alone (stage and gpu-check's section call it)
#   scripts/torch-versions.sh ready V   exit 0 when /tmp/ncclpool-torch/V is ready to run, else says what is missing
#
# What pack keeps: the torch wheel's packages (torch with its headers: SGLang's JIT build of its
# allocator needs them; functorch, torchgen, the dist-info) without static libraries, protoc and
# torch/share; libnccl.so.2 of the NCCL wheel; the .so files of the NVSHMEM wheel (not its bitcode
# or static library). Every shared library loses its static symbol table and debug sections (strip
# --strip-unneeded; the dynamic symbols stay). Not the CUDA libraries (cuBLAS, cuDNN, the runtime
# ...) nor triton: the host's CUDA 13.0 ones serve both versions (run by hand, docs/python.md). The GPU code of every library is
# cut to one GPU generation (TORCH_VERSIONS_SM=90, H100 and H200: scripts/fatbin_prune.py zeroes the
# cubins for other GPUs, so that they compress to nothing; TORCH_VERSIONS_SM=all keeps everything).
# Archives: nvidia-nccl-2.30.7-nvshmem-3.7.2, torch-2.14.1, torch-2.15.0 (.tar.xz, xz
# $TORCH_VERSIONS_XZ, default -6 -T2: on the build machine's 2 busy cores pack took 6 minutes for 8
# parts, 349630800 bytes; -3 took 8 for 372828764 bytes, 9 parts), one stream cut into parts.
# Unpacked, /tmp/ncclpool-torch/<v>
# holds torch and nvidia/nccl (2.15.0 also nvidia/nvshmem): PYTHONPATH=/tmp/ncclpool-torch/<v> first.
#
# Folders (for tests): TORCH_WHEELS, TORCH_PARTS_ALL, TORCH_PARTS_CARRY, TORCH_PARTS_STAGE,
# TORCH_VERSIONS_ROOT; TORCH_PARTS_BATCH_MIB (default: the part size) bounds what one batch carries;
# TORCH_PARTS_BYTES and TORCH_PARTS_BATCH_BYTES give both in bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${TORCH_WHEELS:-.whl/torch-wheels}
ALL=${TORCH_PARTS_ALL:-.whl/torch-parts-all}
CARRY=${TORCH_PARTS_CARRY:-.whl/torch-parts}
STAGE=${TORCH_PARTS_STAGE:-/tmp/ncclpool-torch-parts}
ROOT=${TORCH_VERSIONS_ROOT:-/tmp/ncclpool-torch}
PART_BYTES=${TORCH_PARTS_BYTES:-$(( ${TORCH_PARTS_MIB:-44} << 20 ))}
BATCH_BYTES=${TORCH_PARTS_BATCH_BYTES:-$(( ${TORCH_PARTS_BATCH_MIB:-0} << 20 ))}
(( BATCH_BYTES > 0 )) || BATCH_BYTES=$PART_BYTES
SM=${TORCH_VERSIONS_SM:-90}
XZ=${TORCH_VERSIONS_XZ:--6 -T2}
TORCHES=(2.14.1 2.15.0)
NCCL=2.30.7 NVSHMEM=3.7.2
NVSHMEM_FOR=${TORCH_VERSIONS_NVSHMEM_FOR:-2.15.0}  # the versions that need NVSHMEM 3.7.2 (the host's 3.4.5 fails 2.15's import)
LIBS=nvidia-nccl-$NCCL-nvshmem-$NVSHMEM

say() { echo "torch-versions: $*"; }
die() { echo "torch-versions: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

fetch() {
  mkdir -p "$WHEELS"
  local req
  for req in torch==2.14.1 torch==2.15.0 "nvidia-nccl-cu13==$NCCL" "nvidia-nvshmem-cu13==$NVSHMEM"; do
    # One pip call per package: two versions of torch in one call are a conflict to pip.
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_18_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$WHEELS" "$req"
  done
  ls -l "$WHEELS"
}

wheel() {  # glob under $WHEELS -> the one file
  local found
  # shellcheck disable=SC2206  # $1 is a glob
  found=("$WHEELS"/$1)
  [ -f "${found[0]}" ] || die "no $WHEELS/$1: run 'scripts/torch-versions.sh fetch' first"
  echo "${found[0]}"
}

# prune DIR: every shared library under it without its static symbol table and debug sections (strip
# --strip-unneeded: what the dynamic linker reads, .dynsym, stays), and its GPU code for other GPUs
# than sm_$SM zeroed (scripts/fatbin_prune.py)
prune() {
  local log=$1.prune.log f before sections
  while IFS= read -r -d '' f; do
    sections=$(readelf -SW "$f" 2>/dev/null) || true  # whole: grep -q on a pipe would stop readelf (pipefail)
    if [[ "$sections" == *" .symtab "* || "$sections" == *" .debug_info "* ]]; then
      before=$(size "$f")
      strip --strip-unneeded "$f" || die "strip failed on $f"
      say "${f#"$1"/}: stripped, $before -> $(size "$f") bytes"
    fi
  done < <(find "$1" -type f \( -name '*.so' -o -name '*.so.*' \) -print0)
  [ "$SM" = all ] && return 0
  find "$1" -type f \( -name '*.so' -o -name '*.so.*' \) -print0 | sort -z |
    xargs -0 -r python3 scripts/fatbin_prune.py --keep-sm "$SM" >"$log" || { cat "$log"; die "fatbin_prune failed (above)"; }
  grep -v ': unchanged (' "$log" | sed "s|$1/||" || true
}

compress() {  # dir archive: a tar of dir's content, xz-compressed, names sorted (the same bytes every time)
  tar --sort=name --owner=0 --group=0 --numeric-owner -C "$1" -cf - . | xz $XZ -c >"$2"
}

pack() {
  local v t0
  command -v xz >/dev/null && command -v strip >/dev/null && command -v readelf >/dev/null || die "pack needs xz, strip and readelf"
  work=$(mktemp -d "${TMPDIR:-/tmp}/ncclpool-torch-pack.XXXXXX")  # global: the EXIT trap runs after pack returns
  trap 'rm -rf "${work:-}"' EXIT
  t0=$(date +%s)
  mkdir -p "$work/libs" "$work/archives"
  unzip -q "$(wheel "nvidia_nccl_cu13-$NCCL-*.whl")" 'nvidia/nccl/lib/libnccl.so.2' -d "$work/libs"
  unzip -q "$(wheel "nvidia_nvshmem_cu13-$NVSHMEM-*.whl")" 'nvidia/nvshmem/lib/*.so*' -d "$work/libs"
  prune "$work/libs"
  compress "$work/libs" "$work/archives/$LIBS.tar.xz"
  say "$LIBS.tar.xz: $(size "$work/archives/$LIBS.tar.xz") bytes ($(( $(date +%s) - t0 )) s so far)"
  for v in "${TORCHES[@]}"; do
    mkdir -p "$work/torch-$v"
    unzip -q "$(wheel "torch-$v-cp312-cp312-manylinux*_x86_64.whl")" -d "$work/torch-$v"
    rm -rf "$work/torch-$v/torch/share" "$work/torch-$v"/torch/bin/protoc*
    find "$work/torch-$v" -name '*.a' -delete
    prune "$work/torch-$v"
    compress "$work/torch-$v" "$work/archives/torch-$v.tar.xz"
    rm -rf "$work/torch-$v"
    say "torch-$v.tar.xz: $(size "$work/archives/torch-$v.tar.xz") bytes ($(( $(date +%s) - t0 )) s so far)"
  done
  split_archives "$work/archives/$LIBS.tar.xz" "${TORCHES[@]/#/$work/archives/torch-}"
}

# split ARCHIVE.tar.xz... : one stream of every archive, in order, cut into parts of $PART_MIB MiB, and
# manifest.txt: every part's sha256 and size, every archive's sha256, size and offset in the stream.
split_archives() {
  local a offset=0 part
  rm -rf "$ALL"
  mkdir -p "$ALL"
  {
    echo "# ncclpool torch-versions manifest 1 ($(date -u +%FT%TZ)): scripts/torch-versions.sh"
    echo "partsize $PART_BYTES"
    echo "sm $SM"
    echo "xz $XZ"
    local v
    for v in "${TORCHES[@]}"; do
      if [[ " $NVSHMEM_FOR " == *" $v "* ]]; then echo "libs $v nccl nvshmem"; else echo "libs $v nccl"; fi
    done
    for a in "$@"; do
      a=${a%.tar.xz}.tar.xz
      echo "archive $(basename "$a") $(sha "$a") $(size "$a") $offset"
      offset=$(( offset + $(size "$a") ))
    done
  } >"$ALL/manifest.txt"
  for a in "$@"; do cat "${a%.tar.xz}.tar.xz"; done | split -b "$PART_BYTES" -d -a 3 - "$ALL/part-"
  for part in "$ALL"/part-*; do echo "part $(basename "$part") $(sha "$part") $(size "$part")"; done >>"$ALL/manifest.txt"
  say "$(find "$ALL" -maxdepth 1 -name 'part-*' | wc -l) parts, $(du -cb "$ALL"/part-* | tail -1 | cut -f1) bytes, in $ALL ($(batch_plan | wc -l) batches of at most $BATCH_BYTES bytes)"
}

manifest_parts() { awk '$1 == "part" {print $2, $3, $4}' "$1"; }   # name sha bytes
manifest_archives() { awk '$1 == "archive" {print $2, $3, $4, $5}' "$1"; }  # name sha bytes offset

batch_plan() {  # one line per batch: the parts it holds (in order, at most $BATCH_BYTES bytes together)
  [ -f "$ALL/manifest.txt" ] || die "no $ALL/manifest.txt: run 'scripts/torch-versions.sh pack' first"
  manifest_parts "$ALL/manifest.txt" | awk -v max="$BATCH_BYTES" '
    { if (n > 0 && sum + $3 > max) { print line; line = ""; sum = 0; n = 0 }
      line = line (n ? " " : "") $1; sum += $3; n++ }
    END { if (n) print line }'
}

batch() {
  local k=${1:?usage: scripts/torch-versions.sh batch K}
  local plan count parts p
  plan=$(batch_plan)
  count=$(echo "$plan" | wc -l)
  [[ "$k" =~ ^[0-9]+$ ]] && (( k < count )) || die "batch $k: there are $count batches (0 to $(( count - 1 )))"
  parts=$(echo "$plan" | sed -n "$(( k + 1 ))p")
  rm -rf "$CARRY"
  mkdir -p "$CARRY"
  cp "$ALL/manifest.txt" "$CARRY/"
  for p in $parts; do ln "$ALL/$p" "$CARRY/$p" 2>/dev/null || cp "$ALL/$p" "$CARRY/$p"; done
  say "batch $k of $count (0-based) in $CARRY: $parts ($(du -cb "$CARRY" | tail -1 | cut -f1) bytes with the manifest); carry $CARRY and run 'scripts/torch-versions.sh stage'"
}

batches() {
  batch_plan | awk '{print "batch " NR - 1 ": " $0}'
}

# part_ok NAME: the staged part is there with the manifest's sha256 (checked once: a marker keeps the result)
part_ok() {
  local name=$1 want bytes
  read -r want bytes < <(manifest_parts "$STAGE/manifest.txt" | awk -v n="$name" '$1 == n {print $2, $3}')
  [ -f "$STAGE/$name" ] || return 1
  [ "$(cat "$STAGE/$name.ok" 2>/dev/null)" = "$want" ] && [ "$(size "$STAGE/$name")" = "$bytes" ] && return 0
  if [ "$(sha "$STAGE/$name")" = "$want" ]; then echo "$want" >"$STAGE/$name.ok"; return 0; fi
  return 2
}

stage() {
  local bad=0 p name missing=() here=0 total carried=" "
  mkdir -p "$STAGE"
  if [ -f "$CARRY/manifest.txt" ]; then
    if ! cmp -s "$CARRY/manifest.txt" "$STAGE/manifest.txt"; then
      [ -f "$STAGE/manifest.txt" ] && say "a new manifest: every staged part is checked against it"
      rm -f "$STAGE"/*.ok
      cp "$CARRY/manifest.txt" "$STAGE/manifest.txt"
    fi
  fi
  [ -f "$STAGE/manifest.txt" ] || die "no manifest carried ($CARRY/manifest.txt) nor staged ($STAGE/manifest.txt)"
  for p in "$CARRY"/part-*; do
    [ -f "$p" ] || continue
    cp "$p" "$STAGE/$(basename "$p").new" && mv "$STAGE/$(basename "$p").new" "$STAGE/$(basename "$p")"
    rm -f "$STAGE/$(basename "$p").ok"
    carried+="$(basename "$p") "
  done
  total=$(manifest_parts "$STAGE/manifest.txt" | wc -l)
  while read -r name _ _; do
    if part_ok "$name"; then
      here=$(( here + 1 ))
    elif [[ "$carried" == *" $name "* ]]; then
      say "BAD: $name, carried now, does not match the manifest's sha256: removed (carry it again)"
      rm -f "$STAGE/$name" "$STAGE/$name.ok"
      bad=1
      missing+=("$name")
    elif [ -f "$STAGE/$name" ]; then  # staged by an earlier call for an earlier manifest
      say "$name, staged before, does not match this manifest: removed"
      rm -f "$STAGE/$name" "$STAGE/$name.ok"
      missing+=("$name")
    else
      missing+=("$name")
    fi
  done < <(manifest_parts "$STAGE/manifest.txt")
  say "$here of $total parts staged in $STAGE"
  if [ ${#missing[@]} -gt 0 ]; then say "missing ${#missing[@]}: ${missing[*]}"; else say "every part is here"; fi
  assemble || true
  return $bad
}

# archive_parts NAME: the parts an archive's bytes lie in (its offset and size in the stream)
archive_parts() {
  local name=$1 partsize
  partsize=$(awk '$1 == "partsize" {print $2}' "$STAGE/manifest.txt")
  manifest_archives "$STAGE/manifest.txt" | awk -v n="$name" -v ps="$partsize" '$1 == n {
    for (i = int($4 / ps); i <= int(($4 + $3 - 1) / ps); i++) printf "part-%03d %d\n", i, i * ps }'
}

dest_of() {  # archive name -> the folder it unpacks into
  case $1 in
    torch-*.tar.xz) local v=${1#torch-}; echo "$ROOT/${v%.tar.xz}" ;;
    *) echo "$ROOT/libs" ;;
  esac
}

unxz_stdout() {  # file.xz -> stdout: xz, or Python's lzma where the host has no xz
  if command -v xz >/dev/null; then xz -d -T0 -c "$1"; else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer, 1 << 20)' "$1"; fi
}

# unpack NAME: the archive put together from its parts, checked, unpacked (once: a marker with its sha256)
unpack() {
  local name=$1 want bytes offset dest first first_offset="" p parts=() missing=()
  read -r want bytes offset < <(manifest_archives "$STAGE/manifest.txt" | awk -v n="$name" '$1 == n {print $2, $3, $4}')
  dest=$(dest_of "$name")
  [ "$(cat "$dest/.unpacked" 2>/dev/null)" = "$want" ] && return 0
  while read -r p first; do
    [ -n "$first_offset" ] || first_offset=$first
    if part_ok "$p"; then parts+=("$STAGE/$p"); else missing+=("$p"); fi
  done < <(archive_parts "$name")
  if [ ${#missing[@]} -gt 0 ]; then
    say "$name waits for ${missing[*]}"
    return 2
  fi
  # head stops reading at the archive's end (the last part may go on with the next archive): tail's
  # broken pipe is no error here; the sha256 below judges what was written.
  { cat "${parts[@]}" | tail -c +$(( offset - first_offset + 1 )) | head -c "$bytes" >"$STAGE/$name"; } 2>/dev/null || true
  if [ "$(sha "$STAGE/$name")" != "$want" ]; then
    rm -f "$STAGE/$name"
    say "$name: put together, its sha256 is not the manifest's"
    return 1
  fi
  rm -rf "$dest" "$dest.tmp"
  mkdir -p "$dest.tmp"
  if ! unxz_stdout "$STAGE/$name" | tar -x -C "$dest.tmp"; then
    rm -rf "${dest:?}.tmp" "${STAGE:?}/$name"
    say "$name: unpacking failed"
    return 1
  fi
  mv "$dest.tmp" "$dest"
  echo "$want" >"$dest/.unpacked"
  rm -f "$STAGE/$name"
  say "$name: unpacked in $dest ($(du -sh "$dest" | cut -f1))"
}

# link V: the NCCL (and NVSHMEM) of the libs archive put beside torch V (hard links: one copy on disk)
link_libs() {
  local v=$1 lib
  for lib in $(awk -v v="$v" '$1 == "libs" && $2 == v {$1 = $2 = ""; print}' "$STAGE/manifest.txt"); do
    [ -d "$ROOT/$v/nvidia/$lib" ] && continue
    mkdir -p "$ROOT/$v/nvidia"
    cp -al "$ROOT/libs/nvidia/$lib" "$ROOT/$v/nvidia/$lib"
  done
}

assemble() {
  local name status=0 v
  [ -f "$STAGE/manifest.txt" ] || { say "nothing staged ($STAGE/manifest.txt missing)"; return 2; }
  while read -r name _; do
    unpack "$name" || status=1
  done < <(manifest_archives "$STAGE/manifest.txt")
  for v in $(awk '$1 == "libs" {print $2}' "$STAGE/manifest.txt"); do
    [ -f "$ROOT/$v/.unpacked" ] && [ -f "$ROOT/libs/.unpacked" ] && link_libs "$v"
  done
  return $status
}

ready() {  # V: 0 when torch V and its libraries are unpacked; else says what is missing
  local v=${1:?usage: scripts/torch-versions.sh ready VERSION} lib name p want missing=()
  if [ ! -f "$STAGE/manifest.txt" ]; then echo "nothing staged ($STAGE/manifest.txt missing)"; return 1; fi
  for name in "torch-$v.tar.xz" "$(manifest_archives "$STAGE/manifest.txt" | awk '$1 !~ /^torch-/ {print $1}')"; do
    want=$(manifest_archives "$STAGE/manifest.txt" | awk -v n="$name" '$1 == n {print $2}')
    if [ -z "$want" ]; then echo "no $name in the manifest"; return 1; fi
    [ "$(cat "$(dest_of "$name")/.unpacked" 2>/dev/null)" = "$want" ] && continue
    while read -r p _; do part_ok "$p" || missing+=("$p"); done < <(archive_parts "$name")
    [ ${#missing[@]} -gt 0 ] || missing+=("($name not unpacked: run scripts/torch-versions.sh assemble)")
  done
  if [ ${#missing[@]} -gt 0 ]; then echo "missing parts: $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')"; return 1; fi
  for lib in $(awk -v v="$v" '$1 == "libs" && $2 == v {$1 = $2 = ""; print}' "$STAGE/manifest.txt"); do
    [ -d "$ROOT/$v/nvidia/$lib" ] || { echo "$ROOT/$v/nvidia/$lib missing (run scripts/torch-versions.sh assemble)"; return 1; }
  done
  echo "$ROOT/$v"
}

case "${1:-}" in
  fetch) fetch ;;
  pack) pack ;;
  split) shift; split_archives "$@" ;;
  batch) batch "${2:-}" ;;
  batches) batches ;;
  stage) stage ;;
  assemble) assemble ;;
  ready) ready "${2:-}" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
