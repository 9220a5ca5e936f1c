"""Host work per step (issue 48): a request's output holds its prompt and tokens where they are,
copying neither, and what it holds never changes. Each mutant still reports the right tokens at
the time; the spec measures what 40 outputs hold (tracemalloc) and rereads old outputs."""
from spec.mutants import Edit, Mutant

REQUEST = "v03_request_states/request.py"
SPEC = ("spec/test_request_outputs.py::test_an_output_holds_its_tokens_without_copying_them_and_"
        "they_never_change")
OUTPUT = "        return RequestOutput(self.id, self.shown_prompt, TokenView(self.tokens), self.state,\n"
PROPERTY = "host work per step"

MUTANTS = [
    Mutant("v03-outputs-copy-the-tokens", PROPERTY, (
        Edit(REQUEST, OUTPUT, OUTPUT.replace("TokenView(self.tokens)", "list(self.tokens)")),),
        (SPEC,), ("v03",), "each output copies the request's token list: O(tokens) a request a "
                           "step"),
    Mutant("v03-outputs-share-the-live-list", PROPERTY, (
        Edit(REQUEST, OUTPUT, OUTPUT.replace("TokenView(self.tokens)", "self.tokens")),),
        (SPEC,), ("v03",), "outputs hold the request's own list: an old output grows with the "
                           "tokens after it"),
    Mutant("v03-outputs-copy-the-prompt", PROPERTY, (
        Edit(REQUEST, OUTPUT, OUTPUT.replace("self.shown_prompt", "list(self.prompt)")),),
        (SPEC,), ("v03",), "each output copies the prompt again: O(prompt) a request a step"),
]
