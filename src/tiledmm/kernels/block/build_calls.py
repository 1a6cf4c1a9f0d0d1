"""The calls ``scripts/build_kernels.py`` runs on a GPU to compile every kernel the default can pick, so
that they can ship in the package (``_adapter.export_compiled``); here so that the CPU tests can check
them (a table entry's call has the entry's layout and class) without reading the script.

A call is a small dict (``_pt``): dtype, output dtype, precision, M, N, K, batch, the operands' orders
(``n`` row-major, ``t`` column-major, ``s`` every other column of a wider matrix), A's offset in elements,
alpha, beta, the API (``matmul``, ``linear``, ``linear_bwd``), the activation and bias of a linear, and
batch-invariant mode.
"""
from __future__ import annotations

import itertools

PARTS = ("table", "suites", "rows", "linear", "invariant", "classes")
# sizes between the suites' powers of two, where the model's picks for a class differ from its ends' (each
# class is judged at its own sizes), and each with M, N, K off a multiple of 16, as odd sizes leave them
MIDDLES = (768, 1536, 3072, 6144)
DTYPES = (("bfloat16", "none"), ("float16", "none"), ("float32", "tf32"), ("float32", "ieee"))
LLM = ((4096, 4096), (11008, 4096), (4096, 11008), (8192, 8192), (28672, 8192), (8192, 28672))   # (N, K)
# every M class 1 .. 8192 twice: a power of two, and one more -- the same class and config, but Triton specialises
# an integer argument on divisibility by 16, and most of a token loop's M are not (each such M compiled anew)
ROWS = sorted({m for c in range(14) for m in (2 ** c, 2 ** c + 1)})
MAX_BYTES = 6 << 30          # a call's operands at most (8 workers share one GPU)
H100 = "NVIDIA H100 80GB HBM3"


def _elem(dtype: str) -> int:
    return 2 if dtype in ("bfloat16", "float16") else 4


def _pt(part: str, dtype: str, precision: str, M: int, N: int, K: int, **kw) -> dict:
    return {"part": part, "dtype": dtype, "out": kw.pop("out", dtype), "precision": precision, "M": M, "N": N,
            "K": K, "batch": kw.pop("batch", 0), "a": kw.pop("a", "n"), "b": kw.pop("b", "n"),
            "c": kw.pop("c", "n"), "offset": kw.pop("offset", 0), "alpha": kw.pop("alpha", 1.0),
            "beta": kw.pop("beta", 0.0), "api": kw.pop("api", "matmul"), "act": kw.pop("act", "none"),
            "bias": kw.pop("bias", False), "invariant": kw.pop("invariant", False), **kw}


def _sized(cls: int, esize: int, aligned: bool, rows128: bool) -> int:
    """A size in log2 bucket ``cls`` whose rows (in elements of ``esize`` bytes) meet the layout's flags."""
    n = 2 ** cls
    if not aligned:
        return n + 1 if cls >= 1 else n
    if not rows128 and cls >= 7:
        return n + 16 // esize                  # 16-byte aligned, not a multiple of 128 bytes
    return n


def table_points(table: dict, forced: bool = False) -> list[dict]:
    """One call per table entry, synthesised to its layout key (``dispatch.plan_key`` less the class and the
    device): a.dtype, c.dtype, precision, a.dim, b.dim, a unit last, b unit last, b unit second, c unit last,
    aligned, alpha == 1, beta == 0, rows128. ``forced``: the table is another GPU's of the same target (the
    H200's on an H100: one cubin serves both), whose choices this GPU's default would not make: each call
    names its entry's variant and config (``variant=``, ``config=``; a variant that takes its own model's
    config for the call's size, the variant alone). An entry whose class starts at M >= 16, with A and C row-major,
    gets a second call at M + 1."""
    from . import variants as V
    out = []
    for entries in table["index"].values():
        for e in entries:
            f = e["layout"].split("|")
            v = V.BY_NAME.get(e["variant"])
            if len(f) != 13 or e["variant"].startswith("simt") or (forced and v is None):
                continue
            named = {}
            if forced:
                named = {"variant": v.name, "config": None if v.traits.own_config_by_shape else dict(e["config"])}
            dtype, odt, prec = f[0].replace("torch.", ""), f[1].replace("torch.", ""), f[2]
            adim, bdim = int(f[3]), int(f[4])
            a_n, b_n, b_t, c_n, aligned, alpha1, beta0, rows128 = (x == "True" for x in f[5:9] + f[9:13])
            cm, cn, ck = e["class"]
            es = _elem(dtype)
            M, N, K = 2 ** cm, _sized(cn, es, aligned, rows128), _sized(ck, es, aligned, rows128)
            if not aligned and a_n and b_n:
                K = 2 ** ck + 1 if ck >= 1 else 1
            # M twice where the class holds both of Triton's specialisations (a multiple of 16 and not) and M is
            # no operand's row pitch (the layout key then does not see its divisibility): a token count is
            # seldom a multiple of 16
            for m in (M, M + 1) if cm >= 4 and a_n and c_n else (M,):
                out.append(_pt("table", dtype, prec, m, N, K, out=odt, batch=8 if adim == 3 else 0,
                               a="n" if a_n else "t", b="n" if b_n else ("t" if b_t else "s"),
                               c="n" if c_n else "t", offset=0, alpha=1.0 if alpha1 else 0.5,
                               beta=0.0 if beta0 else 1.0, layout=e["layout"], cls=e["class"], **named))
    return out


def plan(parts, table: dict | None, others: list[dict] = ()) -> list[dict]:
    """Every call of ``parts`` (``PARTS``), the table part from ``table`` (``shipped.table_for``: this GPU's)
    and from ``others`` (other GPUs' tables of this GPU's target, their choices forced)."""
    from ...bench import SUITES
    pts: list[dict] = []
    if "table" in parts and table is not None:
        pts += table_points(table)
    if "table" in parts:
        for t in others:
            pts += table_points(t, forced=True)
    if "suites" in parts:
        for suite in ("square", "irregular", "transformer", "llm"):
            for shape in SUITES[suite]:
                *batch, m, k, n = shape
                for dtype, prec in DTYPES:
                    for b in (("n",) if batch else ("n", "t")):
                        pts.append(_pt("suites", dtype, prec, m, n, k, batch=batch[0] if batch else 0, b=b))
    if "rows" in parts:
        for n, k in LLM:
            for m in ROWS:
                for dtype, prec in DTYPES:
                    for b in ("n", "t"):
                        pts.append(_pt("rows", dtype, prec, m, n, k, b=b))
    if "linear" in parts:
        for n, k in LLM:
            for dtype in ("bfloat16", "float16"):
                for m in (16, 512, 4096):
                    for act, bias in (("none", False), ("none", True), ("gelu", True), ("silu", True)):
                        pts.append(_pt("linear", dtype, "none", m, n, k, b="t", api="linear", act=act, bias=bias))
                pts.append(_pt("linear", dtype, "none", 4096, n, k, b="t", api="linear_bwd", act="gelu", bias=True))
    if "invariant" in parts:
        for n, k in LLM:
            for m in (1, 4096):
                for dtype, prec in (DTYPES[0], DTYPES[2], DTYPES[3]):
                    for b in ("n", "t"):
                        pts.append(_pt("invariant", dtype, prec, m, n, k, b=b, invariant=True))
    if "classes" in parts:
        for m in MIDDLES:
            for n in MIDDLES:
                for k in MIDDLES:
                    for dtype, prec in DTYPES:
                        for b in ("n", "t"):
                            # M, N, K each a multiple of 16 or not: Triton specialises each (and the
                            # row strides N and K: unaligned rows may take another kernel)
                            for dm, dn, dk in itertools.product((0, -1), (0, 5), (0, 5)):
                                pts.append(_pt("classes", dtype, prec, m + dm, n + dn, k + dk, b=b))
    return [p for p in pts if _bytes(p) <= MAX_BYTES]


def _bytes(p: dict) -> int:
    nb = max(p["batch"], 1)
    return nb * (p["M"] * p["K"] + p["K"] * p["N"] + p["M"] * p["N"]) * _elem(p["dtype"])


def operands(torch, p: dict, device: str = "cuda"):
    """(a, b, out or None) of a matmul point: uninitialised, in the point's layouts (``n`` row-major,
    ``t`` column-major, ``s`` every other column of a wider matrix), A offset by ``offset`` elements."""
    dt, odt = getattr(torch, p["dtype"]), getattr(torch, p["out"])
    M, N, K, nb = p["M"], p["N"], p["K"], p["batch"]

    def mat(rows, cols, order, offset=0, dtype=dt):
        lead = (nb,) if nb else ()
        if order == "s":
            return torch.empty(*lead, rows, 2 * cols, dtype=dtype, device=device)[..., ::2]
        shape = (*lead, rows, cols) if order == "n" else (*lead, cols, rows)
        count = 1
        for s in shape:
            count *= s
        t = torch.empty(count + offset, dtype=dtype, device=device)[offset:].view(shape)
        return t if order == "n" else t.mT
    a = mat(M, K, p["a"], p["offset"])
    b = mat(K, N, p["b"])
    c = mat(M, N, p["c"], dtype=odt) if (p["c"] != "n" or p["out"] != p["dtype"] or p["beta"]) else None
    if c is not None:
        c.zero_()
    return a, b, c


def layout_of(torch, p: dict, a, b, c) -> tuple[str, list]:
    """The (layout key, class) the dispatcher sees for a point's operands (``shipped.split_key``)."""
    from . import dispatch as bm
    from . import shipped
    cc = c if c is not None else torch.empty(a.shape[:-1] + b.shape[-1:], dtype=a.dtype, device=a.device)
    layout, cls = shipped.split_key(bm.plan_key(a, b, cc, p["precision"], p["alpha"], p["beta"]))
    return layout, list(cls)


def run_point(torch, tiledmm, p: dict) -> str | None:
    """One call as the point says; the plan key's layout when it differs from a table entry's, else None."""
    dt = getattr(torch, p["dtype"])
    M, N, K = p["M"], p["N"], p["K"]
    prec = p["precision"] if p["dtype"] == "float32" else None
    if p["api"] == "matmul":
        a, b, c = operands(torch, p)
        forced = {"kernel": "triton", "variant": p["variant"]} if p.get("variant") else {}
        if forced and p.get("config"):
            forced["config"] = p["config"]
        with tiledmm.batch_invariant(p["invariant"]):
            tiledmm.matmul(a, b, out=c, alpha=p["alpha"], beta=p["beta"], precision=prec, **forced)
        if p.get("layout") and not forced:
            got = layout_of(torch, p, a, b, c)
            if got != (p["layout"], list(p["cls"])):
                return f"{got[0]} {got[1]}"
        return None
    from ...nn.functional import linear
    x = torch.randn(M, K, dtype=dt, device="cuda")
    w = torch.randn(N, K, dtype=dt, device="cuda")
    bias = torch.randn(N, dtype=dt, device="cuda") if p["bias"] else None
    act = None if p["act"] == "none" else p["act"]
    if p["api"] == "linear":
        with torch.no_grad():
            linear(x, w, bias, activation=act)
    else:
        x.requires_grad_(True)
        w.requires_grad_(True)
        linear(x, w, bias, activation=act).float().square().mean().backward()
    return None
