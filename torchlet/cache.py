"""`torchlet cache list|clear`: the GGUF conversions in the user cache (torchlet/gguf_model.py).

Nothing deletes a conversion behind the user's back: installs that share the cache (two clones,
two venvs) may each need a different one. Old ones accumulate instead, and these commands show
what they cost and remove them."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from torchlet.contract import TorchletError
from torchlet.gguf_model import SOURCE_FILE, gguf_cache

TMP = ".tmp-"  # in the name of a conversion being written (gguf_model.convert) or removed


def conversions() -> list[dict]:
    """One row per finished conversion: key, name, size in bytes, date, the GGUF it came from
    (None for conversions written before torchlet recorded it)."""
    where = gguf_cache()
    if not where.is_dir():
        return []
    rows = []
    for d in sorted(where.iterdir()):
        if d.name.startswith(".") or not d.is_dir():
            continue
        try:
            source = json.loads((d / SOURCE_FILE).read_text())
        except (OSError, ValueError):
            source = {}
        source = source if isinstance(source, dict) else {}
        date = source.get("converted") or time.strftime(
            "%Y-%m-%d %H:%M:%S", time.localtime(d.stat().st_mtime))
        rows.append({"key": d.name, "name": source.get("name", "(unnamed)"), "size": _size(d),
                     "date": date, "gguf": source.get("gguf"), "path": d})
    return rows


def leftovers() -> list[Path]:
    """What a killed conversion left: temporary directories whose process is gone."""
    where = gguf_cache()
    if not where.is_dir():
        return []
    return [d for d in where.iterdir() if d.name.startswith(".") and TMP in d.name
            and not _alive(d.name.split(TMP, 1)[1].split("-", 1)[0])]


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _size(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def _mb(size: int) -> str:
    return f"{size / 1e6:,.{0 if size >= 10**7 else 1}f} MB"


def remove(d: Path) -> None:
    """Renamed out of the way first: a conversion half removed is never taken for a whole one."""
    gone = d.with_name(f".{d.name}{TMP}{os.getpid()}-removing")
    d.rename(gone)
    shutil.rmtree(gone, ignore_errors=True)


def run_list(args) -> int:
    rows = conversions()
    if not rows:
        print(f"no conversions in {gguf_cache()}")
        return 0
    width = max(len(r["key"]) for r in rows)
    named = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['key']:<{width}}  {r['name']:<{named}}  {_mb(r['size']):>8}  {r['date']}  "
              f"from {r['gguf'] or 'an unrecorded GGUF file (an older torchlet: unused now)'}")
    total = sum(r["size"] for r in rows)
    print(f"{len(rows)} conversion{'s' * (len(rows) != 1)}, {_mb(total)} in {gguf_cache()}")
    return 0


def run_clear(args) -> int:
    rows = conversions()
    if args.all == bool(args.keys):
        raise TorchletError(f"{'--all or keys, not both' if args.all else 'nothing to remove'}: "
                            f"name the conversions to remove (`torchlet cache list` shows their "
                            f"keys) or pass --all")
    if args.all:
        chosen = rows
    else:  # all found before any is removed, so a typo removes nothing
        chosen = list({r["key"]: r for r in (find(rows, k) for k in args.keys)}.values())
    for r in chosen:
        try:
            remove(r["path"])
        except OSError as e:
            raise TorchletError(f"cannot remove {r['path']}: {e.strerror or e}") from None
        print(f"removed {r['key']} ({r['name']}, {_mb(r['size'])})")
    for d in leftovers() if args.all else ():
        shutil.rmtree(d, ignore_errors=True)
    if not chosen:
        print(f"no conversions in {gguf_cache()}", file=sys.stderr)
    return 0


def find(rows: list[dict], key: str) -> dict:
    """The conversion a key names: the whole key, its hash alone, or a prefix of either that
    only one conversion has (as git and docker take ids)."""
    def names(r):
        return r["key"], r["key"].rsplit("-", 1)[-1]

    found = [r for r in rows if key in names(r)]  # whole: a key may be another's prefix
    found = found or [r for r in rows if key and any(n.startswith(key) for n in names(r))]
    if not found:
        raise TorchletError(f"no conversion with the key {key} in {gguf_cache()} (see "
                            f"`torchlet cache list`)")
    if len(found) > 1:
        raise TorchletError(f"the key {key} matches {len(found)} conversions: "
                            f"{', '.join(r['key'] for r in found)} (give more of it)")
    return found[0]


def add_commands(subparsers) -> None:
    cache = subparsers.add_parser("cache", help="list or remove the converted GGUF models")
    sub = cache.add_subparsers(dest="cache", metavar="ACTION", required=True)
    p = sub.add_parser("list", help="each conversion: key, model, size, date, its GGUF file")
    p.set_defaults(run=run_list)
    p = sub.add_parser("clear", help="remove conversions (a later run converts again)")
    p.add_argument("keys", nargs="*", metavar="KEY",
                   help="keys as `torchlet cache list` shows them, or their hashes, or a "
                        "prefix of either that names one conversion")
    p.add_argument("--all", action="store_true", help="every conversion in the cache")
    p.set_defaults(run=run_clear)
