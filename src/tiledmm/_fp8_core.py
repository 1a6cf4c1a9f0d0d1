"""The FP8 products' engine below the operator layer (``tiledmm.fp8`` is the public door; see its docstring):
validation and planning (``plan``, which the operators' fake implementations call too), the scaled product
without autograd (``call``: a repeat of a bound signature, else the planned launch), quantisation
(``_quantize``) and its inverse."""
from __future__ import annotations

from ._backend import mode

mode()   # GPU or emulation before torch (and with it Triton) is imported
import torch  # noqa: E402

from . import _backend, registry  # noqa: E402
from ._arrays import TiledmmError, describe, overlaps, shape_str  # noqa: E402

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
RECIPES = ("tensorwise", "rowwise", "blockwise")
BLOCKS = ((1, 128), (128, 128))
BLOCK = 128
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
EPS = 1e-12
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
KERNEL = "triton-fp8"

def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


# -- validation --------------------------------------------------------------------------------------

def check_activation(act) -> str:
    name = "none" if act is None else act
    if name not in ACTIVATIONS:
        raise TiledmmError(f"activation must be one of {list(ACTIVATIONS)} or None, got {act!r}")
    return name


def check_recipe(recipe) -> str:
    if recipe not in RECIPES:
        raise TiledmmError(f"fp8 recipe must be one of {list(RECIPES)}, got {recipe!r}")
    return recipe


def _check_operand(t, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TiledmmError(f"{name} must be a torch tensor of float8_e4m3fn or float8_e5m2, got {type(t).__name__}")
    if t.dtype not in FP8_DTYPES:
        raise TiledmmError(f"scaled_matmul takes float8_e4m3fn or float8_e5m2 operands; got {describe(t, name)} "
                           "(make one with tiledmm.quantize_fp8; for other dtypes use tiledmm.matmul)")
    if t.dim() not in (2, 3):
        raise TiledmmError(f"scaled_matmul takes 2-D or 3-D (batched) operands; got {describe(t, name)}")


def _last2(s) -> tuple:
    return (1,) * (2 - min(s.dim(), 2)) + tuple(s.shape[-2:])


def plan(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, act="none") -> dict:
    """Check a call (shapes, dtypes, devices; not the scales' values) and describe it: batch B, M, K,
    N, the result's shape, ``blockwise``, and the scales' shapes as 3-D views (``sa3``, ``sb3``)."""
    _check_operand(a, "a")
    _check_operand(b, "b")
    if a.shape[-1] != b.shape[-2]:
        raise TiledmmError(f"inner dimensions differ: a is {shape_str(a.shape)}, b is {shape_str(b.shape)} "
                           f"(a's last dimension, {a.shape[-1]}, must equal b's second-to-last, {b.shape[-2]})")
    if a.device != b.device:
        raise TiledmmError(f"a and b are on different devices: {describe(a, 'a')}; {describe(b, 'b')}")
    ba = a.shape[0] if a.dim() == 3 else 1
    bb = b.shape[0] if b.dim() == 3 else 1
    if ba != bb and 1 not in (ba, bb):
        raise TiledmmError(f"batch sizes differ: a is {shape_str(a.shape)}, b is {shape_str(b.shape)}")
    B = max(ba, bb)
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batched = a.dim() == 3 or b.dim() == 3
    if out_dtype not in OUT_DTYPES:
        raise TiledmmError(f"out_dtype must be torch.bfloat16, torch.float16 or torch.float32, got {out_dtype}")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(s, torch.Tensor):
            raise TiledmmError(f"{name} must be a float32 torch tensor, got {type(s).__name__} {s!r}")
        if s.dtype != torch.float32:
            raise TiledmmError(f"{name} must be float32 (torch's convention for fp8 scales); got {describe(s, name)}")
        if s.device != a.device:
            raise TiledmmError(f"{name} is on another device than the operands: {describe(s, name)}; a is on "
                               f"{a.device}")
        if s.dim() > 3 or (s.dim() == 3 and s.shape[0] not in (1, B)):
            raise TiledmmError(f"{name} {shape_str(s.shape)} has a batch dimension that is not a's and b's "
                               f"({B}); give 2-D scales, or 3-D with a leading {B} or 1")
    kb, nb = _cdiv(K, BLOCK), _cdiv(N, BLOCK)
    la, lb = _last2(scale_a), _last2(scale_b)
    one_a = scale_a.numel() == 1 or la == (1, 1)
    one_b = scale_b.numel() == 1 or lb == (1, 1)
    outer = (one_a or la == (M, 1)) and (one_b or lb == (1, N))
    block = (one_a or la == (M, kb)) and (one_b or lb == (kb, nb))
    if not (outer or block) or (scale_a.dim() < 2 and not one_a) or (scale_b.dim() < 2 and not one_b):
        raise TiledmmError(
            f"scale_a {shape_str(scale_a.shape)} and scale_b {shape_str(scale_b.shape)} name no recipe for "
            f"a {shape_str(a.shape)} @ b {shape_str(b.shape)}: give per tensor one element each, rowwise "
            f"scale_a ({M}, 1) and scale_b (1, {N}), or blockwise scale_a ({M}, {kb}) (1x128 blocks) and "
            f"scale_b ({kb}, {nb}) (128x128 blocks)")
    blockwise = not outer
    res = ((B,) if batched else ()) + (M, N)
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dim() != 1 or bias.shape[0] != N \
                or not bias.is_floating_point() or bias.device != a.device:
            raise TiledmmError(f"bias must be a 1-D float tensor of N = {N} values on {a.device}; got "
                               f"{describe(bias, 'bias') if isinstance(bias, torch.Tensor) else type(bias).__name__}")
    check_activation(act)
    return {"B": B, "M": M, "K": K, "N": N, "res": res, "blockwise": blockwise, "kcols": kb if blockwise else 1,
            "brows": kb if blockwise else 1, "bcols": nb if blockwise else N}


def _scale3(s, B: int, rows: int, cols: int):
    """The scale as a (B | 1, rows, cols) view whose strides index it (0 where one value serves many)."""
    if s.numel() == 1:
        return s.reshape(1, 1, 1).expand(1, rows, cols)
    s3 = s if s.dim() == 3 else s.unsqueeze(0)
    return s3.expand(s3.shape[0], rows, cols)


def check_scale_values(scale_a, scale_b) -> None:
    """Positive and finite scales, or a TiledmmError naming the first bad value (one synchronisation
    on a GPU; nothing while a CUDA graph is captured)."""
    if scale_a.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    bad = [(~(torch.isfinite(s) & (s > 0))).any() for s in (scale_a, scale_b)]
    flags = torch.stack(bad).tolist()
    for name, s, flag in zip(("scale_a", "scale_b"), (scale_a, scale_b), flags):
        if flag:
            v = s[~(torch.isfinite(s) & (s > 0))].flatten()[0].item()
            raise TiledmmError(f"{name} {shape_str(s.shape)} holds {v}: fp8 scales must be positive and finite")


# -- the scaled product -------------------------------------------------------------------------------

def call(a, b, scale_a, scale_b, bias, out_dtype, act: str, use_fast_accum: bool, out=None, check_scales=True,
         config=None):
    """``scaled_matmul`` on plain tensors (``act`` checked): a repeat of a bound signature, else the
    full path (the operators' kernel calls this too)."""
    if out is None and config is None and _bound:          # a repeat of a bound signature
        hit = _repeat(a, b, scale_a, scale_b, bias, out_dtype, act, use_fast_accum)
        if hit is not None:
            go, res = hit
            if check_scales:
                check_scale_values(scale_a, scale_b)
            c = torch.empty(res, dtype=out_dtype, device=a.device)
            go(_stream(), a, b, c, scale_a, scale_b, bias)
            return c
    p = _planned(a, b, scale_a, scale_b, bias, out_dtype, act)
    if out is not None:
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != p["res"] or out.dtype != out_dtype \
                or out.device != a.device:
            raise TiledmmError(f"out must be a {shape_str(p['res'])} {_name(out_dtype)} tensor on {a.device} (the "
                               f"result's shape and out_dtype); got "
                               f"{describe(out, 'out') if isinstance(out, torch.Tensor) else type(out).__name__}")
    if check_scales:
        check_scale_values(scale_a, scale_b)
    return _run(a, b, scale_a, scale_b, bias, out_dtype, act, use_fast_accum, out, p, config)


_plans: dict = {}
_MAX_PLANS = 4096
# repeat calls: signature (shapes, strides, dtypes, devices, pointer alignments, options) -> the bound
# launch of the kernel its first call ran (fp8_kernels.bind), for calls that needed no layout copy
_bound: dict = {}
_stream = None


def _signature(a, b, sa, sb, bias, out_dtype, act, fast_accum) -> tuple:
    return (a.shape, a.stride(), a.dtype, a.device, b.shape, b.stride(), b.dtype, b.device, sa.shape, sa.stride(),
            sa.dtype, sa.device, sb.shape, sb.stride(), sb.dtype, sb.device,
            None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device, bias.data_ptr() % 16 == 0),
            a.data_ptr() % 16 == 0, b.data_ptr() % 16 == 0, sa.data_ptr() % 16 == 0, sb.data_ptr() % 16 == 0,
            out_dtype, act, fast_accum)


def _repeat(a, b, sa, sb, bias, out_dtype, act, fast_accum):
    """(bound launch, result shape) of a signature bound before (its first call checked everything the
    signature holds), or None."""
    try:
        return _bound.get(_signature(a, b, sa, sb, bias, out_dtype, act, fast_accum))
    except (AttributeError, TypeError):      # not tensors: the full path says what is wrong
        return None


def _planned(a, b, scale_a, scale_b, bias, out_dtype, act):
    """``plan``'s result, remembered per signature (what it checks: shapes, dtypes, devices): a
    repeat call costs one tuple and a dict lookup here."""
    try:
        key = (a.shape, a.dtype, a.device, b.shape, b.dtype, b.device, scale_a.shape, scale_a.dtype,
               scale_a.device, scale_b.shape, scale_b.dtype, scale_b.device,
               None if bias is None else (bias.shape, bias.dtype, bias.device), out_dtype, act)
        p = _plans.get(key)
    except (AttributeError, TypeError):            # not tensors: plan says what is wrong
        return plan(a, b, scale_a, scale_b, bias, out_dtype, act)
    if p is None:
        p = plan(a, b, scale_a, scale_b, bias, out_dtype, act)
        if len(_plans) < _MAX_PLANS:
            _plans[key] = p
    return p


def _direct(*tensors) -> bool:
    """Plain tensors with storage, no tracer: run here (else the operator, whose fake computes shapes)."""
    if torch.compiler.is_compiling():
        return False
    try:
        for t in tensors:
            if isinstance(t, torch.Tensor) and (type(t) not in (torch.Tensor, torch.nn.Parameter)
                                                or t.data_ptr() is None):
                return False
    except RuntimeError:
        return False
    return True


def _run(a, b, scale_a, scale_b, bias, out_dtype, act: str, fast_accum: bool, out, p: dict, config=None):
    """The checked call: layouts, views, the kernel (or the trivial cases), the result."""
    B, M, K, N = p["B"], p["M"], p["K"], p["N"]
    spec = registry.get(KERNEL)
    work = B * M * N * K
    if _backend.emulating():
        if a.device.type != "cpu":
            raise TiledmmError(f"no GPU is in use (emulation): give CPU tensors; got {describe(a, 'a')}")
        limit = _backend.emulation_limit(spec.emulation_limit)
        if work > limit:
            raise TiledmmError(f"{shape_str(a.shape)} @ {shape_str(b.shape)} is {work:,} multiply-adds, over the "
                               f"emulation limit of {limit:,} for kernel {KERNEL!r}: with no GPU the kernel runs in "
                               "Triton's interpreter. Use smaller matrices, a GPU, or raise TILEDMM_EMULATION_LIMIT.")
    home = a.device
    if not _backend.emulating() and home.type == "cpu":       # host tensors: computed on the GPU, returned here
        dev = torch.device("cuda", torch.cuda.current_device())
        moved = [None if t is None else t.to(dev) for t in (a, b, scale_a, scale_b, bias)]
        r = _run(*moved, out_dtype, act, fast_accum, None, p, config)
        if out is None:
            return r.to(home)
        out.copy_(r)
        return out
    c = out if out is not None else torch.empty(p["res"], dtype=out_dtype, device=home)
    if c.numel() == 0:
        return c
    if K == 0:                                 # no product: act(bias) or act(0)
        c.zero_()
        if bias is not None:
            c.add_(bias.to(out_dtype))
        if act != "none":
            from .ops._impl import activation as _act
            c.copy_(_act(c.float(), act).to(out_dtype))
        return c
    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    if a3.stride(2) != 1 and K > 1:            # row-major A: one copy for any other layout
        a3 = a3.contiguous()
    if b3.stride(1) != 1 and K > 1:            # K-major B: one transposing copy for any other layout
        b3 = b3.transpose(1, 2).contiguous().transpose(1, 2)
    sa3 = _scale3(scale_a, B, M, p["kcols"])
    sb3 = _scale3(scale_b, B, p["brows"], p["bcols"])
    c3 = c if c.dim() == 3 else c.unsqueeze(0)
    direct = out is None or (c3.shape[0] == B and not any(overlaps(c3, t) for t in (a3, b3, scale_a, scale_b))
                             and not (bias is not None and overlaps(c3, bias)))
    target = c3 if direct else torch.empty((B, M, N), dtype=out_dtype, device=home)
    bindable = out is None and config is None and a3.data_ptr() == a.data_ptr() and b3.data_ptr() == b.data_ptr() \
        and home.type == "cuda" and len(_bound) < _MAX_PLANS
    record = [] if bindable else None
    spec.launch(a3, b3, target, tile=None,
                opts={"scale_a": sa3, "scale_b": sb3, "bias": bias, "act": act, "fast_accum": fast_accum,
                      "blockwise": p["blockwise"], "config": config, "record": record})
    if record:
        _bind(record, a, b, scale_a, scale_b, bias, out_dtype, act, fast_accum, p["res"])
    if not direct:
        c3.copy_(target.reshape(c3.shape))
    return c


def _bind(record, a, b, scale_a, scale_b, bias, out_dtype, act, fast_accum, res) -> None:
    """Remember the bound launch of this call's signature (``_repeat`` serves the next one)."""
    global _stream
    from .kernels.block import fp8 as family
    go = family.bind(record)
    if go is None:
        return
    if _stream is None:
        from .kernels.block.fastlaunch import current_stream
        _stream = current_stream
    _bound[_signature(a, b, scale_a, scale_b, bias, out_dtype, act, fast_accum)] = (go, res)


# -- quantisation ------------------------------------------------------------------------------------

def _check_quantize(x, recipe, dtype, block) -> tuple:
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.bfloat16, torch.float16,
                                                          torch.float64):
        what = describe(x, "x") if isinstance(x, torch.Tensor) else type(x).__name__
        raise TiledmmError(f"quantize_fp8 takes a float32, bfloat16, float16 or float64 tensor; got {what}")
    check_recipe(recipe)
    if dtype not in FP8_DTYPES:
        raise TiledmmError(f"dtype must be torch.float8_e4m3fn or torch.float8_e5m2, got {dtype}")
    if x.dim() == 0:
        raise TiledmmError("quantize_fp8 takes a tensor of at least one dimension; got a scalar")
    block = tuple(block)
    if recipe == "blockwise":
        if block not in BLOCKS:
            raise TiledmmError(f"block must be (1, 128) (the A side: activations) or (128, 128) (the B side: "
                               f"weights), got {block}")
        if block == (128, 128) and x.dim() < 2:
            raise TiledmmError(f"128 x 128 blocks need a tensor of at least two dimensions; got {describe(x, 'x')}")
    return block


def scale_shape(shape: tuple, recipe: str, block=(1, 128)) -> tuple:
    """The shape of ``quantize_fp8``'s scale for an x of ``shape``."""
    if recipe == "tensorwise":
        return ()
    if recipe == "rowwise":
        return tuple(shape[:-1]) + (1,)
    if tuple(block) == (1, 128):
        return tuple(shape[:-1]) + (_cdiv(shape[-1], BLOCK),)
    return tuple(shape[:-2]) + (_cdiv(shape[-2], BLOCK), _cdiv(shape[-1], BLOCK))


def _quantize(x, recipe: str, dtype, block: tuple):
    home = x.device
    if _backend.emulating():
        if home.type != "cpu":
            raise TiledmmError(f"no GPU is in use (emulation): give a CPU tensor; got {describe(x, 'x')}")
        if x.numel() > _backend.emulation_limit(2 ** 24):
            raise TiledmmError(f"x {shape_str(x.shape)} has {x.numel():,} elements, over the emulation limit")
    elif home.type == "cpu":
        q, s = _quantize(x.to(torch.device("cuda", torch.cuda.current_device())), recipe, dtype, block)
        return q.to(home), s.to(home)
    q = torch.empty(x.shape, dtype=dtype, device=home)
    s = torch.empty(scale_shape(tuple(x.shape), recipe, block), dtype=torch.float32, device=home)
    if x.numel() == 0:
        s.fill_(EPS / FP8_MAX[dtype])
        return q, s
    C = x.shape[-1]
    R = x.shape[-2] if x.dim() >= 2 else 1
    x3 = x.reshape(-1, R, C)
    q3 = q.view(-1, R, C)
    Bn = x3.shape[0]
    if recipe == "tensorwise":
        kind, s3 = "tensor", s.view(1, 1, 1)
    elif recipe == "rowwise":
        kind, s3 = "rows", s.view(Bn, R, 1)
    elif block == (1, 128):
        kind, s3 = "row_blocks", s.view(Bn, R, _cdiv(C, BLOCK))
    else:
        kind, s3 = "tiles", s.view(Bn, _cdiv(R, BLOCK), _cdiv(C, BLOCK))
    from .kernels.block import fp8 as family
    family.quantize(x3, q3, s3, kind, _name(dtype))
    return q, s


def expand_scale(scale, shape: tuple):
    """The scale at every element of an x of ``shape`` (float32, broadcastable to ``shape``): what
    ``quantize_fp8``'s scales mean, read back from their shape."""
    if scale.numel() == 1:
        return scale.reshape(())
    R = shape[-2] if len(shape) >= 2 else 1
    C = shape[-1]
    s = scale if scale.dim() >= 2 else scale.reshape(1, -1)
    sr, sc = s.shape[-2], s.shape[-1]
    if sc not in (C, 1, _cdiv(C, BLOCK)) or sr not in (R, 1, _cdiv(R, BLOCK)):
        raise TiledmmError(f"scale {shape_str(scale.shape)} fits no recipe for x {shape_str(shape)}")
    if sc != C and sc != 1:
        s = s.repeat_interleave(BLOCK, dim=-1)[..., :C]
    if sr != R and sr != 1:
        s = s.repeat_interleave(BLOCK, dim=-2)[..., :R, :]
    return s if len(shape) >= 2 else s.reshape(s.shape[-1:])


def dequantize_fp8(x8, scale, dtype=torch.float32):
    """``x8 * scale`` in ``dtype`` (float32 default; float64 for references): the inverse of
    ``quantize_fp8`` up to its rounding, for any recipe (read from the scale's shape)."""
    if not isinstance(x8, torch.Tensor) or x8.dtype not in FP8_DTYPES:
        raise TiledmmError(f"dequantize_fp8 takes a float8 tensor; got "
                           f"{describe(x8, 'x8') if isinstance(x8, torch.Tensor) else type(x8).__name__}")
    if not isinstance(scale, torch.Tensor) or not scale.is_floating_point():
        raise TiledmmError(f"scale must be a float tensor; got {type(scale).__name__}")
    return (x8.to(dtype) * expand_scale(scale, tuple(x8.shape)).to(dtype)).to(dtype)


__all__ = ["plan", "call", "dequantize_fp8", "expand_scale", "scale_shape", "check_recipe", "RECIPES", "FP8_DTYPES"]
