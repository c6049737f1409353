"""vLLM's sleep mode, timed: what ``POST /sleep`` frees and how long ``POST /wake_up`` takes.

vLLM's sleep (``--enable-sleep-mode``; ``/sleep?level=N``) frees the GPU for another job:
level 1 copies the weights to pinned host memory and discards the KV cache, level 2 discards
both (the caller then reloads weights, as RL trainers do). Waking copies the weights back over
the host link, all chips at once, each its own share: the wake time is a chip's weight bytes
over that link's bandwidth. The KV cache comes back empty either way (the prefix cache is
cleared on sleep: its blocks are gone).

``HOST_LINK_GBS`` is the host-to-device copy bandwidth per chip, per direction: PCIe Gen5 x16
is 64 GB/s raw and pinned ``cudaMemcpy`` reaches about 55 GB/s of it (NVIDIA's bandwidthTest on
H100 SXM hosts); Grace-Hopper / Grace-Blackwell chips sit on NVLink-C2C (900 GB/s both ways,
450 each way, NVIDIA's GH200 datasheet).
"""

from __future__ import annotations

from dataclasses import dataclass

PCIE5_GBS = 55.0  # pinned host-to-device copy over PCIe Gen5 x16, achieved
C2C_GBS = 450.0  # NVLink-C2C, one direction
LEVELS = (1, 2)


def host_link_gbs(hardware: str) -> float:
    """Host-to-device bandwidth of one chip of ``hardware`` (a profile name), GB/s."""
    name = hardware.lower()
    return C2C_GBS if name.startswith(("gh200", "gb200", "gb300")) else PCIE5_GBS


def wake_seconds(weight_bytes_per_chip: float, hardware: str) -> float:
    """Seconds to copy one chip's weights back from the host (the chips copy in parallel)."""
    return weight_bytes_per_chip / (host_link_gbs(hardware) * 1e9)


@dataclass
class SleepState:
    """One engine process's sleep: ``level`` 0 while awake."""

    level: int = 0

    @property
    def asleep(self) -> bool:
        return self.level > 0
