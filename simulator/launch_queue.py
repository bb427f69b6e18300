"""The launch queue of an eager framework: one host thread issues a stage's kernels in order, the
GPU runs them in that order, and a host synchronisation (a device-to-host read the host must wait
for, such as Megatron-Core's token counts in its MoE dispatcher) empties the queue.

Between synchronisations the host runs ahead of the GPU, so a stretch of many cheap kernels (a Python
loop over local experts) and a stretch of few long kernels (attention, large GEMMs) overlap: the GPU
works off the long kernels while the host issues the cheap ones. A synchronisation ends that overlap:
the host waits until the GPU has drained its queue, then the GPU waits for the host to issue the next
kernel. With one synchronisation per MoE layer, a step whose host-heavy and GPU-heavy stretches
alternate between synchronisations takes nearer the sum of host and GPU time than their maximum.

Model (the usual two-resource queue, as in the launch-overhead analyses of eager PyTorch): kernel i
is issued when the host has spent ``host[0..i]`` seconds; it starts at the later of its issue and the
end of kernel i-1, and runs ``gpu[i]`` seconds. Over a stretch without synchronisation this gives,
with H the cumulative host seconds, G the cumulative GPU seconds and g0 the time the GPU frees up,

    end = G[n] + max(g0, max_i (H[i] - G[i-1])).

A synchronisation op moves the host to the GPU's end before it goes on. Seconds throughout."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OpStream:
    """A sequence of ops in issue order: host seconds to issue each, GPU seconds each runs, and
    whether the host waits for the GPU after it (a synchronisation)."""

    host_s: np.ndarray
    gpu_s: np.ndarray
    sync: np.ndarray

    @staticmethod
    def concat(streams: list["OpStream"]) -> "OpStream":
        """One stream of several, in order."""
        return OpStream(np.concatenate([s.host_s for s in streams]), np.concatenate([s.gpu_s for s in streams]),
                        np.concatenate([s.sync for s in streams]))


def run(stream: OpStream, host_t: float = 0.0, gpu_t: float = 0.0) -> tuple[float, float]:
    """(host time, GPU time) after issuing and running ``stream``, starting with the host at
    ``host_t`` and the GPU busy until ``gpu_t`` (seconds on one clock)."""
    cuts = np.flatnonzero(stream.sync) + 1
    start = 0
    for stop in [*cuts.tolist(), len(stream.gpu_s)]:
        if stop > start:
            h = host_t + np.cumsum(stream.host_s[start:stop])
            g = np.cumsum(stream.gpu_s[start:stop])
            gpu_t = float(g[-1] + max(gpu_t, float(np.max(h - (g - stream.gpu_s[start:stop])))))
            host_t = float(h[-1])
            if stream.sync[stop - 1]:
                host_t = max(host_t, gpu_t)
        start = stop
    return host_t, gpu_t


def steady_microbatch_seconds(forward: OpStream, backward: OpStream) -> tuple[float, float]:
    """GPU seconds of one micro-batch's forward and backward in the steady state of back-to-back
    micro-batches (the GPU's time from the end of one micro-batch to the end of the next's forward,
    and from there to the end of its backward). Where every micro-batch synchronises the host at
    least once, the queue empties there, so the third micro-batch repeats the second exactly."""
    host_t = gpu_t = 0.0
    for _ in range(2):
        host_t, gpu_t = run(backward, *run(forward, host_t, gpu_t))
    mid_host, mid_gpu = run(forward, host_t, gpu_t)
    _, end = run(backward, mid_host, mid_gpu)
    return mid_gpu - gpu_t, end - mid_gpu
