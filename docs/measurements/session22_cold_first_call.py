"""Where a never-seen class's first call goes with Triton's cache cold (fresh process, empty caches)."""
import cProfile, pstats, io, sys, time, os
import torch
import tiledmm
dt = getattr(torch, sys.argv[1])
a = torch.randn(1536, 1536, device="cuda", dtype=dt); b = torch.randn(1536, 1536, device="cuda", dtype=dt)
torch.cuda.synchronize()
pr = cProfile.Profile()
t = time.perf_counter()
pr.enable()
c = tiledmm.matmul(a, b)
torch.cuda.synchronize()
pr.disable()
first = time.perf_counter() - t
a2 = torch.randn(775, 1536, device="cuda", dtype=dt); b2 = torch.randn(1536, 3077, device="cuda", dtype=dt)
t = time.perf_counter(); c2 = tiledmm.matmul(a2, b2); torch.cuda.synchronize(); other = time.perf_counter() - t
print(f"{sys.argv[1]}: first call {first:.3f} s (cold Triton cache); a new class in this process {other:.3f} s")
s = io.StringIO()
st = pstats.Stats(pr, stream=s).sort_stats("cumulative")
st.print_stats(r"(compiler\.py.*\(compile\)|make_launcher|_build|build\.py|triton_key|_self_test|_decide|get_cache_key|cuda_utils|CudaUtils|compile_module|subprocess\.py.*\(run\)|ptxas|make_cubin|make_ptx|make_llir|make_ttgir|make_ttir|load_binary|resolved|_resolve|bind\b|__init__.py.*\(load\))")
print("\n".join(l for l in s.getvalue().splitlines() if l.strip())[:6000])
