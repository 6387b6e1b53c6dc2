"""tools/gpu_cache.py: Triton's cache packed on one device call and unpacked on the next."""
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))
import gpu_cache  # noqa: E402


def make_entry(cache: Path, name: str, size: int, age_s: float) -> Path:
    """A cache entry folder with one file of random (incompressible) bytes, written age_s ago."""
    folder = cache / name
    folder.mkdir(parents=True)
    path = folder / "kernel.cubin"
    path.write_bytes(os.urandom(size))
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return folder


def test_pack_then_unpack_gives_the_same_files(tmp_path):
    cache = tmp_path / "cache"
    for i in range(3):
        make_entry(cache, f"entry{i}", 1000 + i, age_s=i)
    archive = tmp_path / "out" / "triton-cache.tgz"
    archive.parent.mkdir()
    assert gpu_cache.pack(cache, archive) == (3, 0)
    assert not archive.with_name(archive.name + ".partial").exists()
    restored = tmp_path / "restored"
    assert gpu_cache.unpack(archive, restored) == 3
    for i in range(3):
        name = f"entry{i}/kernel.cubin"
        assert (restored / name).read_bytes() == (cache / name).read_bytes()


def test_a_pack_cut_off_leaves_no_archive(tmp_path, monkeypatch):
    """The device's first try: timeout(1) stopped a pack midway and a .partial came back."""
    cache = tmp_path / "cache"
    for i in range(3):
        make_entry(cache, f"entry{i}", 1000, age_s=i)
    real_add, added = tarfile.TarFile.add, []

    def add_then_stop(self, name, *args, **kwargs):
        """The archive's second entry never comes (sizing each entry in memory goes on as usual)."""
        if str(self.name).endswith(".partial"):
            if added:
                raise SystemExit(143)
            added.append(name)
        real_add(self, name, *args, **kwargs)

    monkeypatch.setattr(tarfile.TarFile, "add", add_then_stop)
    archive = tmp_path / "c.tgz"
    with pytest.raises(SystemExit):
        gpu_cache.pack(cache, archive)
    assert added, "the pack was cut off while writing its archive"
    assert list(tmp_path.glob("c.tgz*")) == []


def test_pack_keeps_the_newest_entries_that_fit(tmp_path):
    cache = tmp_path / "cache"
    make_entry(cache, "old", 600_000, age_s=100)
    make_entry(cache, "new", 600_000, age_s=1)
    make_entry(cache, "newer", 300_000, age_s=0)
    archive = tmp_path / "c.tgz"
    assert gpu_cache.pack(cache, archive, max_mib=1.0) == (2, 1)
    with tarfile.open(archive) as tar:
        assert {Path(m.name).parts[0] for m in tar.getmembers()} == {"new", "newer"}


def test_unpack_leaves_entries_already_there(tmp_path):
    cache = tmp_path / "cache"
    make_entry(cache, "a", 100, age_s=0)
    make_entry(cache, "b", 100, age_s=0)
    archive = tmp_path / "c.tgz"
    gpu_cache.pack(cache, archive)
    target = tmp_path / "target"
    kept = make_entry(target, "a", 50, age_s=0)
    assert gpu_cache.unpack(archive, target) == 1
    assert (kept / "kernel.cubin").stat().st_size == 50
    assert (target / "b" / "kernel.cubin").exists()


def test_unpack_refuses_a_member_outside_the_cache(tmp_path):
    evil = tmp_path / "evil.tgz"
    payload = tmp_path / "x"
    payload.write_text("x")
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(payload, arcname="../escaped")
    with pytest.raises(ValueError, match="not a pack archive"):
        gpu_cache.unpack(evil, tmp_path / "cache")
    assert not (tmp_path / "escaped").exists()


COMPILE = """
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def add_one(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1.0)

src = ASTSource(add_one, {"x_ptr": "*fp32", "N": "constexpr"}, {"N": 64})
triton.compile(src, target=GPUTarget("cuda", 90, 32))
"""


def compile_with_cache(cache: Path):
    """COMPILE in a process of its own, from a file (triton.jit reads the kernel's source)."""
    script = cache.parent / "compile_add_one.py"
    script.write_text(COMPILE)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run([sys.executable, str(script)], check=True, env={**env, "TRITON_CACHE_DIR": str(cache)},
                   capture_output=True, timeout=300)


def test_an_unpacked_cache_is_a_hit_for_triton(tmp_path):
    """The point of the tool: Triton compiles a kernel (for sm_90, no GPU needed) into cache A;
    packed and unpacked into cache B, the same compile finds it there and writes nothing."""
    first, second = tmp_path / "a", tmp_path / "b"
    compile_with_cache(first)
    archive = tmp_path / "c.tgz"
    kept, _ = gpu_cache.pack(first, archive)
    assert kept >= 1
    gpu_cache.unpack(archive, second)

    def snapshot():
        return {p.relative_to(second): p.stat().st_mtime_ns for p in second.rglob("*") if p.is_file()}

    before = snapshot()
    compile_with_cache(second)
    assert snapshot() == before, "the second compile wrote to the cache: it missed"
