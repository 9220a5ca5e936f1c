"""Text in and out: the tokenizer of a checkpoint directory, its chat template, and decoding a
stream of token ids into text as it comes. Engines never see any of this."""
from __future__ import annotations

from pathlib import Path

from torchlet.contract import CheckpointError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def load_tokenizer(path: str | Path):
    """The Hugging Face tokenizer saved in a checkpoint directory."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not any((path / f).exists() for f in TOKENIZER_FILES):
        raise CheckpointError(
            f"{path} has no tokenizer files (expected one of {', '.join(TOKENIZER_FILES)})")
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # transformers raises many kinds; the caller needs only the reason
        raise CheckpointError(f"{path}: cannot load its tokenizer: {e}") from None


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def prompt_ids(tokenizer, text: str | list[dict], chat: bool = True) -> list[int]:
    """Token ids of a user message, wrapped in the chat template when the tokenizer has one; or
    of a whole conversation, a list of {"role", "content"} messages (system, user, assistant)
    ending with the user's, which needs the template."""
    if isinstance(text, list) and not (chat and has_chat_template(tokenizer)):
        raise CheckpointError("a conversation needs a chat template, and this model's tokenizer "
                              "has none")
    if chat and has_chat_template(tokenizer):
        messages = text if isinstance(text, list) else [{"role": "user", "content": text}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        # transformers 5 returns a BatchEncoding here, 4.x a plain list
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        return [int(t) for t in ids]
    return [int(t) for t in tokenizer.encode(text)]


def stop_ids(tokenizer, eos_token_ids: tuple[int, ...]) -> tuple[int, ...]:
    """The config's eos ids plus the tokenizer's own end-of-turn token, if it differs."""
    extra = tokenizer.eos_token_id
    return tuple(eos_token_ids) + ((extra,) if extra is not None and extra not in eos_token_ids
                                   else ())


class StreamDecoder:
    """Turns token ids, one at a time, into the text they add. Each push decodes a short window,
    the ids not yet shown and those of the last piece shown before them, twice (with and without
    the new ones) and gives back the difference: both decodings start at the same id, so the
    spaces and multi-byte characters a tokenizer makes across ids come out right, and a long
    answer costs a token a window, not the whole answer so far. A step whose text ends in half
    a character waits for the next token."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.start = 0  # the window's first id: the first of the last piece given back
        self.read = 0   # ids before this one have been given back as text

    def _new(self) -> str:
        decode = self.tokenizer.decode
        shown = decode(self.ids[self.start:self.read], skip_special_tokens=True)
        text = decode(self.ids[self.start:], skip_special_tokens=True)
        return text[len(shown):]

    def push(self, token: int) -> str:
        self.ids.append(token)
        new = self._new()
        if not new or new.endswith("\ufffd"):
            return ""
        self.start, self.read = self.read, len(self.ids)
        return new

    def flush(self) -> str:
        """What is left at the end, bytes that never became a character included."""
        new = self._new()
        self.start = self.read = len(self.ids)
        return new
