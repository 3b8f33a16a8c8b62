"""SCLS slice-level batching (seed 004): P-BATCH by Algorithm 1 with a MIP cross-check
(:mod:`.batching`), max-min offloading against the exact makespan and the adaptive interval
(:mod:`.offload`), and the ``scls-batch`` entry of the solver registry (:mod:`.solve`)."""
