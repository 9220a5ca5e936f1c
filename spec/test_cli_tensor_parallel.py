"""Page contract: `torchlet generate --tensor-parallel N` and torchrun run a tensor-parallel
version's ranks.

What it shows: the harness side of v16. `--tensor-parallel 2` starts one more process here (rank
1) and joins it in a gloo group (NCCL on GPUs) with this one (rank 0); under torchrun (one machine
or several) every process torchrun starts finds its rank and the world in its environment, rank 0
answers and the others follow (torchlet/parallel.py). Without --impl, the newest version with the
tensor_parallel capability runs. The answer is the one-device answer, token for token, from
generate and from chat alike (both run through torchlet/generate.py's run_on_ranks).

Every failure a user can cause (N below 1, a version that runs on one device, a flag that
contradicts torchrun's world) is one line and a non-zero exit status, refused before any rank
starts here, and leaves no rank behind.

Tradeoff left visible: a rank is a process with its own interpreter: the start-up (torch's
import, the model's load on every rank) is paid once per run, seconds on a CPU."""
from __future__ import annotations

import functools
import io
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spec.support.models.hf_dirs import save_tiny
from torchlet import cli, parallel
from torchlet.contract import TENSOR_PARALLEL
from torchlet.learner import child_env
from torchlet.parallel import free_port
from torchlet.text import load_tokenizer, prompt_ids

import implementations

pytestmark = pytest.mark.skipif(
    not any(TENSOR_PARALLEL in v.capabilities for v in implementations.discover()),
    reason="no version has the tensor_parallel capability")

NEW = "8"


@functools.lru_cache(maxsize=None)
def model_dir() -> tuple[Path, str]:
    """A tiny Llama with a byte tokenizer, and its answer to "Hello" as Hugging Face's greedy
    generate gives it (float32, one device)."""
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="torchlet-tp-cli-"))
    model = save_tiny(out, "llama", tokenizer=True, seed=3, printable=True)
    tokenizer = load_tokenizer(out)
    prompt = prompt_ids(tokenizer, "Hello")
    with torch.inference_mode():
        tokens = model.generate(torch.tensor([prompt]), max_new_tokens=int(NEW), do_sample=False,
                                eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
    answer = tokenizer.decode(tokens[0, len(prompt):], skip_special_tokens=True)
    assert answer.strip(), "the tiny model should say something for this spec to mean anything"
    return out, answer


def run(capsys, *argv):
    capsys.readouterr()  # the test's own set-up (a model directory written first) is not the CLI's
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_tensor_parallel_2_answers_as_one_device_does_and_leaves_no_rank_behind(capsys):
    path, expected = model_dir()
    code, out, err = run(capsys, "generate", "Hello", "--model", str(path), "--max-new-tokens",
                         NEW, "--tensor-parallel", "2")
    assert code == 0, err
    assert out == expected + "\n"
    assert "tensor parallel over 2 ranks" in err and newest_parallel() in err
    assert multiprocessing.active_children() == []


def test_torchrun_with_two_local_ranks_over_loopback_answers_the_same():
    """The multi-node command of the README, on one machine: torchrun starts both ranks."""
    path, expected = model_dir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "torchlet", "generate", "Hello", "--model", str(path), "--max-new-tokens", NEW]
    env = {**child_env(), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    # torchrun's own summary ends stderr and says only how a rank died; the ranks' lines (a
    # C++ abort's message among them) come before it
    assert done.returncode == 0, done.stderr[-8000:]
    assert done.stdout == expected + "\n"
    assert "tensor parallel over 2 ranks" in done.stderr


def test_chat_with_tensor_parallel_2_answers_as_one_device_does(capsys, monkeypatch):
    """chat takes generate's flags, --tensor-parallel among them: it used to ignore that one."""
    path, expected = model_dir()
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\n"))
    code, out, err = run(capsys, "chat", "--model", str(path), "--max-new-tokens", NEW,
                         "--tensor-parallel", "2")
    assert code == 0, err
    assert out == expected + "\n"
    assert "tensor parallel over 2 ranks" in err and newest_parallel() in err
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("command", ["generate", "chat"])
@pytest.mark.parametrize("argv, says", [
    (["--tensor-parallel", "0"], "--tensor-parallel must be at least 1"),
    (["--tensor-parallel", "2", "--impl", "v07"], "tensor_parallel capability"),
])
def test_a_tensor_parallel_mistake_is_one_line_before_any_rank_starts(capsys, monkeypatch,
                                                                      command, argv, says):
    """Refused before rank 1 is started: started first, it took 4-6 s to refuse and printed
    gloo's "Connection closed by peer" first."""
    started, enter = [], parallel.Ranks.__enter__
    monkeypatch.setattr(parallel.Ranks, "__enter__",
                        lambda ranks: started.append(ranks.world) or enter(ranks))
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\n"))
    path, _ = model_dir()
    prompt = ["Hello"] if command == "generate" else []
    code, out, err = run(capsys, command, *prompt, "--model", str(path), *argv)
    assert code == 1 and out == ""
    assert says in err and err.count("\n") == 1, err
    assert started == [] and multiprocessing.active_children() == []


def test_a_tensor_parallel_flag_that_contradicts_torchrun_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    path, _ = model_dir()
    code, out, err = run(capsys, "generate", "Hello", "--model", str(path),
                         "--tensor-parallel", "3")
    assert code == 1 and "torchrun started 2 ranks" in err and err.count("\n") == 1, err
    assert os.environ["WORLD_SIZE"] == "2"


def newest_parallel() -> str:
    """The version --tensor-parallel picks without --impl: the newest that declares it."""
    import implementations
    from torchlet.contract import TENSOR_PARALLEL
    return [v.name for v in implementations.discover() if TENSOR_PARALLEL in v.capabilities][-1]
