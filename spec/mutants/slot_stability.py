"""Slot stability: from v05 a request keeps one decode lane, and its K/V one place, for its whole
life. The lane mutants keep every token right and slot_of() reporting the slot the v05 rule
gives (lowest free, never moving), while the lanes the decode pass runs differ, so only the
specs that watch the passes (spec/support/lanes.py) notice. The last one moves the K/V blocks
of a paged request while its lane stays put."""
from spec.mutants import Edit, Mutant

CACHE = "v05_decode_slots/cache.py"
ENGINE = "v05_decode_slots/engine.py"
PAGED_CACHE = "v08_paged_gqa_py/cache.py"
SLOTS = "spec/test_v05_decode_slots.py"
OBSERVED = f"{SLOTS}::test_the_lane_slot_of_names_feeds_its_requests_token_and_its_kv_rows_stay_put"
SCHEDULES = (f"{SLOTS}::test_for_any_arrival_schedule_a_request_keeps_one_unshared_slot_"
             f"newcomers_taking_the_lowest")
SPECS = (OBSERVED, SCHEDULES)
PROPERTY = "slot stability"

ASSIGN = ("        self._slot[request_id], self._length[request_id] = free[0], 0\n"
          "        return free[0]")
FREE = ("        self._slot.pop(request_id, None)\n"
        "        self._length.pop(request_id, None)")
REPORT = "        return self.runner.cache.slot_of(request_id)"


def reported_apart(lane: str, on_free: str = ""):
    """Edits that keep two books: the lane the runner really uses (`lane`, an expression over
    `free`, the free lanes lowest first), and the slot the engine reports, handed out by v05's
    rule. `on_free` runs after a request's lane is freed, with `lane` bound to that lane."""
    return (
        Edit(ENGINE, REPORT,
             "        return self.runner.cache.shown_slot(request_id)"),
        Edit(CACHE, ASSIGN,
             "        shown = set(self._shown.values())\n"
             "        self._shown[request_id] = min(set(range(self.num_slots)) - shown)\n"
             f"        self._slot[request_id], self._length[request_id] = {lane}, 0\n"
             "        return self._slot[request_id]\n\n"
             "    def shown_slot(self, request_id):\n"
             "        return self._shown.get(request_id)"),
        Edit(CACHE, FREE,
             "        self._shown.pop(request_id, None)\n"
             "        self._length.pop(request_id, None)\n"
             "        lane = self._slot.pop(request_id, None)\n"
             "        if lane is None:\n"
             "            return\n" + on_free),
        Edit(CACHE, "        self._length: dict[Hashable, int] = {}",
             "        self._length: dict[Hashable, int] = {}\n"
             "        self._shown: dict[Hashable, int] = {}\n"
             "        self._queue = list(range(num_slots))"),
    )


# Live requests slide down into the lowest lanes, their rows copied along: tokens stay right.
COMPACT = ("        for to, r in enumerate(sorted(self._slot, key=self._slot.get)):\n"
           "            if self._slot[r] != to:\n"
           "                for k, v in self.kv:\n"
           "                    k[to].copy_(k[self._slot[r]])\n"
           "                    v[to].copy_(v[self._slot[r]])\n"
           "                self._slot[r] = to\n")

MUTANTS = [
    Mutant("v05-compacted-lanes", PROPERTY, reported_apart("free[0]", COMPACT), SPECS, ("v05",),
           "a request leaving moves the live ones into lower lanes (rows copied); slot_of "
           "reports the old slots"),
    Mutant("v07-compacted-lanes", PROPERTY, (
               # v07's own edit first (the engine and cache edits are v05's): the bucket covers
               # the reported slots, so the pass still has as many lanes
               Edit("v07_cuda_graph/runner.py", "        return self.cache.slots_in_use()",
                    "        return list(self.cache._shown.values())"),)
           + reported_apart("free[0]", COMPACT),
           SPECS, ("v07",),
           "v05's compaction under graph replay: the replayed pass runs the compacted lanes"),
    Mutant("v05-newcomer-takes-the-highest-lane", PROPERTY, reported_apart("free[-1]"), SPECS,
           ("v05",), "a newcomer runs in the highest free lane; slot_of reports the lowest"),
    Mutant("v05-freed-lane-reused-last", PROPERTY,
           reported_apart("[s for s in self._queue if s in free][0]",
                          "        self._queue.remove(lane)\n"
                          "        self._queue.append(lane)\n"), SPECS, ("v05",),
           "a freed lane goes to the back of the queue, so a newcomer takes a lane never used; "
           "slot_of reports the freed slot"),
    Mutant("v08-blocks-moved-when-a-request-leaves", PROPERTY, (
        Edit(PAGED_CACHE, "            self.pool.free(request_id)\n",
             "            self.pool.free(request_id)\n"
             "            pool = self.pool\n"
             "            for r in list(self._lane):  # every live request to fresh blocks\n"
             "                old = pool.table(r)\n"
             "                if len(old) <= pool.num_free:\n"
             "                    new = [pool._free.popleft() for _ in old]\n"
             "                    for k, v in self.kv:\n"
             "                        k[new] = k[old]\n"
             "                        v[new] = v[old]\n"
             "                    pool._tables[r] = new\n"
             "                    pool._free.extend(reversed(old))\n"),),
        SPECS, ("v08",),
        "a request leaving moves every live request's K/V to fresh blocks (tables updated)"),
]
