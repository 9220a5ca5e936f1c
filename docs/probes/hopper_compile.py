"""Every Triton kernel launch some CPU specs make, compiled for a Hopper GPU (sm_90a) on a machine
without one: a check that a kernel written or changed under the interpreter at least compiles
(Triton's front end, its passes and ptxas, which the triton wheel ships), before a GPU is lent.
The interpreter accepts code the compiler refuses, and sessions have gone by without a GPU
(docs/gpu.md). It proves nothing of a kernel's numbers or speed: the GPU specs and the bench do.

Two steps, since the interpreter and the compiler cannot share a process (TRITON_INTERPRET
decides what @triton.jit makes when a module is imported):

    TRITON_INTERPRET=1 CI=1 python docs/probes/hopper_compile.py record LAUNCHES.json [PYTEST ARGS]
    python docs/probes/hopper_compile.py compile LAUNCHES.json
    PYTHONPATH=. python docs/probes/hopper_compile.py one-row

`one-row` compiles v10's decode attention kernel and v13's attend_project at a one-row GPU
step's settings (bfloat16, 4 warps, tiles of 128 tokens; Qwen2.5-0.5B's heads and Qwen3-0.6B's,
launched plainly and dependent; attend_project with 8 of o's rows a program, or O_ROWS=N) and
prints ptxas's registers and spills: the figures of docs/perf-notes.md's "Without a GPU"
section. PYTHONPATH=<a checkout> gives another tree's.

`record` runs pytest in this process (default: the kernel pages, v09 to v18) and keeps each
distinct launch: the kernel, its arguments' types (a tensor's dtype, an int's width), its
constexprs' values and its launch options. `compile` compiles each for sm_90a with the options
it was launched with and prints the registers and spills ptxas reports; it exits 1 if any
fails. The launches are the CPU's: pointers mostly float32 where a GPU step's are bfloat16,
and block sizes the interpreter's plans choose (a few large programs), so their registers and
spills are not a GPU step's; docs/perf-notes.md's figures come from the GPU's settings.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile

DEFAULT_SPECS = ["spec/test_v09_triton_kernels.py", "spec/test_v10_paged_kernels.py",
                 "spec/test_v13_fused.py", "spec/test_v18_triton_kernels.py",
                 "-p", "no:xdist", "-p", "no:cacheprovider", "-q"]
OPTIONS = ("num_warps", "num_stages")  # the launch options that change the compiled code
DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64",
          "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8",
          "bool": "i1"}


def describe(value):
    """An argument as the compiler's signature needs it."""
    if hasattr(value, "data_ptr"):
        return "*" + DTYPES[str(value.dtype).removeprefix("torch.")]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no signature type for {value!r}")


def record(path: str, args: list[str]) -> int:
    import pytest
    from triton.runtime.interpreter import InterpretedFunction

    launches = {}
    run = InterpretedFunction.run

    def recording(self, *call_args, grid, warmup, **kwargs):
        names = self.arg_names
        bound = dict(zip(names, call_args)) | {k: v for k, v in kwargs.items() if k in names}
        marks = inspect.get_annotations(self.fn)
        consts = {n: v for n, v in bound.items()
                  if "constexpr" in str(marks.get(n, "")) or v is None or isinstance(v, str)}
        entry = {"module": self.fn.__module__, "kernel": self.fn.__qualname__,
                 "signature": {n: describe(v) for n, v in bound.items() if n not in consts},
                 "constexprs": consts,
                 "options": {k: v for k, v in kwargs.items() if k in OPTIONS}}
        launches.setdefault(json.dumps(entry, sort_keys=True), entry)
        return run(self, *call_args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = recording
    status = pytest.main(args or DEFAULT_SPECS)
    with open(path, "w") as f:
        json.dump(list(launches.values()), f, indent=1)
    print(f"{len(launches)} distinct launches of "
          f"{len({(e['module'], e['kernel']) for e in launches.values()})} kernels -> {path}")
    return int(status)


def ptxas_report(ptx: str) -> str:
    """ptxas -v's registers and spills for the compiled PTX."""
    from triton.backends.nvidia.compiler import get_ptxas
    ptxas = get_ptxas(90).path  # the one Triton compiles Hopper's PTX with
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        out = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", f.name, "-o", os.devnull],
                             capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", out)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    return (f"{regs[1] if regs else '?'} registers, "
            f"{'%s/%s' % spills.groups() if spills else '?'} bytes spilled (stores/loads)")


def compile_all(path: str) -> int:
    assert not os.environ.get("TRITON_INTERPRET"), "compile runs without TRITON_INTERPRET"
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    failed = 0
    for e in json.load(open(path)):
        kernel = getattr(importlib.import_module(e["module"]), e["kernel"])
        signature = {n: e["signature"].get(n, "constexpr") for n in kernel.arg_names}
        label = (f"{e['module'].split('.')[-2]}.{e['kernel']} "
                 f"{' '.join(f'{k}={v}' for k, v in e['constexprs'].items())} {e['options']}")
        try:
            compiled = triton.compile(ASTSource(kernel, signature, e["constexprs"]),
                                      target=target, options=e["options"])
        except Exception as error:  # the compiler's message is the finding
            failed += 1
            print(f"FAILED {label}\n    {str(error).strip().splitlines()[-1][:300]}")
            continue
        print(f"ok {label}: {ptxas_report(compiled.asm['ptx'])}")
    print(f"{failed} of {len(json.load(open(path)))} launches failed to compile for sm_90a")
    return 1 if failed else 0


def one_row() -> int:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import implementations
    paged = implementations.load("v10_triton_paged_gqa").package.paged_kernels
    attend = implementations.load("v13_fused").package.attend_project
    bf16, ints = "*bf16", "i32"
    common = dict(q_ptr=bf16, k_ptr=bf16, v_ptr=bf16, tables_ptr="*i32", lens_ptr="*i32",
                  part_ptr="*fp32", scale="fp32", w_ptr=bf16, bias_ptr=bf16, heads_ptr=bf16,
                  out_ptr=bf16, counts_ptr="*i64")
    tiles = dict(BLOCK_N=int(os.environ.get("O_ROWS", 8)), BLOCK_K=1024, HAS_BIAS=False)
    kernels = ((paged._paged_decode_kernel, dict(SPLIT=False, BLOCK_N=paged.BLOCK_N)),
               (attend._attend_project_kernel, dict(BLOCK_T=paged.BLOCK_N, **tiles)))
    for model, group, head_dim in (("Qwen2.5-0.5B", 7, 64), ("Qwen3-0.6B", 2, 128)):
        for kernel, consts in kernels:
            for pdl in (False, True):
                constexprs = dict(PAGE=16, BLOCK_G=paged._pad(group), BLOCK_D=paged._pad(head_dim),
                                  PRECISION="tf32", PDL=pdl, **consts)
                types = common
                signature = {n: types.get(n, "constexpr" if n in constexprs else ints)
                             for n in kernel.arg_names}
                compiled = triton.compile(ASTSource(kernel, signature, constexprs),
                                          target=GPUTarget("cuda", 90, 32),
                                          options={"num_warps": 4})
                print(f"{model:13} {kernel.__name__:24} {'dependent' if pdl else 'plain':9} "
                      f"{ptxas_report(compiled.asm['ptx'])}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["one-row"]:
        sys.exit(one_row())
    if len(sys.argv) < 3 or sys.argv[1] not in ("record", "compile"):
        sys.exit(__doc__)
    if sys.argv[1] == "record":
        sys.exit(record(sys.argv[2], sys.argv[3:]))
    sys.exit(compile_all(sys.argv[2]))
