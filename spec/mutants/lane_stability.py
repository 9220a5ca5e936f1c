"""Lane stability: from v05 a request keeps one decode lane, and its K/V one place, for its whole
life. The lane mutants keep every token right and lane_of() reporting the lane the v05 rule
gives (lowest free, never moving), while the lanes the decode pass runs differ, so only the
specs that watch the passes (spec/support/watchers/lanes.py) notice. The last one moves the K/V blocks
of a paged request while its lane stays put."""
from spec.mutants import Edit, Mutant

KV = "v05_decode_lanes/kv.py"
PAGED_KV = "v08_paged_gqa_py/kv.py"
SLOTS = "spec/test_v05_decode_lanes.py"
OBSERVED = f"{SLOTS}::test_the_lane_that_lane_of_names_feeds_its_requests_token_and_its_kv_rows_stay_put"
SCHEDULES = (f"{SLOTS}::test_for_any_arrival_schedule_a_request_keeps_one_unshared_lane_"
             f"newcomers_taking_the_lowest")
SPECS = (OBSERVED, SCHEDULES)
PROPERTY = "lane stability"

PICK = ("        taken = set(self.lanes_in_use())\n"
        "        return next(s for s in range(self.num_lanes) if s not in taken)\n")
REPORT = ("        request = self.held.get(request_id)\n"
          "        return None if request is None else request.lane\n")
FREE = ("        request = self.held.pop(request_id, None)\n"
        "        if request is not None:\n"
        "            request.lane, request.computed = None, 0\n")
ROWS = "        s, n = self.lane_of(request_id), self.num_tokens(request_id)\n"
HELD = "        self.held: dict[Hashable, object] = {}  # request id -> the request holding a lane\n"


def reported_apart(lane: str, on_free: str = ""):
    """Edits that keep two books: the lane the request really runs in and keeps its rows in
    (request.lane, picked by `lane`, an expression over `free`, the free lanes lowest first),
    and the lane lane_of reports, handed out by v05's rule. `on_free` runs after a request's
    lane is freed, with `lane` bound to that lane."""
    return (
        Edit(KV, PICK,
             "        taken = set(self.lanes_in_use())\n"
             "        free = [s for s in range(self.num_lanes) if s not in taken]\n"
             "        shown = set(self._shown.values())\n"
             "        self._shown[request_id] = min(set(range(self.num_lanes)) - shown)\n"
             f"        return {lane}\n"),
        Edit(KV, REPORT, "        return self._shown.get(request_id)\n"),
        Edit(KV, ROWS,  # the rows are read where they really are
             "        s, n = self.held[request_id].lane, self.num_tokens(request_id)\n"),
        Edit(KV, FREE,
             "        self._shown.pop(request_id, None)\n"
             "        request = self.held.pop(request_id, None)\n"
             "        if request is None:\n"
             "            return\n"
             "        lane = request.lane\n"
             "        request.lane, request.computed = None, 0\n" + on_free),
        Edit(KV, HELD,
             HELD + "        self._shown: dict[Hashable, int] = {}\n"
             "        self._queue = list(range(num_lanes))\n"),
    )


# Live requests slide down into the lowest lanes, their rows copied along: tokens stay right.
COMPACT = ("        for to, r in enumerate(sorted(self.held.values(), key=lambda r: r.lane)):\n"
           "            if r.lane != to:\n"
           "                for k, v in self.kv:\n"
           "                    k[to].copy_(k[r.lane])\n"
           "                    v[to].copy_(v[r.lane])\n"
           "                r.lane = to\n")

MUTANTS = [
    Mutant("v05-compacted-lanes", PROPERTY, reported_apart("free[0]", COMPACT), SPECS, ("v05",),
           "a request leaving moves the live ones into lower lanes (rows copied); lane_of "
           "reports the old lanes"),
    Mutant("v07-compacted-lanes", PROPERTY, (
               # v07's own edit first (the K/V memory's edits are v05's): the bucket covers
               # the reported lanes, so the pass still has as many lanes
               Edit("v07_cuda_graph/runner.py", "        in_use = self.kv.lanes_in_use()\n",
                    "        in_use = list(self.kv._shown.values())\n"),)
           + reported_apart("free[0]", COMPACT),
           SPECS, ("v07",),
           "v05's compaction under graph replay: the replayed pass runs the compacted lanes"),
    Mutant("v05-newcomer-takes-the-highest-lane", PROPERTY, reported_apart("free[-1]"), SPECS,
           ("v05",), "a newcomer runs in the highest free lane; lane_of reports the lowest"),
    Mutant("v05-freed-lane-reused-last", PROPERTY,
           reported_apart("[s for s in self._queue if s in free][0]",
                          "        self._queue.remove(lane)\n"
                          "        self._queue.append(lane)\n"), SPECS, ("v05",),
           "a freed lane goes to the back of the queue, so a newcomer takes a lane never used; "
           "lane_of reports the freed lane"),
    Mutant("v08-blocks-moved-when-a-request-leaves", PROPERTY, (
        Edit(PAGED_KV, "            self.pool.free(request_id)\n",
             "            self.pool.free(request_id)\n"
             "            pool = self.pool\n"
             "            for r in [r for r in self.held if pool.holds(r)]:  # to fresh blocks\n"
             "                table = pool.table_view(r)  # the request's own blocks list\n"
             "                old = list(table)\n"
             "                if len(old) <= pool.num_free:\n"
             "                    new = [pool._free.popleft() for _ in old]\n"
             "                    for k, v in self.kv:\n"
             "                        k[new] = k[old]\n"
             "                        v[new] = v[old]\n"
             "                    table[:] = new\n"
             "                    pool._free.extend(reversed(old))\n"),),
        SPECS, ("v08",),
        "a request leaving moves every live request's K/V to fresh blocks (tables updated)"),
]
