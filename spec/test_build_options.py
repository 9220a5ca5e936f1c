"""Meta: the harness reaches a version's build options and kernels only through the contract.

What it introduces: every version declares OPTIONS, a tuple of torchlet.contract.BuildOption
(name, type, default, doc, role), the **options its build takes; a role (MAX_RUNNING,
MAX_STEP_TOKENS, MAX_LEN, NUM_BLOCKS, BLOCK_SIZE) marks what a harness may size. A version with a
paged decode attention declares it in KERNELS under PAGED_DECODE_ATTENTION; Version.options,
option_for(role) and kernel(name) read them. Version.build checks what it is given, once for
every version, before the package's build runs (contract.check_build): a device this machine
lacks, a dtype that is no floating one, a declared option's value of another type or below its
BuildOption.minimum, each refused in one line that names it.
Why the previous version needs it: the benchmark used to guess option names from build
signatures (a list of names the longest sequence might have, a retry when a build refused one)
and imported a module named paged_kernels; a version that named things otherwise was sized wrong
or not found, silently.
Core principle: one declared list per build, read by the build's own refusal and by the harness;
OPTIONS agrees with the build's signature wherever the signature names the option.
Files: torchlet/contract/recipe.py (BuildOption, the roles, PAGED_DECODE_ATTENTION, check_build),
implementations/__init__.py (Version), torchlet/bench/run.py (build_options),
torchlet/bench/micro.py (kernel_bench), torchlet/engines.py (build_sized).
Tradeoff left visible: `model`, which v08 to v10 take so that a later version can hand its model
functions to an earlier build, is a hook between versions rather than an option, so OPTIONS leaves
it out; and a version that declares nothing is read as taking nothing.
"""
import inspect
from types import SimpleNamespace

import pytest
import torch

import implementations
from spec.support.models.fixtures import tiny_checkpoint
from torchlet.bench.micro import kernel_bench
from torchlet.bench.run import build_options
from torchlet.bench.workloads import Workload
from torchlet.contract import (BLOCK_SIZE, GENERATE, MAX_LEN, MAX_RUNNING, MAX_STEP_TOKENS,
                               NUM_BLOCKS, PAGED_DECODE_ATTENTION, PAGED_KV, ROLES, BuildOption,
                               GenerationParams, TorchletError)

CKPT = tiny_checkpoint("tiny_qwen2")
# Keywords a build takes that are not OPTIONS: every build's, and v08's hook for later versions.
NOT_OPTIONS = {"checkpoint", "device", "dtype", "model"}
# Two requests: 3 + 5 and 20 + 7 tokens.
WORKLOAD = Workload("two", ((1, 2, 3), (4,) * 20), (5, 7))


@pytest.mark.spec(needs=GENERATE)
def test_every_version_declares_its_options_with_a_known_role_each_played_once(impl):
    assert "OPTIONS" in vars(impl.package), f"{impl.name} declares no OPTIONS"
    options = impl.options
    assert all(isinstance(o, BuildOption) for o in options)
    names = [o.name for o in options]
    assert len(names) == len(set(names)), names
    roles = [o.role for o in options if o.role is not None]
    assert set(roles) <= set(ROLES) and len(roles) == len(set(roles)), roles
    if impl.option_for(NUM_BLOCKS):  # the bench sizes a pool in blocks of the declared size
        assert impl.option_for(BLOCK_SIZE) is not None


@pytest.mark.spec(needs=GENERATE)
def test_the_build_takes_every_declared_option_and_refuses_any_other(impl):
    engine = impl.build(CKPT, **{o.name: o.default for o in impl.options})
    assert len(engine.generate([[1, 2, 3]], GenerationParams(max_new_tokens=2))[0]) == 2
    with pytest.raises(TypeError, match="no_such_option"):
        impl.build(CKPT, no_such_option=1)


@pytest.mark.spec(needs=GENERATE)
def test_options_agree_with_the_build_signature_wherever_it_names_them(impl):
    declared = {o.name: o for o in impl.options}
    params = inspect.signature(impl.package.build).parameters
    named = {n: p for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    assert set(named) - NOT_OPTIONS <= set(declared), "the build names an option OPTIONS lacks"
    for name, param in named.items():
        if name in declared:
            assert param.default == declared[name].default, name


@pytest.mark.spec(needs=GENERATE)
def test_the_bench_builds_every_version_with_only_what_it_declares(impl):
    options = build_options(impl, {MAX_RUNNING: 2, MAX_STEP_TOKENS: 64}, {"no_such_option": 1},
                            WORKLOAD)
    assert set(options) <= {o.name for o in impl.options}
    engine = impl.build(CKPT, **options)  # no TypeError: nothing it doesn't take
    assert len(engine.generate([[1, 2, 3]], GenerationParams(max_new_tokens=2))[0]) == 2


def fake_version(*options, kernels=None) -> implementations.Version:
    package = SimpleNamespace(CAPABILITIES=(), OPTIONS=options, KERNELS=kernels or {})
    return implementations.Version("v99_fake", package)


def test_the_bench_finds_sizing_options_by_their_role_never_by_their_name():
    version = fake_version(
        BuildOption("lanes", int, None, "running requests", MAX_RUNNING),
        BuildOption("longest", int, None, "prompt + output", MAX_LEN),
        BuildOption("pages", int, None, "pool size", NUM_BLOCKS),
        BuildOption("page", int, 4, "tokens per page", BLOCK_SIZE),
        BuildOption("max_model_len", int, None, "a familiar name without a role"))
    wishes = {MAX_RUNNING: 2, MAX_STEP_TOKENS: 64}  # no option plays MAX_STEP_TOKENS: dropped
    # the longest request is 27 tokens; pages of 4 tokens: 2 + 7 of them, and the null page
    assert build_options(version, wishes, {}, WORKLOAD) == {"lanes": 2, "longest": 27, "pages": 10}
    # a named option goes where it is declared, and the pool is sized in the page it sets
    assert build_options(version, wishes, {"page": 8, "max_model_len": 30, "other": 1},
                         WORKLOAD) == {"lanes": 2, "longest": 27, "page": 8, "max_model_len": 30,
                                       "pages": 1 + 1 + 4}


@pytest.mark.spec(needs=PAGED_KV, kernels=True)
def test_the_kernel_bench_times_the_paged_attention_the_version_declares(impl):
    kernel = impl.kernel(PAGED_DECODE_ATTENTION)
    assert kernel is impl.package.KERNELS[PAGED_DECODE_ATTENTION]
    # A Triton kernel runs where its tensors are: compiled on a GPU, in the interpreter on a CPU.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    row = kernel_bench(impl, 2, 24, heads=4, kv_heads=2, head_dim=16, device=device,
                       dtype=torch.float32, block_size=8, bandwidth=1e12, iters=1)
    assert row["version"] == impl.name and row["max_abs_diff"] < 1e-4  # it agrees with SDPA


def test_a_version_without_the_kernel_says_so_by_name():
    version = fake_version()
    assert not version.has_kernel(PAGED_DECODE_ATTENTION)
    with pytest.raises(TorchletError, match="v99_fake declares no kernel 'paged_decode_attention'"):
        version.kernel(PAGED_DECODE_ATTENTION)


def bad_values(option: BuildOption) -> list:
    """Values of the wrong type or out of range for a declared option."""
    if option.type is int:
        low = [] if option.minimum is None else [option.minimum - 1, -1]
        return [*low, True, 1.5, "4"] + ([] if option.default is None else [None])
    if option.type is bool:
        return [1, "yes", None]
    return [5]  # a number where a callable or another object belongs


@pytest.mark.spec(needs=GENERATE)
def test_a_bad_device_dtype_or_option_value_is_refused_in_one_line_naming_it(impl):
    """Checked once for every version (Version.build, from OPTIONS): max_lanes=0 used to
    mean the default, and a bool passed for an int."""
    given = [("dtype", torch.int64), ("dtype", "float32"), ("device", "gpu")]
    given += [(o.name, v) for o in impl.options for v in bad_values(o)]
    for name, value in given:
        with pytest.raises(TorchletError) as refused:
            impl.build(CKPT, **{name: value})
        message = str(refused.value)
        assert name in message and "\n" not in message, (name, value, message)


@pytest.mark.spec(needs=GENERATE)
def test_a_cuda_build_on_a_machine_without_cuda_is_one_torchlet_error(impl, monkeypatch):
    """torch answers it with a bare AssertionError from deep inside the first tensor moved."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TorchletError, match=r"^device='cuda': this machine has no CUDA GPU") as e:
        impl.build(CKPT, device="cuda")
    assert "\n" not in str(e.value)
