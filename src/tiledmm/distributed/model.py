"""A scaling model of the distributed GEMMs, on paper: what P GPUs on one or several nodes would give.

Parts (every one a parameter of ``Machine``):

* a link is a latency plus a bandwidth into one GPU (``Link``): NVLink inside a node, a stated network
  between nodes (default 400 Gb/s InfiniBand a GPU, 50 GB/s), and the copy engines' reads of a peer's
  memory (the symmetric-memory engine);
* collectives on a link (NCCL's rings, bandwidth-optimal): a broadcast over q ranks costs
  (q - 1) latencies + bytes / bandwidth; an all-gather or a reduce-scatter (q - 1) * (latency +
  part / bandwidth); a group spanning nodes runs at the network's rate;
* a local product costs its flops at the GEMM rate of one GPU, a launch, and -- when it adds to C
  (beta = 1, every SUMMA panel after the first) -- a pass over C at ``c_pass_gbs``;
* overlap: a pipeline simulated panel by panel (chunk by chunk): a panel's transfer starts when the
  previous one on its stream is done and its receive buffer is free (the product ``depth`` panels
  back has read it), its product when the product before it is done and it has landed; so the time is
  max(compute, communication) per panel plus the exposed first panel and the pipeline's tail.
  ``overlap_slowdown`` charges a product that runs beside a transfer (NCCL's kernels take SMs).

``summa_time``, ``allgather_matmul_time`` and ``matmul_reducescatter_time`` return a ``Prediction``
(time, one-GPU time, speed-up, efficiency, what bounds it, the parts). ``summa_panels`` is the panel
schedule SUMMA uses by default: the candidate (first width, growth) the model finds fastest; the
panels must be the same on every rank, so it depends only on the problem, the grid and ``Machine``'s
defaults, never on a rank's own measurements. ``fit_link`` fits a link to measured (bytes, seconds).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

GB = 1e9


@dataclass(frozen=True)
class Link:
    gbs: float            # bandwidth into one GPU, 1e9 bytes/s
    lat_us: float         # per message (per step of a ring)

    def time(self, nbytes: float, steps: int = 1) -> float:
        """Seconds for ``steps`` messages of ``nbytes`` each, one after another."""
        if nbytes <= 0 or steps <= 0:
            return 0.0
        return steps * (self.lat_us * 1e-6 + nbytes / (self.gbs * GB))


@dataclass(frozen=True)
class Machine:
    """What the model knows of the hardware. Defaults: an H100/H200 SXM node (NVLink through NVSwitch,
    ~340 GB/s a GPU measured for a 512 MiB NCCL broadcast), 400 Gb/s InfiniBand a GPU between nodes,
    and a bf16 local GEMM at 68 % of the H100's dense tensor peak."""
    gemm_tflops: float = 673.0
    nvlink: Link = Link(340.0, 20.0)
    net: Link = Link(50.0, 10.0)
    copy: Link = Link(300.0, 15.0)       # copy-engine reads of a peer's symmetric buffer (one node)
    ingress_gbs: float = 450.0           # into one GPU when two transfers (A's and B's panels) run at once
    gpus_per_node: int = 8
    c_pass_gbs: float = 1000.0           # bytes of C per second a beta = 1 product spends re-reading C
    hbm_gbs: float = 3350.0
    launch_us: float = 8.0
    overlap_slowdown: float = 0.0        # a product beside a transfer runs this much slower
    name: str = "H100 defaults"

    def with_(self, **kw) -> "Machine":
        return replace(self, **kw)

    @classmethod
    def for_dtype(cls, dtype: str = "bfloat16", device: str = "h100", **kw) -> "Machine":
        """Defaults with the GEMM rate from the device facts (``tiledmm.analysis.device``): 68 % of the
        dense tensor peak for 16-bit types and tf32 (float32 through tf32), the FP32 peak for float64."""
        from ..analysis.device import profile
        p = profile(device)
        peak = {"bfloat16": "bf16", "float16": "fp16", "float32": "tf32"}.get(dtype)
        rate = 0.68 * p.tensor_tflops.get(peak, p.fp32_tflops) if peak else p.fp32_tflops / 2
        return cls(gemm_tflops=kw.pop("gemm_tflops", round(rate, 1)), hbm_gbs=kw.pop("hbm_gbs", p.dram_gbs),
                   name=kw.pop("name", f"{p.name}, {dtype}"), **kw)


@dataclass
class Prediction:
    algo: str
    gpus: int
    nodes: int
    grid: tuple
    ms: float
    one_gpu_ms: float
    bound: str
    compute_ms: float
    comm_ms: float
    exposed_ms: float
    panels: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.one_gpu_ms / self.ms if self.ms > 0 else float("inf")

    @property
    def efficiency(self) -> float:
        return self.speedup / self.gpus

    def row(self) -> dict:
        return {"algo": self.algo, "gpus": self.gpus, "nodes": self.nodes, "grid": list(self.grid), "ms": self.ms,
                "one_gpu_ms": self.one_gpu_ms, "speedup": self.speedup, "efficiency": self.efficiency,
                "bound": self.bound, "compute_ms": self.compute_ms, "comm_ms": self.comm_ms,
                "exposed_ms": self.exposed_ms, "panels": self.panels, **self.extra}


# -- the grid and its links ------------------------------------------------------------------------------

def grid_shape(world: int) -> tuple:
    pr = int(math.isqrt(world))
    while world % pr:
        pr -= 1
    return pr, world // pr


def _nodes_spanned(ranks: Sequence[int], gpn: int) -> int:
    return len({r // gpn for r in ranks})


def _link(ranks: Sequence[int], m: Machine, engine: str) -> Link:
    """The link a group's collectives run at: the network once it spans nodes, else NVLink (or the copy
    engines for the symmetric-memory engine, which reads peers of one node only)."""
    if _nodes_spanned(ranks, m.gpus_per_node) > 1:
        return m.net
    return m.copy if engine == "symm" else m.nvlink


def bcast_time(nbytes: float, q: int, link: Link) -> float:
    """A pipelined (ring) broadcast over q ranks: (q - 1) latencies and the bytes once."""
    if q <= 1 or nbytes <= 0:
        return 0.0
    return (q - 1) * link.lat_us * 1e-6 + nbytes / (link.gbs * GB)


def ring_time(part_bytes: float, q: int, link: Link) -> float:
    """An all-gather (part: one rank's share) or reduce-scatter (part: one rank's result) over q ranks."""
    return link.time(part_bytes, q - 1) if q > 1 else 0.0


def gemm_time(m: float, k: float, n: float, mach: Machine, *, adds: bool = False, elem: int = 2) -> float:
    if m <= 0 or k <= 0 or n <= 0:
        return 0.0
    t = 2.0 * m * k * n / (mach.gemm_tflops * 1e12) + mach.launch_us * 1e-6
    if adds:
        t += m * n * elem / (mach.c_pass_gbs * GB)
    return t


# -- the pipeline -----------------------------------------------------------------------------------------

def pipeline(comm: Sequence[float], compute: Sequence[float], depth: int = 2, slowdown: float = 0.0,
             comm_first: bool = True) -> dict:
    """Panel j's transfer (``comm[j]``, on one stream) starts when transfer j-1 is done and product
    j-depth has freed its buffer; product j (``compute[j]``) starts when product j-1 is done and transfer j
    has landed. A product that overlaps a later transfer runs ``slowdown`` longer. Returns the end time and
    the stream totals (seconds)."""
    n = len(compute)
    depth = max(1, depth)
    c_end = [0.0] * n
    g_end = [0.0] * n
    g_start = [0.0] * n
    for j in range(n):
        free = g_end[j - depth] if j - depth >= 0 else 0.0
        c_end[j] = max(c_end[j - 1] if j else 0.0, free) + comm[j]
        g_start[j] = max(g_end[j - 1] if j else 0.0, c_end[j] if comm_first else 0.0)
        busy_beside = any(comm[i] > 0 for i in range(j + 1, min(n, j + depth + 1)))
        g_end[j] = g_start[j] + compute[j] * (1.0 + (slowdown if busy_beside else 0.0))
    end = g_end[-1] if n else 0.0
    return {"end": end, "compute": sum(compute), "comm": sum(comm), "first_wait": g_start[0] if n else 0.0,
            "idle": end - sum(g_end[j] - g_start[j] for j in range(n))}


def _bound(total: float, compute: float, comm: float, first: float, latency: float) -> str:
    exposed = total - compute
    if exposed <= 0.05 * total:
        return "compute"
    if comm >= compute:
        return "latency" if latency >= 0.5 * comm else "bandwidth"
    return "first+tail" if first >= 0.5 * exposed else "pipeline"


# -- SUMMA ----------------------------------------------------------------------------------------------

def _cuts(k: int, pr: int, pc: int) -> list:
    def starts(parts):
        q, r = divmod(k, parts)
        return {i * q + min(i, r) for i in range(parts)}
    return sorted(starts(pc) | starts(pr) | {k})


def split_panels(k: int, pr: int, pc: int, widths: Sequence[int]) -> list:
    """Panels (p0, p1) covering [0, k): the i-th at most ``widths[i]`` wide (the last width repeats),
    also cut where A's column split (pc parts) and B's row split (pr parts) fall."""
    cuts = _cuts(k, pr, pc)
    out, p, i = [], 0, 0
    widths = [max(1, int(w)) for w in widths] or [k or 1]
    for hi in cuts[1:]:
        while p < hi:
            w = widths[min(i, len(widths) - 1)]
            out.append((p, min(hi, p + w)))
            p = out[-1][1]
            i += 1
    return out


def _quantum(k_block: int) -> int:
    return 256 if k_block >= 2048 else max(1, k_block // 8)


def _candidates(k: int, pr: int, pc: int) -> list:
    """Width lists to try: whole blocks; uniform widths K/2..K/32; geometric growth from a small first panel."""
    kb = max(1, -(-k // max(pr, pc)))
    q = _quantum(kb)
    cands = [[kb]]
    for parts in (2, 4, 8, 16, 32):
        w = max(q, (kb // parts) // q * q)
        cands.append([w])
    for first in (q, 2 * q, 4 * q, 8 * q, 16 * q):
        if first >= kb:
            continue
        for growth in (2, 3, 4, 6, 8):
            ws, w = [], first
            while sum(ws) < k and len(ws) < 64:
                ws.append(min(kb, max(q, int(w) // q * q)))
                w *= growth
            cands.append(ws)
    return cands


def _summa_parts(m: int, k: int, n: int, gpus: int, mach: Machine, elem: int, engine: str):
    pr, pc = grid_shape(gpus)
    mr, nc = -(-m // pr), -(-n // pc)
    rows = [list(range(r * pc, (r + 1) * pc)) for r in range(pr)]
    cols = [list(range(c, gpus, pc)) for c in range(pc)]
    la = min((_link(g, mach, engine) for g in rows), key=lambda L: L.gbs)
    lb = min((_link(g, mach, engine) for g in cols), key=lambda L: L.gbs)
    return pr, pc, mr, nc, la, lb


def _summa_pipeline(panels, pr, pc, mr, nc, la, lb, mach, elem, depth, engine):
    comm, comp, lat = [], [], 0.0
    for j, (p0, p1) in enumerate(panels):
        w = p1 - p0
        if engine == "symm":      # one read from the owner (copy engine), A's and B's beside each other
            ta = la.time(mr * w * elem) if pc > 1 else 0.0
            tb = lb.time(w * nc * elem) if pr > 1 else 0.0
            la_s = (la.lat_us if pc > 1 else 0) + (lb.lat_us if pr > 1 else 0)
        else:
            ta = bcast_time(mr * w * elem, pc, la)
            tb = bcast_time(w * nc * elem, pr, lb)
            la_s = (pc - 1) * la.lat_us * (pc > 1) + (pr - 1) * lb.lat_us * (pr > 1)
        if ta and tb and la is lb:     # both into this GPU over the same links: they share its ports
            t = max(ta, tb, (mr * w + w * nc) * elem / (mach.ingress_gbs * GB) + max(la.lat_us, lb.lat_us) * 1e-6)
        else:
            t = max(ta, tb)
        comm.append(t)
        lat += la_s * 1e-6
        comp.append(gemm_time(mr, w, nc, mach, adds=j > 0, elem=elem))
    slow = mach.overlap_slowdown if engine == "nccl" else 0.0
    return pipeline(comm, comp, depth, slow), lat


def summa_panels(m: int, k: int, n: int, pr: int, pc: int, *, elem: int = 2, depth: int = 2,
                 machine: Optional[Machine] = None, engine: str = "nccl") -> list:
    """(``_summa_panels``, remembered: a product's schedule is chosen once, not at every call.)"""
    return list(_summa_panels(int(m), int(k), int(n), int(pr), int(pc), int(elem), max(1, int(depth)),
                              machine or Machine(), engine))


@functools.lru_cache(maxsize=1024)
def _summa_panels(m: int, k: int, n: int, pr: int, pc: int, elem: int, depth: int, machine: Machine,
                  engine: str) -> tuple:
    """SUMMA's default panel schedule [(p0, p1), ...]: of the candidates (whole blocks, uniform widths,
    a small first panel growing geometrically), the one the model predicts fastest (ties: fewer panels).
    A small first panel is cheap to wait for; later, wider panels hide under the products and keep the
    number of beta = 1 passes over C low."""
    mach = machine
    gpus = pr * pc
    if k <= 0:
        return ()
    mr, nc = -(-m // pr), -(-n // pc)
    _, _, _, _, la, lb = _summa_parts(m, k, n, gpus, mach, elem, engine)
    best = None
    for ws in _candidates(k, pr, pc):
        panels = split_panels(k, pr, pc, ws)
        res, _ = _summa_pipeline(panels, pr, pc, mr, nc, la, lb, mach, elem, depth, engine)
        key = (round(res["end"], 9), len(panels))
        if best is None or key < best[0]:
            best = (key, panels)
    return tuple(best[1])


def summa_time(m: int, k: int, n: int, gpus: int, *, machine: Optional[Machine] = None, elem: int = 2,
               depth: int = 2, engine: str = "nccl", panels: Optional[list] = None) -> Prediction:
    """SUMMA on ``gpus`` (a pr x pc grid, ranks placed node by node) for the whole m x k x n product."""
    mach = machine or Machine()
    pr, pc, mr, nc, la, lb = _summa_parts(m, k, n, gpus, mach, elem, engine)
    if panels is None:
        panels = summa_panels(m, k, n, pr, pc, elem=elem, depth=depth, machine=mach, engine=engine)
    res, lat = _summa_pipeline(panels, pr, pc, mr, nc, la, lb, mach, elem, depth, engine)
    one = gemm_time(m, k, n, mach)
    nodes = max(1, -(-gpus // mach.gpus_per_node))
    return Prediction("summa", gpus, nodes, (pr, pc), res["end"] * 1e3, one * 1e3,
                      _bound(res["end"], res["compute"], res["comm"], res["first_wait"], lat)
                      if gpus > 1 else "compute",
                      res["compute"] * 1e3, res["comm"] * 1e3, (res["end"] - res["compute"]) * 1e3, len(panels),
                      {"widths": sorted({p1 - p0 for p0, p1 in panels}, reverse=True)[:3],
                       "first_ms": res["first_wait"] * 1e3, "engine": engine})


# -- the tensor-parallel patterns --------------------------------------------------------------------------

def _chunks_of(total: int, parts: int) -> list:
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def allgather_matmul_time(m: int, k: int, n: int, gpus: int, *, chunks: int = 2, machine: Optional[Machine] = None,
                          elem: int = 2, engine: str = "nccl", overlap: bool = True) -> Prediction:
    """C = all_gather(A) @ B_local with A (m x k) row-sharded over ``gpus`` ranks and B_local k x n.
    overlap=False: the baseline (the whole all-gather, then one product). NCCL engine: the shards'
    row chunks gathered one after another while this rank's own shard, then each landed chunk, is
    multiplied; symm: each peer's shard read (in ``chunks`` pieces) while the previous one is multiplied."""
    mach = machine or Machine()
    w = gpus
    mm = -(-m // w)
    link = _link(range(w), mach, engine)
    one = gemm_time(m, k, n, mach)
    nodes = max(1, -(-w // mach.gpus_per_node))
    if not overlap or w == 1:
        comm = ring_time(mm * k * elem, w, link)
        t = comm + one
        return Prediction("allgather", w, nodes, (1, w), t * 1e3, one * 1e3, "serial" if w > 1 else "compute",
                          one * 1e3, comm * 1e3,
                          comm * 1e3, 1, {"engine": engine, "overlap": False})
    if engine == "symm":
        comm, comp = [0.0], [gemm_time(mm, k, n, mach)]
        for _ in range(w - 1):
            for rows in _chunks_of(mm, chunks):
                comm.append(link.time(rows * k * elem))
                comp.append(gemm_time(rows, k, n, mach))
        res = pipeline(comm, comp, depth=len(comm))
    else:
        comm, comp = [0.0], [gemm_time(mm, k, n, mach)]
        for rows in _chunks_of(mm, chunks):
            comm.append(ring_time(rows * k * elem, w, link))
            comp.append(gemm_time(rows * (w - 1), k, n, mach))
        res = pipeline(comm, comp, depth=len(comm), slowdown=mach.overlap_slowdown)
    return Prediction("allgather", w, nodes, (1, w), res["end"] * 1e3, one * 1e3,
                      _bound(res["end"], res["compute"], res["comm"], res["first_wait"], 0.0),
                      res["compute"] * 1e3, res["comm"] * 1e3, (res["end"] - res["compute"]) * 1e3, len(comp),
                      {"engine": engine, "overlap": True, "chunks": chunks})


def matmul_reducescatter_time(m: int, k: int, n: int, gpus: int, *, chunks: int = 2,
                              machine: Optional[Machine] = None, elem: int = 2, engine: str = "nccl",
                              overlap: bool = True) -> Prediction:
    """This rank's rows of C = sum over ranks of A_r @ B_r (A_r: m x k_r, the K split: k is the whole K,
    each rank holds k / gpus of it). overlap=False: the baseline (the whole partial product, then one
    reduce-scatter). NCCL: row chunks of the partial product, each reduce-scattered while the next is
    made; symm: each destination's partial written into its buffer by the copy engines while the next
    is made, then one barrier and this rank's sum of the parts."""
    mach = machine or Machine()
    w = gpus
    kr = -(-k // w)
    mm = -(-m // w)
    link = _link(range(w), mach, engine)
    one = gemm_time(m, k, n, mach)
    nodes = max(1, -(-w // mach.gpus_per_node))
    if not overlap or w == 1:
        g = gemm_time(m, kr, n, mach)
        comm = ring_time(mm * n * elem, w, link)
        t = g + comm
        return Prediction("reducescatter", w, nodes, (1, w), t * 1e3, one * 1e3, "serial" if w > 1 else "compute",
                          g * 1e3, comm * 1e3,
                          comm * 1e3, 1, {"engine": engine, "overlap": False})
    if engine == "symm":
        comp, comm = [], []
        for _ in range(w - 1):
            for rows in _chunks_of(mm, chunks):
                comp.append(gemm_time(rows, kr, n, mach))
                comm.append(link.time(rows * n * elem))
        own = gemm_time(mm, kr, n, mach)
        t, c_end = 0.0, 0.0
        for g, c in zip(comp, comm):
            t += g
            c_end = max(c_end, t) + c
        t += own
        end = max(t, c_end) + link.lat_us * 1e-6 + w * mm * n * elem / (mach.hbm_gbs * GB)
        total_comp, total_comm, first = sum(comp) + own, sum(comm), 0.0
    else:
        comp, comm = [], []
        for rows in _chunks_of(mm, chunks):
            comp.append(gemm_time(rows * w, kr, n, mach))
            comm.append(ring_time(rows * n * elem, w, link))
        g_end, c_end = [], 0.0
        for j, (g, c) in enumerate(zip(comp, comm)):
            start = max(g_end[-1] if g_end else 0.0, 0.0)
            g_end.append(start + g * (1.0 + (mach.overlap_slowdown if j else 0.0)))
            c_end = max(c_end, g_end[-1]) + c
        end = c_end
        total_comp, total_comm, first = sum(comp), sum(comm), comm[-1]
    return Prediction("reducescatter", w, nodes, (1, w), end * 1e3, one * 1e3,
                      _bound(end, total_comp, total_comm, first, 0.0), total_comp * 1e3, total_comm * 1e3,
                      (end - total_comp) * 1e3, len(comp) + (engine == "symm"),
                      {"engine": engine, "overlap": True, "chunks": chunks})


def tp_chunks(m: int, k: int, n: int, gpus: int, *, algo: str = "allgather", machine: Optional[Machine] = None,
              elem: int = 2, engine: str = "nccl", most: int = 4) -> int:
    """The chunk count the model predicts fastest for a tensor-parallel pattern (1..``most``; ties: fewer).
    Depends only on the problem and Machine's defaults, so every rank picks the same."""
    return _tp_chunks(int(m), int(k), int(n), int(gpus), algo, machine or Machine(), int(elem), engine,
                      int(most))


@functools.lru_cache(maxsize=1024)
def _tp_chunks(m, k, n, gpus, algo, machine, elem, engine, most) -> int:
    f = allgather_matmul_time if algo == "allgather" else matmul_reducescatter_time
    rows = -(-m // gpus)
    best = None
    for c in range(1, max(1, min(most, rows)) + 1):
        t = f(m, k, n, gpus, chunks=c, machine=machine, elem=elem, engine=engine).ms
        if best is None or t < best[0] * (1 - 1e-9):
            best = (t, c)
    return best[1] if best else 1


# -- fitting ----------------------------------------------------------------------------------------------

def fit_link(points: Sequence[tuple]) -> Link:
    """A Link fitted to measured (bytes, seconds) points: t = latency + bytes / bandwidth, least squares on
    the relative error (small and large messages count alike). One point: bandwidth only."""
    pts = [(float(b), float(t)) for b, t in points if b > 0 and t > 0]
    if not pts:
        raise ValueError("fit_link needs at least one (bytes, seconds) point")
    if len(pts) == 1:
        b, t = pts[0]
        return Link(b / t / GB, 0.0)
    # minimise sum(((lat + b * inv) - t) / t)^2: linear in (lat, inv)
    s11 = sum(1 / t ** 2 for b, t in pts)
    s12 = sum(b / t ** 2 for b, t in pts)
    s22 = sum(b * b / t ** 2 for b, t in pts)
    r1 = sum(1 / t for b, t in pts)
    r2 = sum(b / t for b, t in pts)
    det = s11 * s22 - s12 * s12
    if det <= 0:
        b, t = max(pts)
        return Link(b / t / GB, 0.0)
    lat = (r1 * s22 - r2 * s12) / det
    inv = (s11 * r2 - s12 * r1) / det
    if inv <= 0:
        b, t = max(pts)
        return Link(b / t / GB, 0.0)
    if lat < 0:                     # refit the slope alone through the origin
        inv = sum(b / t for b, t in pts) / sum(b * b / t ** 2 for b, t in pts)
        lat = 0.0
    return Link(1.0 / inv / GB, lat * 1e6)


def predict_table(m: int, k: int, n: int, *, machine: Optional[Machine] = None, elem: int = 2,
                  algos: Sequence[str] = ("summa", "allgather", "reducescatter"),
                  gpus: Sequence[int] = (1, 2, 4, 8), nodes: Sequence[int] = (2, 4), engine: str = "nccl",
                  chunks: Optional[int] = None) -> list:
    """Predictions for ``gpus`` on one node and for ``nodes`` full nodes, each algorithm; the TP patterns
    take A (m x k) row-sharded / the K split of m x k x n as ``tiledmm dist`` runs them."""
    mach = machine or Machine()
    counts = [g for g in gpus if g <= mach.gpus_per_node] + [mach.gpus_per_node * x for x in nodes]
    out = []
    for algo in algos:
        for p in counts:
            if algo == "summa":
                out.append(summa_time(m, k, n, p, machine=mach, elem=elem, engine=engine))
                continue
            f = allgather_matmul_time if algo == "allgather" else matmul_reducescatter_time
            if algo == "allgather":         # the all-gather's product: C_local = A @ B[:, cols of this rank]
                n_loc = -(-n // p)
                c = chunks or tp_chunks(m, k, n_loc, p, algo=algo, machine=mach, elem=elem, engine=engine)
                pred = f(m, k, n_loc, p, chunks=c, machine=mach, elem=elem, engine=engine)
            else:
                c = chunks or tp_chunks(m, k, n, p, algo=algo, machine=mach, elem=elem, engine=engine)
                pred = f(m, k, n, p, chunks=c, machine=mach, elem=elem, engine=engine)
            pred.one_gpu_ms = gemm_time(m, k, n, mach) * 1e3
            out.append(pred)
    return out
