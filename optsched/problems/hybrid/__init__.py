"""The Hybrid offline-online scheduling problem (seed003: Pang, Li, She, Wang, arXiv 2502.15763).

Makespan of an offline batch under PD Competition: J clients (``limits.max_running``), every iteration is
either a prefill stage or a decode round. Modules:

- :mod:`.timing` — the paper's affine laws and levels read from the instance's cost model;
- :mod:`.pcmax` — the offline request-to-client assignment, Eqs. (26)-(30), as P||Cmax (bounds, LPT,
  local search, CP-SAT, MIP);
- :mod:`.bounds` — the lower bound (31)-(32), ``paper`` and ``strict`` modes;
- :mod:`.online` — Algorithm 1, the marginal-cost iteration rule and the baseline, as simulation policies;
- :mod:`.model` — the full MIP (1)-(25) with the fixes of docs/hybrid.md; :mod:`.solve` — its solve;
- :mod:`optsched.problems.hybrid_offline` — the ``hybrid-offline`` problem (the assignment of
  :mod:`.pcmax`, its schedule);
"""
