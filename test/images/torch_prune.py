#!/usr/bin/env python3
"""Prunes the seed002 job image (test/images/torch.sh) to what its job runs.

    torch_prune.py ROOTFS        # as root; run by torch.sh on the new rootfs

Debian's torch 1.13 depends on OpenCV, FFmpeg, Qt and GDAL (libtorch links
them), and through them on Mesa's drivers, LLVM and locales: about 1.4 GB,
which every node of a test imports. What the job loads is found by running
it, not listed: a probe in the rootfs (chroot) imports what main.py and
torch.distributed.launch import, all-reduces over gloo in a group of one,
and reports the files mapped into it. Kept: those, and the libraries that
the rootfs's programs and Python's own extension modules link (ldd). Removed:
every other shared library under /usr/lib/x86_64-linux-gnu (Mesa's
drivers, LLVM and the like, which only dlopen would load), libtorch's test
programs, and documentation, manuals and translations. The probe runs again
on the result, and any failure fails the build.
"""

import os
import shutil
import subprocess
import sys

PROBE = r"""
import argparse, os, resource, socket, subprocess, sys
import torch, torch.distributed as dist
import torch.distributed.launch, torch.distributed.run
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
t = torch.ones(4)
dist.all_reduce(t)
assert t.sum().item() == 4, t
dist.destroy_process_group()
with open("/proc/self/maps") as f:
    for line in f:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            print(fields[5].strip())
"""

LIBDIR = "usr/lib/x86_64-linux-gnu"
# dlopened by glibc itself, never mapped by a probe that resolves no name.
GLIBC_DLOPENED = ("libnss_", "libresolv", "gconv/")
REMOVED_TREES = [
    "usr/lib/libtorch-test",
    "usr/lib/python3/dist-packages/sympy/integrals/rubi/rubi_tests",
    "usr/share/doc",
    "usr/share/gdal",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/man",
    "usr/share/proj",
]


def resolve(root, path):
    """path (inside root) with every link followed as the chroot sees it,
    as a path inside root; None when it leads nowhere."""
    parts = [c for c in path.split("/") if c]
    done = []
    for _ in range(64 * 40):
        if not parts:
            return "/" + "/".join(done)
        c = parts.pop(0)
        if c == "..":
            done = done[:-1]
            continue
        host = os.path.join(root, *done, c)
        if os.path.islink(host):
            target = os.readlink(host)
            if target.startswith("/"):
                done = []
            parts = [t for t in target.split("/") if t and t != "."] + parts
            continue
        if c != "." and not os.path.lexists(host):
            return None
        if c != ".":
            done.append(c)
    return None


def chroot(root, *argv):
    return subprocess.run(["chroot", root, *argv], check=True, capture_output=True, text=True).stdout


def probe(root):
    """The files the job's modules map, as paths inside root."""
    mounted = not os.path.exists(os.path.join(root, "proc/self"))
    if mounted:  # the probe reads its maps
        subprocess.run(["mount", "-t", "proc", "proc", os.path.join(root, "proc")], check=True)
    try:
        return run_probe(root)
    finally:
        if mounted:
            subprocess.run(["umount", os.path.join(root, "proc")], check=True)


def run_probe(root):
    try:
        out = chroot(root, "python3", "-c", PROBE)
    except subprocess.CalledProcessError as e:
        sys.exit(f"torch_prune: the probe failed in {root}:\n{e.stderr}")
    return {resolve(root, p) for p in out.splitlines()}


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def linked(root):
    """The libraries the rootfs's programs and Python's extension modules
    link, as resolved paths inside root."""
    dirs = ["usr/bin", "usr/sbin", "usr/lib/python3.11/lib-dynload"]
    elves = []
    for d in dirs:
        top = os.path.join(root, d)
        for name in sorted(os.listdir(top)):
            p = os.path.join(top, name)
            if os.path.isfile(p) and not os.path.islink(p) and is_elf(p):
                elves.append("/" + os.path.relpath(p, root))
    keep = set()
    for e in elves:
        r = subprocess.run(["chroot", root, "ldd", e], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"
            parts = line.split("=>")
            target = (parts[1] if len(parts) == 2 else parts[0]).split("(")[0].strip()
            if target.startswith("/"):
                keep.add(resolve(root, target))
    return keep


def prune(root):
    keep = probe(root) | linked(root)
    libdir = os.path.join(root, LIBDIR)
    removed = 0
    for dirpath, _, files in os.walk(libdir):
        for name in files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, libdir)
            if ".so" not in name or rel.startswith(GLIBC_DLOPENED) or name.startswith(GLIBC_DLOPENED):
                continue
            if os.path.islink(p) or resolve(root, "/" + os.path.relpath(p, root)) in keep or not is_elf(p):
                continue
            removed += os.path.getsize(p)
            os.remove(p)
    # Links left pointing at nothing (the removed libraries' sonames).
    for dirpath, _, files in os.walk(libdir):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.islink(p) and resolve(root, "/" + os.path.relpath(p, root)) is None:
                os.remove(p)
    for tree in REMOVED_TREES:
        shutil.rmtree(os.path.join(root, tree), ignore_errors=True)
    torch_bin = os.path.join(root, "usr/lib/python3/dist-packages/torch/bin")
    if os.path.isdir(torch_bin):
        for name in os.listdir(torch_bin):
            if name.startswith("test_"):
                os.remove(os.path.join(torch_bin, name))
    probe(root)  # still runs
    print(f"torch_prune: removed {removed >> 20} MiB of libraries the job does not load")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: torch_prune.py ROOTFS")
    prune(sys.argv[1])
