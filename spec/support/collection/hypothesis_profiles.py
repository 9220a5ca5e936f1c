"""Hypothesis settings, registered once. CI sets CI=true and gets `ci`; `HYPOTHESIS_PROFILE=stress`
runs far more examples. Tests never hard-code settings: cheap properties (allocators, kernels on
tiny shapes) use the active profile; properties that run a model take `engine_settings()`.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

_ci = settings.get_profile("ci")  # Hypothesis' own: derandomized, no deadline, no database
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("ci", _ci, max_examples=200)
settings.register_profile("stress", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])

# Properties that run a model: each example costs milliseconds to seconds. As many as ci's
# (below), drawn anew at each run: at 12 the README's command without CI took 6 min 16 s on 2
# cores (2026-12-06, docs/testing.md), past its 6 minutes.
settings.register_profile("dev-engine", max_examples=10, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
# ci: 10 examples, not 50. An example costs 6 ms to 0.3 s (a v07-on engine captures its graphs
# at its first decode, most of an example there), and the engine properties run for every
# version that inherits them: they were 615 s of the 1551 s of spec time in the README's test
# command (13 min 27 s on a 2-core Zen3 machine, 2026-12-02, at 30 examples; 7 min 42 s at 50 on
# a faster one), whose budget is 6 minutes. Mutant runs keep 50 (mutants-engine below), so what
# kills a mutant is unchanged; `dev` draws new examples on every run, and `stress` far more.
settings.register_profile("ci-engine", _ci, max_examples=10,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("stress-engine", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])

# Runs against mutants (spec/mutants/): `ci`'s examples, so a kill is as deterministic as a ci
# run, without shrinking: the first failing example is the verdict, and a minimal one is not
# needed to say which spec noticed.
settings.register_profile("mutants", _ci, max_examples=200, phases=(Phase.explicit, Phase.generate))
settings.register_profile("mutants-engine", _ci, max_examples=50,
                          phases=(Phase.explicit, Phase.generate),
                          suppress_health_check=[HealthCheck.too_slow])

# Runs against pristine stubs (spec/test_meta_stubs.py): every example fails, so shrinking and
# explaining failures only costs time.
for _name in ("stubs", "stubs-engine"):
    settings.register_profile(_name, _ci, max_examples=5, phases=(Phase.explicit, Phase.generate),
                              suppress_health_check=list(HealthCheck))

PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
settings.load_profile(PROFILE)


def engine_settings() -> settings:
    """The active profile's settings for properties that run a model."""
    return settings.get_profile(f"{PROFILE}-engine")
