"""The page of `torchlet serve` in a real browser.

What it introduces: headless Chromium (spec/support/serve/cdp.py) on the server's page at /: a
message typed and sent, its answer streamed in, and the engine panel fed by /engine/events.
Why spec/test_serve.py needs it: that spec is a client of the API; only a browser shows that the
page's script streams the answer as it comes, that the block grid follows the engine while the
answer is made, and that nothing on the page throws.
Core principle: observe what a reader sees: the page's own DOM, recorded by a MutationObserver
as it changes (no sleeping: the spec awaits a promise that the page resolves), the answer
against engine.generate's, the grid's cached blocks against the server's state once the answer
is in (the request's full blocks keep their K/V), errors from the browser's console.
Files: torchlet/serve/page/ (index.html, page.js, page.css), torchlet/serve/app.py.
Tradeoff left visible: it needs /usr/bin/chromium, so it is a separate step of .ci/run and skips
elsewhere; it watches one conversation turn on one version.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import implementations
from spec.support.models.hf_dirs import ascii_chat_dir, byte_tokenizer
from spec.support.serve.serve_app import InProcess
from torchlet import running
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import PREFIX_CACHE, GenerationParams
from torchlet.engines import build_sized
from torchlet.text import prompt_ids, stop_ids

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"no browser: {CHROMIUM} is missing "
                                        "(apt-get install -y chromium)")]
QUESTION = "What is 2+2?"

# Installed before the message is sent: records the answer's text and the number of held
# blocks at every change of the page, and resolves window.done when the answer is complete.
WATCH = """
window.seen = {answer: [], held: []};
window.done = new Promise((resolve) => {
  new MutationObserver(() => {
    const answers = document.querySelectorAll('#messages .msg.assistant');
    const text = answers.length ? answers[answers.length - 1].textContent : '';
    if (text !== window.seen.answer[window.seen.answer.length - 1]) window.seen.answer.push(text);
    window.seen.held.push(document.querySelectorAll('#blocks .used, #blocks .shared').length);
    if (answers.length && !document.getElementById('send').disabled &&
        window.seen.held[window.seen.held.length - 1] === 0) resolve(text);
  }).observe(document.body, {subtree: true, childList: true, characterData: true,
                             attributes: true});
});
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The server in this process (spec/support/serve/serve_app.py)."""
    root = implementations.REFERENCE_ROOT
    version = [v for v in implementations.discover(root) if PREFIX_CACHE in v.capabilities][-1]
    model = ascii_chat_dir(tmp_path_factory.mktemp("serve_page_model"))
    checkpoint = load_hf_dir(model)
    context = checkpoint.config.max_position
    with running.kernels_off("cpu", interpret=False):  # as `torchlet serve` builds it on a CPU
        engine = build_sized(version, checkpoint, max_model_len=context, max_running=8,
                             **running.serving_options(version, "cpu"))
    server = InProcess(engine, version, byte_tokenizer(), checkpoint.config, model.name, context)
    yield server, version, model
    server.stop()


@pytest.fixture
def browser(tmp_path):
    from spec.support.serve.cdp import Browser

    b = Browser(CHROMIUM, tmp_path / "profile")
    yield b
    b.close()


def answer(version, model) -> str:
    """engine.generate's answer to QUESTION with the server's default max_tokens."""
    tokenizer, checkpoint = byte_tokenizer(), load_hf_dir(model)
    ids = prompt_ids(tokenizer, [{"role": "user", "content": QUESTION}])
    context = checkpoint.config.max_position
    params = GenerationParams(max_new_tokens=min(128, context - len(ids)),
                              eos_token_ids=stop_ids(tokenizer, checkpoint.config.eos_token_ids))
    with running.kernels_off("cpu", interpret=False):
        engine = build_sized(version, checkpoint, max_model_len=context, max_running=1,
                             **running.serving_options(version, "cpu"))
        (tokens,) = engine.generate([ids], params)
    return tokenizer.decode(tokens, skip_special_tokens=True)


def test_a_message_sent_from_the_page_streams_its_answer_while_the_block_grid_changes(
        served, browser, tmp_path, monkeypatch):
    server, version, model = served
    # Triton layers on their PyTorch path, as `torchlet serve` runs them on a CPU: the suite
    # sets TRITON_INTERPRET before each spec, and an engine built here reads it
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    browser.goto(f"{server.url}/")
    ready = browser.call("Runtime.evaluate", awaitPromise=True, returnByValue=True, expression=(
        "new Promise((resolve) => { const check = () => "
        "(document.getElementById('model').textContent.startsWith('serve_page_model') && "
        "document.querySelectorAll('#blocks .block').length) ? resolve(true) : "
        "requestAnimationFrame(check); check(); })"))
    assert ready["result"]["value"] is True, "the page never showed the model and the pool"
    browser.js(WATCH)
    browser.js(f"document.getElementById('question').value = {QUESTION!r}; "
               "document.getElementById('send').click()")
    done = browser.call("Runtime.evaluate", expression="window.done", awaitPromise=True,
                        returnByValue=True)
    seen = browser.js("window.seen")
    assert done["result"]["value"] == answer(version, model)
    assert len(seen["answer"]) > 2, "the answer appeared at once, not streamed"
    assert max(seen["held"]) > 0 and seen["held"][-1] == 0, \
        "the block grid did not show the request's blocks taken, then given back"
    assert browser.js("document.querySelector('#messages .msg.user').textContent") == QUESTION
    assert browser.js("document.querySelectorAll('#steps tr').length") > 0
    cached = browser.js("[...document.querySelectorAll('#blocks .cached')]"
                        ".map((c) => Number(c.dataset.block))")
    state = browser.call("Runtime.evaluate", awaitPromise=True, returnByValue=True, expression=(
        "fetch('/engine/state').then((r) => r.json())"))["result"]["value"]
    assert cached and sorted(cached) == sorted(state["cached"]), \
        "the grid does not colour the answered request's full blocks as cached"
    browser.screenshot(tmp_path / "serve-page.png")
    assert browser.errors == []
    keep = os.environ.get("TORCHLET_SCREENSHOTS")  # a directory to keep it in (docs/)
    if keep:
        shutil.copy(tmp_path / "serve-page.png", Path(keep) / "serve-page.png")
