"""One decoder layer of a decode step, traced from outside: how often the file a reader must open
changes while the layer runs: the files of the functions it enters, in order, a change each time
one is entered in another file than the last (returning to a caller opens nothing new).

The step is step_trace's (tiny Qwen2 fixture, CPU, graphs off, layers on their PyTorch path). The
layer is the last one of the model (the tiny fixture's second: one a layer runs before, as in a
real model's middle). Its span runs from the first call handed its dict of tensors to the return
of the last call handed one of its weights as an argument (the dict, or a tensor of it): its
attention, its MLP and the norms after them, whatever functions hold them. The norm before it is
the layer before's last step (each residual add is fused into the norm after it, and a fused MLP
norms its output with the next layer's input norm), so a call handed only that norm's weight
opens no span. Only files of the tree of versions count: torch's own Python is not the reader's
to open.
`python -m spec.support.watchers.layer_trace v16 v15` prints the count and the files in the order read.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from .step_trace import layers_on_pytorch, steady_engine


@dataclass
class LayerTrace:
    files: list[str]  # the tree file of each function entered, in order, repeats run together

    @property
    def changes(self) -> int:
        return len(self.files) - 1


def trace_layer(name: str) -> LayerTrace:
    """The files one decoder layer of the version's decode step runs through, in order."""
    with layers_on_pytorch():
        engine, root = steady_engine(name)
        events = []  # (file of the function entered or None, whether it was handed the layer,
        #              whether its dict)
        mine: set[int] = set()  # ids of the layer's dict and tensors, filled at its first sight
        whole: list[int] = []  # the id of the layer's dict

        def handed(frame, ids) -> bool:
            code, values = frame.f_code, frame.f_locals
            arguments = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            return any(id(values.get(a)) in ids for a in arguments)

        def handed_layer(frame) -> bool:
            if not mine:  # the first call handed the model's weights (their `layers`) names them
                layers = [getattr(v, "layers", None) for v in frame.f_locals.values()]
                layers = [v for v in layers if isinstance(v, list) and len(v) > 1
                          and all(isinstance(w, dict) for w in v)]
                if layers:
                    last = layers[0][-1]
                    mine.update({id(last)} | {id(t) for t in last.values()})
                    whole.append(id(last))
            return handed(frame, mine)

        running: set[int] = set()  # frames running now that were handed the layer's weights

        def profile(frame, event, arg):
            if event == "call":
                if handed_layer(frame):
                    running.add(id(frame))
                path = frame.f_code.co_filename
                events.append((path[len(root):] if path.startswith(root) else None,
                               id(frame) in running, bool(whole) and handed(frame, whole)))
            elif event == "return":
                # Back in the caller: the reader is where they were, no new file; the event only
                # marks the end of a call handed the layer.
                events.append((None, id(frame) in running, False))
                running.discard(id(frame))

        sys.setprofile(profile)
        try:
            engine.step()
        finally:
            sys.setprofile(None)
    touching = [i for i, (_, touched, _) in enumerate(events) if touched]
    opening = [i for i, (_, _, its_dict) in enumerate(events) if its_dict]
    assert opening, f"{name}: no call was handed the last layer's weights"
    files: list[str] = []
    for path, _, _ in events[opening[0]:touching[-1] + 1]:
        if path is not None and (not files or files[-1] != path):
            files.append(path)
    return LayerTrace(files)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["v16"]:
        trace = trace_layer(name)
        print(f"{name}: one layer changes file {trace.changes} times")
        for path in trace.files:
            print(f"   {path}")
