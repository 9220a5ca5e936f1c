"""Plain SVG pictures of a recorded Run (torchlet/docs/record.py): boxes and text, no plotting
library. Every box that stands for something of the run carries it in data- attributes
(data-step, data-request, data-kind, data-lane, data-block, data-index), so a spec can read a
picture back and compare it with the engine (spec/test_docs_pictures.py).

Views, each a function of the Run: timeline (step x request, coloured by what the request did),
lanes (lane x step, the request in each lane), buffers (the decode step's static inputs, lane x
step), pool (the block pool and each request's block table at chosen steps, in colours of its
own, named in its legend; for a prefix-cache version, how many tables hold a block), tokens (the tokens each request took, step by step) and
kernels (the ops one step dispatched, layer by layer, beside another version's).
The output depends on the run alone, so two builds draw the same bytes."""
from __future__ import annotations

from html import escape

from torchlet.docs.record import (DECODE, GEMM, IDLE, KERNEL, MATHS, MEMORY, PREEMPTED, PREFILL,
                                  SLICE, WAITING, Cell, Run)

W, H, LEFT, TOP = 46, 24, 118, 30  # a step's column, a row, the label column, the header
FILL = {PREFILL: "#4c78a8", SLICE: "url(#slice)", DECODE: "#59a14f", WAITING: "#e6e6e6",
        PREEMPTED: "#e15759", IDLE: "#ffffff"}
INK = {PREFILL: "#fff", SLICE: "#123", DECODE: "#fff", WAITING: "#555", PREEMPTED: "#fff",
       IDLE: "#555"}
LEGEND = {PREFILL: "prefill (its prompt's rows)", SLICE: "prefill slice (part of its prompt)",
          DECODE: "decode (one row)", WAITING: "waiting", PREEMPTED: "preempted (blocks freed)",
          IDLE: "running, not scheduled"}
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b",
           "#9d755d")
# The pool's requests: none of the timeline's blue, green, red or grey (FILL), which the
# pool sits beside on v08's and v12's pages with other meanings, nor the graphs' yellows.
HOLDER = ("#8e6bbf", "#f58518", "#2a9d8f", "#9d755d", "#d45087", "#6b8e23", "#3d3d8f",
          "#c97b2a")
STATE = {"null": "#444", "free": "#fafafa", "kept": "#fff3c4", "tail": "url(#tail)"}
STATE_LEGEND = {"null": "null block", "free": "free", "kept": "kept for reuse",
                "tail": "empty rows of a last block (wasted tail)"}
DEFS = ('<defs><pattern id="slice" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#9ecae9"/>'
        '<rect width="2" height="6" fill="#4c78a8"/></pattern>'
        '<pattern id="tail" width="5" height="5" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="5" height="5" fill="#fff"/>'
        '<rect width="1.5" height="5" fill="#bbb"/></pattern></defs>')


def svg(width: int, height: int, body: list[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="picture" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{escape(label)}" font-family="ui-monospace,monospace" font-size="11">'
            f'{DEFS}<rect width="{width}" height="{height}" fill="#fff"/>{"".join(body)}</svg>')


def text(x: float, y: float, s: object, anchor: str = "middle", fill: str = "#222",
         extra: str = "") -> str:
    return (f'<text x="{x:g}" y="{y:g}" text-anchor="{anchor}" fill="{fill}"{extra}>'
            f'{escape(str(s))}</text>')


def box(x: float, y: float, w: float, h: float, fill: str, attrs: dict, tip: str = "") -> str:
    data = "".join(f' data-{k}="{escape(str(v))}"' for k, v in attrs.items())
    title = f"<title>{escape(tip)}</title>" if tip else ""
    return (f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" fill="{fill}" '
            f'stroke="#fff"{data}>{title}</rect>')


def columns(run: Run) -> list[tuple[float, object]]:
    """(x, step) of each recorded step, left to right."""
    return [(LEFT + i * W, step) for i, step in enumerate(run.steps)]


def header(run: Run, y: float = 18) -> list[str]:
    out = [text(LEFT - 8, y, "step", "end", "#777")]
    out += [text(x + W / 2, y, step.number, fill="#777") for x, step in columns(run)]
    return out


def swatches(items: list[tuple[str, str, str]], y: float, x: float = 8) -> list[str]:
    """A legend's row: for each (key, fill, label) a square of the fill (data-legend: the key,
    so a spec can match a colour to what it means) and the label."""
    out = []
    for key, fill, label in items:
        out.append(f'<rect x="{x:g}" y="{y - 9:g}" width="12" height="12" fill="{fill}" '
                   f'stroke="#999" stroke-width=".5" data-legend="{escape(key)}"/>')
        out.append(text(x + 16, y + 1, label, "start", "#444"))
        x += 30 + 6.6 * len(label)
    return out


def swatches_end(items: list[tuple[str, str, str]], x: float = 8) -> float:
    """Where a row of swatches ends: the picture is drawn at least this wide."""
    return x + sum(30 + 6.6 * len(label) for _, _, label in items)


def legend(kinds: list[str], y: float) -> list[str]:
    return swatches([(kind, FILL[kind], LEGEND[kind]) for kind in kinds], y)


def ahead(run: Run, r: int, cell: Cell, taken: int) -> int:
    """Rows the request's cache holds beyond its tokens but the last (v14's decode ahead)."""
    if cell.finished or cell.kind not in (PREFILL, DECODE, SLICE):
        return 0
    return max(0, cell.cached - (len(run.prompts[r]) + taken - 1))


def timeline(run: Run) -> str:
    """Step x request: what each request did in each step, with the rows its cache grew by."""
    body, y = header(run), TOP
    graphs = any(step.graphs for step in run.steps)
    if graphs:
        body.append(text(LEFT - 8, y + 15, "decode graph", "end"))
        for x, step in columns(run):
            for bucket, event in sorted(step.graphs.items()):
                fill = "#f2cf5b" if event == "capture" else "#fbeebe"
                body.append(box(x + 1, y + 1, W - 2, H - 2, fill,
                                {"step": step.number, "graph": event, "bucket": bucket},
                                f"step {step.number}: {event} of the {bucket}-lane graph"))
                body.append(text(x + W / 2, y + 15, f"{event[:3]} {bucket}"))
        y += H + 6
    kinds = set()
    for r in run.requests:
        body.append(text(LEFT - 8, y + 15, f"r{r} ({len(run.prompts[r])} tok)", "end"))
        taken = 0
        for x, step in columns(run):
            cell = step.cells.get(r)
            if cell is None:
                if run.aborted.get(r) == step.number - 1:
                    body.append(text(x + W / 2, y + 15, "abort", fill="#b00020"))
                continue
            taken += len(cell.tokens)
            kinds.add(cell.kind)
            label = "" if cell.rows is None or cell.kind in (WAITING, PREEMPTED, IDLE) else cell.rows
            if cell.hit:
                label = f"{cell.rows - cell.hit}+{cell.hit}"
            more = ahead(run, r, cell, taken)
            tip = (f"step {step.number}: r{r} {cell.kind}"
                   + (f", {cell.rows} rows" if cell.rows is not None else "")
                   + (f", {cell.hit} found cached" if cell.hit else "")
                   + (f", {more} row ahead" if more else "")
                   + (f", finished ({cell.finished})" if cell.finished else ""))
            body.append(box(x + 1, y + 1, W - 2, H - 2, FILL[cell.kind],
                            {"step": step.number, "request": r, "kind": cell.kind,
                             "rows": "" if cell.rows is None else cell.rows}, tip))
            body.append(text(x + W / 2, y + 16, f"{label}{' +1' if more else ''}",
                             fill=INK[cell.kind]))
            if cell.finished:
                body.append(f'<path d="M{x + W - 2:g} {y + 2}v{H - 4}" stroke="#222" '
                            'stroke-width="3"/>')
        y += H
    order = [k for k in FILL if k in kinds]
    body += legend(order, y + 20)
    note = ("numbers: rows its cache grew by (computed+found cached); bar: finished"
            + ("; +1: a row computed ahead" if any("+1" in b for b in body) else ""))
    body.append(text(8, y + 40, note, "start", "#666"))
    width = max(LEFT + W * len(run.steps) + 10, 640)
    return svg(width, y + 50, body, f"{run.version}: step by request timeline")


def lane_at(run: Run) -> dict[tuple[int, int], int]:
    """(step, request) -> the lane it ran in: lane_of after the step, or, in the step it
    finished (when lane_of is None again), the lane it had before."""
    found, last = {}, {}
    for step in run.steps:
        for r, cell in step.cells.items():
            lane = cell.lane if cell.lane is not None else (
                last.get(r) if cell.finished and cell.kind == DECODE else None)
            if lane is not None:
                found[(step.number, r)] = last[r] = lane
    return found


def lanes(run: Run) -> str:
    """Lane x step: which request each lane ran; an empty lane still runs in the decode pass."""
    body, y = header(run), TOP
    at = lane_at(run)
    for lane in range(run.num_lanes):
        body.append(text(LEFT - 8, y + 15, f"lane {lane}", "end"))
        for x, step in columns(run):
            held = [r for (s, r), n in at.items() if s == step.number and n == lane]
            if not held:
                body.append(box(x + 1, y + 1, W - 2, H - 2, "#f4f4f4",
                                {"step": step.number, "lane": lane, "request": ""}, "idle lane"))
                continue
            r = held[0]
            body.append(box(x + 1, y + 1, W - 2, H - 2, PALETTE[r % len(PALETTE)],
                            {"step": step.number, "lane": lane, "request": r},
                            f"step {step.number}: lane {lane} runs r{r} "
                            f"({step.cells[r].kind})"))
            body.append(text(x + W / 2, y + 16, f"r{r}", fill="#fff"))
        y += H
    body.append(text(8, y + 20, "a request keeps its lane from its prefill to the step it "
                     "finishes;", "start", "#666"))
    body.append(text(8, y + 36, "grey: an idle lane, still run by the decode pass", "start",
                     "#666"))
    return svg(max(LEFT + W * len(run.steps) + 10, 640), y + 46, body,
               f"{run.version}: lanes by step")


def buffers(run: Run) -> str:
    """The decode step's static inputs after each step: token id over position, per lane."""
    body, y = header(run), TOP
    at = lane_at(run)
    for lane in range(run.num_lanes):
        body.append(text(LEFT - 8, y + 15, f"lane {lane}", "end"))
        for x, step in columns(run):
            ids, pos = step.buffers.get("token_ids", ()), step.buffers.get("positions", ())
            if lane >= len(ids):
                continue
            owner = [r for (s, r), n in at.items() if s == step.number and n == lane]
            fill = PALETTE[owner[0] % len(PALETTE)] if owner else "#f4f4f4"
            body.append(box(x + 1, y + 1, W - 2, 2 * H - 2, fill,
                            {"step": step.number, "lane": lane, "token": ids[lane],
                             "position": pos[lane]},
                            f"after step {step.number}: token_ids[{lane}]={ids[lane]}, "
                            f"positions[{lane}]={pos[lane]}"))
            ink = "#fff" if owner else "#888"
            body.append(text(x + W / 2, y + 15, ids[lane], fill=ink))
            body.append(text(x + W / 2, y + 33, f"@{pos[lane]}", fill=ink))
        y += 2 * H
    same = all(step.same_buffers for step in run.steps)
    body.append(text(8, y + 20, "token id over @position, as the decode pass read them; "
                     + ("the same tensors at every step" if same else
                        "NOT the same tensors at every step"), "start", "#666"))
    return svg(max(LEFT + W * len(run.steps) + 10, 640), y + 32, body,
               f"{run.version}: static decode buffers")


def tokens(run: Run) -> str:
    """The token each request took in each step."""
    body, y = header(run), TOP
    for r in run.requests:
        body.append(text(LEFT - 8, y + 15, f"r{r}", "end"))
        for x, step in columns(run):
            cell = step.cells.get(r)
            if cell is None or not cell.tokens:
                continue
            body.append(box(x + 1, y + 1, W - 2, H - 2, PALETTE[r % len(PALETTE)],
                            {"step": step.number, "request": r,
                             "tokens": " ".join(map(str, cell.tokens))},
                            f"step {step.number}: r{r} took {list(cell.tokens)}"))
            body.append(text(x + W / 2, y + 16, " ".join(map(str, cell.tokens)), fill="#fff"))
        y += H
    return svg(max(LEFT + W * len(run.steps) + 10, 640), y + 10, body,
               f"{run.version}: tokens taken by step")


def holders(run: Run, number: int) -> dict[int, list[int]]:
    """block -> the requests whose tables hold it after step `number`."""
    held: dict[int, list[int]] = {}
    for r, cell in sorted(run.step(number).cells.items()):
        for b in cell.table:
            held.setdefault(b, []).append(r)
    return held


def kept(run: Run, number: int) -> set[int]:
    """Blocks no table holds after step `number` that a finished request's table held full: a
    prefix cache keeps them (until a new block is needed) for the next prompt that starts so."""
    full: dict[int, bool] = {}
    for step in run.steps:
        if step.number > number:
            break
        for r, cell in step.cells.items():
            for i, b in enumerate(cell.table):
                full[b] = cell.cached >= (i + 1) * run.block_size
    return {b for b, was_full in full.items() if was_full} - set(holders(run, number))


def pool(run: Run, numbers: tuple[int, ...], prefix_cache: bool = False) -> str:
    """The block pool after each chosen step: block 0 (null), each block's token rows filled
    by its holder (the empty rows of a last block are the wasted tail), free or kept blocks;
    under it each request's block table, entry by entry."""
    size = run.block_size
    numbers = tuple(n for n in numbers if any(s.number == n for s in run.steps)) or \
        (run.steps[-1].number,)
    num_blocks = max(s.pool.get("num_blocks", 0) for s in run.steps)
    bw, gap = 34, 6
    body, y = [], 8
    for number in numbers:
        step = run.step(number)
        held, keep = holders(run, number), (kept(run, number) if prefix_cache else set())
        info = (f"after step {number}: {step.pool.get('num_free', '?')} free"
                + (f", {step.preemptions} preemption(s) so far" if step.preemptions else ""))
        body.append(text(8, y + 12, info, "start", "#333", ' font-weight="600"'))
        y += 20
        for b in range(num_blocks):
            x = 8 + b * (bw + gap)
            owners = held.get(b, [])
            if b == 0:
                body.append(box(x, y, bw, bw, STATE["null"], {"step": number, "block": 0,
                                                     "state": "null"}, "block 0: the null block"))
                body.append(text(x + bw / 2, y + bw / 2 + 4, "null", fill="#fff"))
            elif not owners:
                state = "kept" if b in keep else "free"
                body.append(box(x, y, bw, bw, STATE[state],
                                {"step": number, "block": b, "state": state},
                                f"block {b}: {state}"))
                body.append(f'<rect x="{x}" y="{y}" width="{bw}" height="{bw}" fill="none" '
                            'stroke="#bbb"/>')
            else:
                r = owners[0]
                cell = step.cells[r]
                i = cell.table.index(b)
                filled = min(size, max(0, cell.cached - i * size))
                color = HOLDER[r % len(HOLDER)]
                row = bw / size
                for t in range(size):
                    fill = color if t < filled else STATE["tail"]
                    body.append(f'<rect x="{x}" y="{y + t * row:g}" width="{bw}" '
                                f'height="{row:g}" fill="{fill}"/>')
                body.append(box(x, y, bw, bw, "none",
                                {"step": number, "block": b, "state": "used",
                                 "holders": " ".join(map(str, owners)), "filled": filled},
                                f"block {b}: held by {', '.join(f'r{o}' for o in owners)}; "
                                f"{filled} of {size} rows filled"))
                body.append(f'<rect x="{x}" y="{y}" width="{bw}" height="{bw}" fill="none" '
                            'stroke="#333"/>')
                if len(owners) > 1:
                    body.append(text(x + bw / 2, y + bw / 2 + 4, f"×{len(owners)}", fill="#fff",
                                     extra=' font-weight="700"'))
            body.append(text(x + bw / 2, y + bw + 12, b, fill="#777"))
        y += bw + 22
        for r, cell in sorted(step.cells.items()):
            if not cell.table:
                continue
            body.append(text(8, y + 13, f"r{r} table", "start"))
            for i, b in enumerate(cell.table):
                x = 90 + i * 30
                body.append(box(x, y, 28, 18, HOLDER[r % len(HOLDER)],
                                {"step": number, "request": r, "index": i, "block": b},
                                f"r{r}'s table[{i}] = block {b}"))
                body.append(text(x + 14, y + 13, b, fill="#fff"))
            y += 21
        y += 14
    shown = sorted({r for n in numbers for r, cell in run.step(n).cells.items() if cell.table})
    held = [(f"r{r}", HOLDER[r % len(HOLDER)], f"r{r}") for r in shown]
    states = [(s, STATE[s], STATE_LEGEND[s]) for s in STATE if prefix_cache or s != "kept"]
    body += swatches(held, y + 4) + swatches(states, y + 22)
    y += 40
    if prefix_cache:
        body.append(text(8, y + 4, "×n: held by n tables (a shared prefix)", "start", "#666"))
        y += 16
    width = max(16 + num_blocks * (bw + gap), 640, int(swatches_end(states)) + 10)
    return svg(width, y, body, f"{run.version}: block pool by step")


KIND_FILL = {GEMM: "#4c78a8", KERNEL: "#f58518", MATHS: "#54a24b", MEMORY: "#bab0ac"}
KIND_LEGEND = {GEMM: "GEMM (matrix multiply)", KERNEL: "Triton kernel",
               MATHS: "other torch maths (elementwise, reductions)",
               MEMORY: "copies, indexing, fills"}


def kernels(runs: list[Run]) -> str:
    """Each run's watched step, op by op, a row per segment (before the layers, each layer,
    after them), one box per op coloured by what it does: the ops a step launches."""
    bw, bh, left = 12, 20, 170
    body, y, widest, kinds = [], 8, 0, set()
    for run in runs:
        step = next((s for s in run.steps if s.ops), None)
        if step is None:
            continue
        ops = step.ops
        triton = sum(op.kind == KERNEL for op in ops)
        body.append(text(8, y + 12, f"{run.version}, step {step.number}: {len(ops)} ops, "
                     f"{triton} of them Triton kernels", "start", "#333", ' font-weight="600"'))
        y += 20
        rows: dict[str, list[tuple[int, object]]] = {}
        for i, op in enumerate(ops):
            rows.setdefault(op.segment, []).append((i, op))
        for segment, row in rows.items():
            body.append(text(left - 8, y + 14, f"{segment} ({len(row)})", "end"))
            for k, (i, op) in enumerate(row):
                kinds.add(op.kind)
                reads = f"; reads {', '.join(op.reads)}" if op.reads else ""
                body.append(box(left + k * bw, y, bw - 1, bh, KIND_FILL[op.kind],
                                {"version": run.version, "step": step.number, "segment": segment,
                                 "index": i, "op": op.name, "kind": op.kind,
                                 "kernel": op.kernel},
                                f"{segment}: {op.name} ({KIND_LEGEND[op.kind]}){reads}"))
            count = {kind: sum(op.kind == kind for _, op in row) for kind in (GEMM, KERNEL)}
            body.append(text(left + len(row) * bw + 8, y + 14,
                             f"{count[GEMM]} GEMM, {count[KERNEL]} Triton", "start", "#777"))
            widest = max(widest, len(row))
            y += bh + 4
        y += 10
    items = [(kind, KIND_FILL[kind], KIND_LEGEND[kind]) for kind in KIND_FILL if kind in kinds]
    body += swatches(items, y + 9)
    x = swatches_end(items)
    note = ("one box per op the step dispatched below torch, in order (a kernel launch each "
            "on a GPU); views, which launch nothing, left out")
    body.append(text(8, y + 30, note, "start", "#666"))
    return svg(max(left + widest * bw + 130, int(x) + 10, int(16 + 6.7 * len(note))), y + 40, body,
               f"{runs[-1].version}: the ops of one decode step, by layer")


RANK_FILL = ("#4c78a8", "#f58518", "#54a24b", "#b279a2")
SHARD_PARTS = (("heads", "query heads", 22), ("kv_heads", "KV heads", 22),
               ("intermediate", "MLP rows", 0), ("vocab", "vocabulary rows", 0))


def shards(run: Run) -> str:
    """Per rank, a strip per split of the model: the whole of it in grey, the rank's own range
    in its colour (one box a head; the MLP's and the vocabulary's rows as one bar, to scale),
    then the bytes it holds."""
    left, width, bh = 200, 360, 18
    body, y = [], 8
    sizes = {part: max(r[part][1] for r in run.shards) for part, _, _ in SHARD_PARTS}
    for rank, held in enumerate(run.shards):
        fill = RANK_FILL[rank % len(RANK_FILL)]
        body.append(text(8, y + 12, f"rank {rank}: weights {held['weights'] / 1024:,.0f} KiB, "
                     f"K/V {held['kv'] / 1024:,.0f} KiB", "start", "#333",
                     ' font-weight="600"'))
        y += 20
        for part, label, each in SHARD_PARTS:
            start, stop = held[part]
            body.append(text(left - 8, y + 13, f"{label} {start}..{stop - 1}", "end"))
            if each:  # one box a head
                for i in range(sizes[part]):
                    mine = start <= i < stop
                    body.append(box(left + i * each, y, each - 2, bh, fill if mine else "#ddd",
                                    {"rank": rank, "part": part, "index": i, "held": int(mine)},
                                    f"rank {rank}: {label[:-1]} {i}"
                                    f"{'' if mine else ' (another rank)'}"))
            else:
                scale = width / sizes[part]
                body.append(box(left, y, width, bh, "#ddd", {"rank": rank, "part": part}))
                body.append(box(left + start * scale, y, (stop - start) * scale, bh, fill,
                                {"rank": rank, "part": part, "start": start, "stop": stop,
                                 "held": 1}, f"rank {rank}: {label} {start} to {stop - 1}"))
            y += bh + 4
        y += 10
    note = "grey: held by another rank (a replicated KV head is coloured on every rank sharing it)"
    body.append(text(8, y + 8, note, "start", "#666"))
    return svg(max(left + width + 20, int(16 + 6.7 * len(note))), y + 20, body,
               f"{run.version}: what each rank holds")


VIEWS = ("timeline", "lanes", "buffers", "pool", "tokens", "kernels", "shards")


def draw(run: Run, view: str, pool_steps: tuple[int, ...] = (),
         prefix_cache: bool = False, beside: Run | None = None) -> str:
    """beside: the run the kernels view sets before this one (the version it is drawn
    against)."""
    if view == "timeline":
        return timeline(run)
    if view == "lanes":
        return lanes(run)
    if view == "buffers":
        return buffers(run)
    if view == "pool":
        return pool(run, pool_steps, prefix_cache)
    if view == "tokens":
        return tokens(run)
    if view == "kernels":
        return kernels([beside, run] if beside is not None else [run])
    if view == "shards":
        return shards(run)
    raise ValueError(f"no view {view!r}; views: {', '.join(VIEWS)}")
