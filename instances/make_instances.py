"""Write the generated named instances of this folder from their recipes.

The recipes live in :func:`optsched.generators.shipped_instances` (seeded, so the files are
reproducible; ``tests/test_generators.py`` checks that the shipped files equal the recipes).
``toy-4.json`` is hand-made and not written here. The slices of real traces
(:data:`optsched.workload.shipped.TRACE_SLICES`) are written when ``../shared/data`` is present.
Run from the repository root::

    python instances/make_instances.py
"""

from pathlib import Path

from optsched.generators import shipped_instances
from optsched.workload.shipped import TRACE_SLICES, trace_slice


def main() -> None:
    here = Path(__file__).resolve().parent
    for name, instance in shipped_instances().items():
        instance.save(here / f"{name}.json")
        print(f"wrote {name}.json ({len(instance.requests)} requests)")
    data = next((p / "shared" / "data" for p in here.parents if (p / "shared" / "data").is_dir()), None)
    if data is None:
        print("../shared/data is absent: the trace slices are not written")
        return
    for name in TRACE_SLICES:
        instance = trace_slice(name, data)
        instance.save(here / f"{name}.json")
        print(f"wrote {name}.json ({len(instance.requests)} requests)")


if __name__ == "__main__":
    main()
