"""Part seams, version layout and spec collection (issue 44).

Part seams: parts meet only at their Protocols (torchlet/contract/parts.py), a part's method is
its class's, and the pool is the one owner of a request's block table. Version layout: a version
imports only from its predecessor, writes a part it swaps in the file named after the part, and
names no later version. Spec collection: one marker and one rule decide which spec runs against
which version (spec/support/collection/rule.py).

The seam and layout specs read the reference tree itself (spec/test_part_protocols.py,
spec/test_layout.py), so their mutants are reference mutants: the edited copy is imported as
`implementations` for the run. Their specs read files or build a version before v09: a copy that
imported v09's kernels would register torch ops under the reference's names a second time in
the worker (torchlet/contract/recipe.py: kernel_op), so no reference mutant runs the spec that
discovers every version (a part defined in the file named after it). The collection mutants edit the rule (spec/support/), and the
specs that kill them check the collection that runs them (spec/test_why.py). Each mutant but the
block table's keeps every token, so only the property's own spec notices."""
from spec.mutants import Edit, Mutant

POLICY, KV = "v08_paged_gqa_py/policy.py", "v08_paged_gqa_py/kv.py"
INPUTS = "v08_paged_gqa_py/inputs.py"
PROTOCOLS, LAYOUT = "spec/test_part_protocols.py", "spec/test_layout.py"
RULE = "spec/support/collection/rule.py"
WHY = "spec/test_why.py"
ENGINE = "spec/test_v08_paged_engine.py"

MUTANTS = [
    # --- part seams --------------------------------------------------------------------------
    Mutant("v08-policy-reaches-through-the-kv-to-its-pool", "part seams", (
        Edit(POLICY, "        free = self.kv.free_after_decode(running)\n",
             "        free = self.kv.pool.num_free - self.kv.blocks_for_decode(running)\n"),),
        (f"{PROTOCOLS}::test_no_part_reaches_a_member_its_protocol_leaves_out",), (),
        "the policy counts free blocks on the kv's pool instead of asking the kv (the same "
        "number: only the seam is broken)", reference=True),
    Mutant("v08-kv-renames-a-protocol-member", "part seams", (
        Edit(KV, "    def can_preempt(self) -> bool:", "    def may_preempt(self) -> bool:"),
        Edit(POLICY, "        if self.kv.can_preempt() and",
             "        if self.kv.may_preempt() and")),
        (f"{PROTOCOLS}::test_every_assembled_part_has_its_protocols_members[v08_paged_gqa_py]",),
        (), "v08's kv answers can_preempt under another name, its caller renamed with it",
        reference=True),
    Mutant("v08-request-keeps-a-copy-of-its-block-table", "part seams", (
        Edit(KV, "            self.pool.allocate(request.id, len(request.sequence))\n",
             "            # the request keeps its table too, extended as it takes blocks\n"
             "            request.blocks = getattr(request, 'blocks', []) + self.pool.allocate(\n"
             "                request.id, len(request.sequence))\n"),
        Edit(KV, "            self.pool.append_token(r.id)\n",
             "            self.pool.append_token(r.id)\n"
             "            if len(self.pool.table_view(r.id)) > len(r.blocks):\n"
             "                r.blocks.append(self.pool.table_view(r.id)[-1])\n"),
        Edit(INPUTS, "        tables = [kv.block_table(r.id) for r in requests]\n",
             "        tables = [r.blocks for r in requests]\n")),
        (f"{ENGINE}::test_a_scripted_exhaustion_preempts_and_every_request_still_gets_its_solo_"
         "tokens",), ("v08",),
        "a second owner of the block table: the request's copy, set and grown in step with the "
        "pool but not cleared when a preemption frees its blocks, is what decode reads"),
    # --- version layout ----------------------------------------------------------------------
    Mutant("v08-comment-names-a-later-version", "version layout", (
        Edit(POLICY, "whose recompute after a preemption (scheduler.py) could never be admitted.",
             "whose recompute after a preemption (scheduler.py; v15 slices it) could never be "
             "admitted."),),
        (f"{LAYOUT}::test_no_version_names_a_later_version",), (),
        "v08's policy docstring names v15", reference=True),
    Mutant("v15-imports-from-an-older-version", "version layout", (
        Edit("v15_chunked_prefill/request.py", "from ..v14_overlap import LaneRequest",
             "from ..v05_decode_lanes import LaneRequest"),),
        (f"{LAYOUT}::test_a_version_imports_only_its_predecessors_package_never_a_submodule_or_"
         "an_older_version",), (),
        "v15's request imports v05's class from v05, past its predecessor (the same class)",
        reference=True),
    Mutant("v08-policy-rebinds-a-method-of-its-inner-rule", "version layout", (
        Edit(POLICY, "        self.inner, self.kv = inner, kv\n",
             "        self.inner, self.kv = inner, kv\n"
             "        inner.check = lambda request: ContinuousBatching.check(inner, request)\n"),),
        (f"{LAYOUT}::test_no_version_answers_through_getattr_or_rebinds_a_method_from_outside",),
        (), "the policy sets a function on v04's rule object from outside (the same check)",
        reference=True),
    Mutant("v08-policy-answers-through-getattr", "version layout", (
        Edit(POLICY, "    OPTIONS = ContinuousBatching.OPTIONS\n",
             "    OPTIONS = ContinuousBatching.OPTIONS\n\n"
             "    def __getattr__(self, name):  # the inner rule's other members\n"
             "        return getattr(self.inner, name)\n"),),
        (f"{LAYOUT}::test_no_version_answers_through_getattr_or_rebinds_a_method_from_outside",),
        (), "v08's policy answers the names it lacks through __getattr__, from v04's rule",
        reference=True),
    # --- spec collection ---------------------------------------------------------------------
    Mutant("rule-ignores-until", "spec collection", (
        Edit(RULE, "    if spec.until is not None and spec.until in version.capabilities:\n"
                   "        return f\"until {spec.until}: {version.name} declares it, and its "
                   "idea changes the property\"\n", ""),),
        (f"{WHY}::test_a_spec_runs_only_against_the_versions_that_declare_its_needs_and_not_"
         "its_until",), (),
        "spec(until=) is read and ignored: a spec runs against the versions whose later idea "
        "changes its property"),
    Mutant("rule-ignores-needs", "spec collection", (
        Edit(RULE, "    if spec.needs not in version.capabilities:\n",
             "    if spec.needs not in version.capabilities + (spec.needs,):\n"),),
        (f"{WHY}::test_a_spec_runs_only_against_the_versions_that_declare_its_needs_and_not_"
         "its_until",), (),
        "spec(needs=) admits every version: a spec runs against versions without its "
        "capability"),
    Mutant("rule-runs-a-parts-spec-against-every-recipe", "spec collection", (
        Edit(RULE, "    if spec.part and not parts.writes(impl, spec.part):\n",
             "    if spec.part and impl.recipe is None:\n"),),
        (f"{WHY}::test_a_parts_own_spec_runs_only_against_the_versions_that_write_the_part",),
        (), "spec(part=) leaves nothing out: a part's own spec runs again against every version "
            "that took the part unchanged"),
]
