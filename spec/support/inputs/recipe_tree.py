"""A small tree of versions declaring recipes (PARTS), for the specs of `torchlet parts` and of
the docs site's recipe tables: v00_first writes a model and a loop; v01_second adds a KV manager
and swaps the loop, both from one file; v02_bare declares no PARTS."""
from __future__ import annotations

from pathlib import Path

FILES = {
    "__init__.py": "",
    "v00_first/__init__.py": (
        '"""v00_first: a model and a loop."""\n'
        "from torchlet.contract import GENERATE, Recipe\n\n"
        "from .loop import Loop\nfrom .model import Model\n\n"
        "CAPABILITIES = (GENERATE,)\nOPTIONS = ()\n"
        'PARTS = Recipe.first("v00", model=Model, loop=Loop)\nbuild = PARTS.build\n'),
    "v00_first/model.py": "class Model:\n    pass\n",
    "v00_first/loop.py": "class Loop:\n    pass\n",
    "v01_second/__init__.py": (
        '"""v01_second: a KV manager, and a loop that uses it."""\n'
        "from ..v00_first import CAPABILITIES, OPTIONS\n"
        "from ..v00_first import PARTS as PREVIOUS\n"
        "from .kv import KV, Loop\n\n"
        'PARTS = PREVIOUS.replace("v01", kv=KV, loop=Loop)\nbuild = PARTS.build\n'),
    "v01_second/kv.py": "class KV:\n    pass\n\n\nclass Loop:\n    pass\n",
    "v02_bare/__init__.py": (
        '"""v02_bare: a version without a recipe."""\n'
        "from ..v01_second import CAPABILITIES, OPTIONS, build\n"),
}

# (part, what it is, written by, file, swapped by the version itself), per version
ROWS = {
    "v00_first": [("model", "Model", "v00_first", "v00_first/model.py", True),
                  ("loop", "Loop", "v00_first", "v00_first/loop.py", True)],
    "v01_second": [("model", "Model", "v00_first", "v00_first/model.py", False),
                   ("kv", "KV", "v01_second", "v01_second/kv.py", True),
                   ("loop", "Loop", "v01_second", "v01_second/kv.py", True)],
}


def write_recipe_tree(root: Path) -> Path:
    for rel, text in FILES.items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Path(root)
