"""Exploration: candidates of one problem at its published shapes, checked against the fp64 reference with
constant parameters redrawn, then timed with do_bench (L2 flushed by do_bench's cache clear)."""
import importlib.util, sys, json, time
import torch, triton

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

problem, cands = sys.argv[1], sys.argv[2:]
P = load(problem, "prob")
torch.manual_seed(0)
ref = P.Model(*P.get_init_inputs()).cuda()
with torch.no_grad():
    for n, p in ref.named_parameters():
        if p.dim() <= 1 or n.endswith("scale"):
            p.copy_(torch.randn_like(p) * 0.5 + (1.0 if "weight" in n or "scale" in n else 0.0))
inputs = [x.cuda() for x in P.get_inputs()]
ref64 = P.Model(*P.get_init_inputs()).cuda().double(); ref64.load_state_dict(ref.state_dict())
with torch.no_grad():
    want = ref64(*[x.double() for x in inputs]).float()
torch.backends.cudnn.allow_tf32 = True; torch.backends.cuda.matmul.allow_tf32 = False
eager_ms = triton.testing.do_bench(lambda: ref(*inputs))
comp = torch.compile(ref)
comp(*inputs)
comp_ms = triton.testing.do_bench(lambda: comp(*inputs))
print(json.dumps({"problem": problem, "eager_ms": eager_ms, "compiled_ms": comp_ms, "gpu": torch.cuda.get_device_name()}), flush=True)
for c in cands:
    try:
        M = load(c, "cand" + str(abs(hash(c))))
        new = M.ModelNew(*P.get_init_inputs()).cuda(); new.load_state_dict(ref.state_dict(), strict=False)
        with torch.no_grad():
            got = new(*inputs)
        err = (got.double() - want.double()).abs().max().item(); scale = want.abs().max().item()
        ms = triton.testing.do_bench(lambda: new(*inputs))
        print(json.dumps({"cand": c, "ms": round(ms, 4), "max_err": err, "max_out": scale, "err_frac_of_max": err / scale,
                          "speedup_vs_best": round(min(eager_ms, comp_ms) / ms, 3)}), flush=True)
    except Exception as e:
        print(json.dumps({"cand": c, "error": repr(e)[:800]}), flush=True)
