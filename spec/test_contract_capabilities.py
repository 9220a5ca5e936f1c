"""Meta: the contract's capabilities are independent Protocols, each satisfied by every engine
that declares it.

What it introduces: one Protocol per capability, named `<Capability>API` (GenerateAPI,
RaggedBatchAPI, ..., PrefixCacheAPI, OverlapAPI), each listing only the methods its capability
adds and inheriting from Protocol alone; `API_OF` maps a capability to its API and
`lacking(engine, capabilities)` names what an engine misses of the APIs it declares.
Why the previous contract needed it: one chain of 14 Protocols, each inheriting the one before,
made a capability's promise the sum of every earlier one and pulled the implementations into one
chain of classes too; an engine assembled from parts satisfies capabilities side by side.
Core principle: a version's engine, built on the tiny fixture, is an instance of the API of every
capability in its CAPABILITIES (its `layers` of SplitGQALayers with split_gqa, its `sampler` of
Sampler with sampling); no API repeats another's member, and no class of the reference
implementations carries the name of a contract Protocol.
Files: torchlet/contract/capabilities.py (the APIs, API_OF, lacking); docs/contract.md.
Tradeoff left visible: a runtime Protocol checks that the names exist, not their signatures or
what they do: the capability's own spec pages check that.
"""
from __future__ import annotations

import ast
from typing import Protocol

import pytest

import implementations
from spec.support.models.fixtures import tiny_checkpoint
from torchlet import contract
from torchlet.contract import (ALL_CAPABILITIES, API_OF, GENERATE, KV_CACHE, PAGED_KV, PART_NAMES,
                               RAGGED_BATCH, SAMPLING, SPLIT_GQA, GenerateAPI, Layers, PagedKVAPI,
                               RequestStatesAPI, Sampler, SplitGQALayers, lacking, members)


@pytest.mark.spec(needs=GENERATE)
def test_every_engine_satisfies_the_api_of_each_capability_its_version_declares(impl):
    engine = impl.build(tiny_checkpoint("tiny_qwen2"))
    declared = [c for c in impl.capabilities if c in API_OF]
    assert declared and declared[0] == GENERATE
    for capability in declared:
        assert isinstance(engine, API_OF[capability]), \
            f"{impl.name}: no {API_OF[capability].__name__} ({capability})"
    assert lacking(engine, impl.capabilities) == {}


@pytest.mark.spec(needs=GENERATE)
def test_a_versions_recipe_names_each_part_and_a_writer_at_or_before_it(impl):
    """What `torchlet parts` and the site print: every part named, written by this version or
    an earlier one, and the parts it swaps among them."""
    names = implementations.version_names()
    rows = impl.recipe.table()
    assert [part for part, _, _ in rows] == [p for p in PART_NAMES if p in impl.recipe.parts]
    for part, label, _ in rows:
        writer = impl.writer(part)
        assert label and names.index(writer) <= names.index(impl.name), (part, label, writer)
    assert {p for p, _, _ in rows if impl.writer(p) == impl.name} == set(impl.recipe.swapped())


@pytest.mark.spec(needs=GENERATE)
def test_the_layers_and_sampler_a_version_exports_satisfy_their_protocols(impl):
    """What split_gqa and sampling promise is not on the engine: on `layers` and `draw`."""
    assert isinstance(impl.layers, Layers)
    if SPLIT_GQA in impl.capabilities:
        assert isinstance(impl.layers, SplitGQALayers)
    if SAMPLING in impl.capabilities:
        assert isinstance(impl.package.draw, Sampler)


def test_each_api_inherits_from_protocol_alone_and_no_two_share_a_member():
    seen: dict[str, str] = {}
    for capability, api in API_OF.items():
        assert capability in ALL_CAPABILITIES
        assert api.__bases__ == (Protocol,), f"{api.__name__} inherits {api.__bases__}"
        assert api.__name__.endswith("API")
        for name in members(api):
            assert name not in seen, f"{name} is in {seen.get(name)} and {api.__name__}"
            seen[name] = api.__name__
    assert {"generate", "forward_ragged", "step", "block_tables", "prefix_cache_stats"} <= set(seen)


def test_an_engine_satisfies_capabilities_side_by_side_without_the_earlier_ones():
    """A paged engine without the step-wise API is a PagedKVAPI and no RequestStatesAPI."""

    class PagedOnly:
        num_preemptions = 0

        def block_tables(self): return {}

        def paged_metadata(self): return None

        def pool_stats(self): return {}

        def kv_bytes(self, request_id): return 0

    engine = PagedOnly()
    assert isinstance(engine, PagedKVAPI)
    assert not isinstance(engine, RequestStatesAPI) and not isinstance(engine, GenerateAPI)
    assert lacking(engine, [PAGED_KV]) == {}
    assert lacking(engine, [GENERATE, PAGED_KV]) == {
        GENERATE: ["config", "generate", "stream", "logits"]}


def test_lacking_names_each_declared_capability_and_the_members_an_engine_misses():
    class Partial:
        config = None

        def generate(self, prompts, params): ...

        def stream(self, prompt, params): ...

        def logits(self, token_ids): ...

        def prefill(self, request_ids, prompts): ...

    missing = lacking(Partial(), [GENERATE, RAGGED_BATCH, KV_CACHE, "triton_basics"])
    assert missing == {RAGGED_BATCH: ["forward_ragged"],
                       KV_CACHE: ["decode", "cached_kv", "num_cached_tokens", "release",
                                  "total_cached_tokens"]}


def test_no_reference_class_shares_a_name_with_a_contract_protocol():
    protocols = {name for name, value in vars(contract).items()
                 if isinstance(value, type) and Protocol in value.__mro__ and value is not Protocol}
    assert set(API_OF.values()) <= {getattr(contract, n) for n in protocols}
    root = implementations.REFERENCE_ROOT
    shared = sorted(f"{path.relative_to(root)}: class {node.name}"
                    for path in root.rglob("*.py")
                    for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.ClassDef) and node.name in protocols)
    assert shared == []
