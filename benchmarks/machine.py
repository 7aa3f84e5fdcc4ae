"""The machine and the versions a set of numbers was measured on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Machine", "describe"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    cores: int
    cpu_model: str
    memory_gib: float
    load_avg_1m: float
    python: str
    torch: str
    torch_threads: int
    trainspec: str
    temp_fs: str  # the file system under the temp dir, where checkpoint benchmarks write


def describe() -> Machine:
    import torch

    import trainspec

    return Machine(
        cores=os.cpu_count() or 0,
        cpu_model=_cpu_model(),
        memory_gib=_memory_kib() / 2**20,
        load_avg_1m=os.getloadavg()[0],
        python=platform.python_version(),
        torch=torch.__version__,
        torch_threads=torch.get_num_threads(),
        trainspec=trainspec.__version__,
        temp_fs=_file_system(Path(tempfile.gettempdir())),
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_kib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _file_system(path: Path) -> str:
    """``ext4`` for the mount holding ``path`` (the type only: no device or path of the
    machine goes into a published table); "unknown" where df cannot tell."""
    try:
        out = subprocess.run(["df", "--output=fstype", str(path)], capture_output=True,
                             text=True, timeout=10, check=True).stdout.split("\n")[1].split()
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"
    return out[0] if len(out) == 1 else "unknown"


if __name__ == "__main__":
    print(describe(), file=sys.stdout)
