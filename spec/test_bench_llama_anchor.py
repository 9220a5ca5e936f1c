"""`torchlet bench main-job --threads 1,2`, with llama.cpp beside it as the CPU's anchor.

What it introduces: the main job's paired comparison run at each of several torch thread counts
in one process, rows for each; and a llama.cpp row at each count, from llama-cpp-python on the
same GGUF file that the main job converts, the same prompt ids, greedy, as many threads.

Why the versions need it: issue 30 asks for the default version against HF at 1 and 2 threads,
and for llama.cpp beside them, an anchor that says how far a CPU can go on this model (about
122 tokens/s at 1 thread on the Q4_1 file, where HF makes about 16).

Core principle: llama-cpp-python is an optional extra that builds from source, so a machine
without it gets no row and a note that says why, never an error. Its ids come from other
weights (the file's quantized ones) and are reported, not required. The specs run a fake
module in its place: they check what the bench asks of it (threads, greedy, a fresh cache each
round), never a timing.

Files to compare: torchlet/bench/llama_anchor.py against torchlet/bench/main_job.py (whose
contenders and rounds it joins).

Tradeoff left visible: the thread counts run one after another, so a change of load between
them moves one count's rows and not the other's; within a count the rows alternate.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import types

import pytest

import implementations
from spec.support.models.gguf_files import write_gguf
from torchlet import gguf_model
from torchlet.bench.llama_anchor import NAME
from torchlet.bench.main_job import HF
from torchlet.cli import main
from torchlet.running import default_version

NEW_TOKENS = 3


class FakeLlama:
    """llama_cpp.Llama as far as the bench uses it; every call is noted in `calls`."""

    calls: list = []

    def __init__(self, **kwargs):
        self.calls.append(("init", kwargs))

    def reset(self):
        self.calls.append(("reset", {}))

    def generate(self, tokens, **kwargs):
        self.calls.append(("generate", {"tokens": tokens, **kwargs}))
        while True:  # as llama.cpp's: never ends by itself
            yield 7


def bench(tmp_path, llama_cpp, threads: str) -> tuple[int, dict, str]:
    """main-job on a tiny GGUF file with `llama_cpp` as the module (None: not installed): the
    exit code, the result file and what it logged."""
    path = tmp_path / "tiny.F32.gguf"
    write_gguf(path, "llama", seed=3)
    out, err = tmp_path / "out", io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(gguf_model.CACHE_ENV, str(tmp_path / "cache"))
        mp.setitem(sys.modules, "llama_cpp", llama_cpp)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["bench", "main-job", "--model", str(path), "--threads", threads,
                         "--rounds", "1", "--max-new-tokens", str(NEW_TOKENS), "--quiet",
                         "--out", str(out)])
    return code, json.loads((out / "main-job.json").read_text()), err.getvalue()


@pytest.fixture(scope="module")
def faked(tmp_path_factory):
    FakeLlama.calls = []
    fake = types.SimpleNamespace(Llama=FakeLlama, __version__="0.0-fake")
    code, result, _ = bench(tmp_path_factory.mktemp("faked"), fake, "1,2")
    assert code == 0
    return result, FakeLlama.calls


def test_each_thread_count_gets_hf_the_default_version_and_llama_cpp_in_turn(faked):
    result, _ = faked
    # the file's weights are F32: the default for float weights (for_floats), not v18
    default = default_version(implementations.discover(), "cpu").name
    assert [(r["version"], r["threads"]) for r in result["rows"]] == [
        (HF, 1), (default, 1), (NAME, 1), (HF, 2), (default, 2), (NAME, 2)]
    assert result["workload"]["threads"] == [1, 2] and result["notes"] == []
    for r in result["rows"]:
        assert "error" not in r, r
        assert r["output_tokens"] == NEW_TOKENS
    hf = {r["threads"]: r for r in result["rows"] if r["version"] == HF}
    for r in result["rows"]:  # each ratio within its own thread count
        assert r["vs_hf"] == pytest.approx(r["tok_s_median"] / hf[r["threads"]]["tok_s_median"])


def test_llama_cpp_runs_the_same_file_and_ids_greedily_with_the_rows_thread_count(faked):
    result, calls = faked
    inits = [kw for what, kw in calls if what == "init"]
    assert [(kw["n_threads"], kw["n_threads_batch"]) for kw in inits] == [(1, 1), (2, 2)]
    assert all(kw["model_path"].endswith("tiny.F32.gguf") for kw in inits)
    runs = [kw for what, kw in calls if what == "generate"]
    assert len(runs) == 2 * 2  # a warm-up and one round at each count
    hf_prompt_tokens = result["workload"]["prompt_tokens"]
    assert all(kw["temp"] == 0.0 and len(kw["tokens"]) == hf_prompt_tokens for kw in runs)
    # every run starts from an empty cache: reset just before each generate
    assert [what for what, _ in calls if what != "init"] == ["reset", "generate"] * 4


def test_llama_cpps_ids_are_reported_against_hfs_not_required(faked):
    result, _ = faked
    anchor = next(r for r in result["rows"] if r["version"] == NAME)
    hf = next(r for r in result["rows"] if r["version"] == HF)
    assert anchor["anchor"] is True and anchor["weights"] == "F32"
    assert anchor["token_ids"] == [7] * NEW_TOKENS
    assert anchor["same_ids_as_hf"] is (hf["token_ids"] == anchor["token_ids"])


def test_the_report_judges_the_target_at_each_thread_count_with_the_anchor_beside_it(faked,
                                                                                     tmp_path):
    result, _ = faked
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "main-job.json").write_text(json.dumps(result))
    doc = tmp_path / "docs" / "benchmarks.md"
    assert main(["bench", "report", "--results", str(tmp_path / "results"), "--doc",
                 str(doc)]) == 0
    text = doc.read_text()
    for count in ("at 1 thread: **", "at 2 threads: **"):
        assert f"≥ 1.5x HF generate's tokens/s {count}" in text
    assert text.count("- Anchor, not a target: llama.cpp") == 2
    assert "| not required (F32 weights): " in text


def test_without_llama_cpp_python_the_row_is_left_out_with_a_note(tmp_path):
    code, result, logged = bench(tmp_path, None, "1")  # None in sys.modules: ImportError
    assert code == 0
    assert [r["version"] for r in result["rows"]] == [
        HF, default_version(implementations.discover(), "cpu").name]
    assert result["notes"] == ["No llama.cpp row: llama-cpp-python is not installed (pip "
                               "install 'torchlet[llama]', which builds llama-cpp-python from "
                               "source)."]
    assert result["notes"][0] in logged


@pytest.mark.parametrize("threads", ["0", "1,x", "2,2", ""])
def test_main_job_refuses_thread_counts_it_cannot_run_in_one_line(threads, capsys):
    assert main(["bench", "main-job", "--threads", threads, "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("torchlet: error: --threads takes distinct positive counts separated by "
                   f"commas, e.g. 1,2; got {threads!r}")
