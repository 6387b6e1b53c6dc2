"""Carry Triton's compiled kernels from one device call to the next.

Every device call starts on a bare machine, and compiling the kernels a bench or a GPU test
needs takes most of a short call: the twentieth session's first call spent about 140 of its
183 s compiling (18 GPU twins in 79 s, the first bench case 78 s for three rounds). Triton
keeps what it compiles under TRITON_CACHE_DIR, one folder a kernel specialization, keyed by
the kernel's source, its constants and Triton's own build: an entry made on one machine of the
same image is a hit on the next, and an entry for a kernel that has since changed is never
looked up again (it only takes room).

    python3 tools/gpu_cache.py pack .gpu/triton-cache $OUT/triton-cache.tgz   # on the device, last
    python3 tools/gpu_cache.py unpack .gpu/triton-cache.tgz .gpu/triton-cache  # on the device, first

and between the two calls, here: copy the returned triton-cache.tgz to .gpu/ and carry .gpu.
tools/gpu_plan.sh does both ends, with its TRITON_CACHE_DIR. pack keeps the newest
entries that fit under --max-mib compressed (the device returns files of at most 16 MiB);
an entry is whole or absent, since Triton reads a folder's files together.
"""
import argparse
import io
import signal
import sys
import tarfile
from pathlib import Path

# The device returns files of at most 16 MiB: a margin under it for the archive's last block.
DEFAULT_MAX_MIB = 15


def entries_newest_first(cache: Path) -> list[Path]:
    """The cache's entry folders, the most recently written first (a folder's newest file)."""
    folders = [p for p in cache.iterdir() if p.is_dir()]
    return sorted(folders, key=lambda p: max((f.stat().st_mtime for f in p.iterdir()), default=0.0), reverse=True)


def entry_archive(folder: Path) -> bytes:
    """One entry folder as a gzip-compressed tar of its own (its size once packed)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return buffer.getvalue()


def pack(cache: Path, archive: Path, max_mib: float = DEFAULT_MAX_MIB) -> tuple[int, int]:
    """Write the newest entries of `cache` that fit in max_mib (compressed) to `archive`, a
    tar.gz of entry folders; returns (entries packed, entries left out). The archive is written
    beside its final name first and removed if the pack is cut off: never a half archive."""
    budget = int(max_mib * 2**20)
    kept, left_out, used = [], 0, 0
    for folder in entries_newest_first(cache):
        size = len(entry_archive(folder))
        if used + size > budget:
            left_out += 1
            continue
        kept.append(folder)
        used += size
    partial = archive.with_name(archive.name + ".partial")
    try:
        with tarfile.open(partial, mode="w:gz") as tar:
            for folder in kept:
                tar.add(folder, arcname=folder.name)
    except BaseException:  # a pack cut off (main turns SIGTERM into SystemExit) leaves nothing
        partial.unlink(missing_ok=True)
        raise
    partial.replace(archive)
    return len(kept), left_out


def unpack(archive: Path, cache: Path) -> int:
    """Extract `archive` (pack's) into `cache`, leaving entries already there as they are;
    returns the entries added. Members outside one entry folder are refused."""
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:gz") as tar:
        members = tar.getmembers()
        for member in members:
            parts = Path(member.name).parts
            if member.name.startswith("/") or ".." in parts or not (member.isdir() or member.isfile()):
                raise ValueError(f"{archive}: {member.name!r} is not a file of a cache entry: not a pack archive")
        new = {Path(m.name).parts[0] for m in members} - {p.name for p in cache.iterdir()}
        tar.extractall(cache, members=[m for m in members if Path(m.name).parts[0] in new], filter="data")
    return len(new)


def stop_on_sigterm(signum, frame):
    """timeout(1) ends a device command's stage with SIGTERM: exit through pack's cleanup."""
    sys.exit(128 + signum)


def main(argv=None):
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="the cache's newest entries into one tar.gz (on the device, at the end)")
    p.add_argument("cache", type=Path)
    p.add_argument("archive", type=Path)
    p.add_argument("--max-mib", type=float, default=DEFAULT_MAX_MIB,
                   help=f"the archive's largest size in MiB (default {DEFAULT_MAX_MIB}: the device returns 16)")
    u = sub.add_parser("unpack", help="a pack archive into the cache (on the device, first)")
    u.add_argument("archive", type=Path)
    u.add_argument("cache", type=Path)
    args = parser.parse_args(argv)
    if args.command == "pack":
        if not args.cache.is_dir():
            sys.exit(f"gpu_cache pack: no cache at {args.cache} (TRITON_CACHE_DIR): nothing was compiled there")
        kept, left_out = pack(args.cache, args.archive, args.max_mib)
        size = args.archive.stat().st_size / 2**20
        print(f"gpu_cache: {kept} entries packed into {args.archive} ({size:.1f} MiB)"
              + (f", {left_out} older ones left out (over {args.max_mib} MiB)" if left_out else ""))
    else:
        added = unpack(args.archive, args.cache)
        print(f"gpu_cache: {added} entries added to {args.cache} from {args.archive}")


if __name__ == "__main__":
    main()
