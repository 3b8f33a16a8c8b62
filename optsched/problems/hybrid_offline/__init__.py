"""The ``hybrid-offline`` formulation: the Hybrid paper's offline assignment (Eqs. 26-30) and its
schedule; its solve entry and bounds are in :mod:`.solve`, built on the P||Cmax assignment of
:mod:`optsched.problems.hybrid.pcmax` and the Hybrid paper's policies and timing."""
