"""Helpers shared by the tests and the benchmarks (imported as ``tests.support.<module>``).

- :mod:`~tests.support.infermax`: tiny and scale InferMax instances, the tests' solve, every
  policy's schedule, relaxation points and search-path costs;
- :mod:`~tests.support.bound_checks`: the checks of a bound on mean latency or mean TTFT (the
  exhaustive optimum of tiny instances, every policy on loaded ones, the refutations of a planted one);
- :mod:`~tests.support.ttft_blocks`: what the tests of the block bounds on mean TTFT share;
- :mod:`~tests.support.infermax_bruteforce`: the exhaustive InferMax optimum (shortest path over
  request states, written from the contract);
- :mod:`~tests.support.legal_schedules`: random legal schedules from an independent walker;
- :mod:`~tests.support.static_exhaustive`: the exhaustive static G-maximisation optimum;
- :mod:`~tests.support.report`: a serial FCFS policy and random schedules for the bound and
  report tests;
- :mod:`~tests.support.export`: a tiny instance and a schedule with chunking and preemption for
  the export and executor tests;
- :mod:`~tests.support.sweep`: sweep specs, running ``optsched sweep``, reading rows;
- :mod:`~tests.support.fake_formulations`: a test-only formulation for every status path of the CLI;
- :mod:`~tests.support.chromium`: headless Chromium for the HTML pages;
- :mod:`~tests.support.paths`: the repository and the shared data folder (``$OPTSCHED_SHARED/data``,
  else ``../shared/data``);
- :mod:`~tests.support.gmax`, :mod:`~tests.support.aladdin`: those formulations' toy and random instances;
- :mod:`~tests.support.gmax_generate`: random static-batching instances in the SLO-aware paper's setting;
- :mod:`~tests.support.aladdin_workers` (with ``aladdin_hardware.toml``): Aladdin's worker
  configuration (Eqs. 5, 6, Table 3);
- :mod:`~tests.support.hybrid_paper`: the Hybrid paper's limits and offline batches.
"""
