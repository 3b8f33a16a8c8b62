"""Package discovery for optsched.

The cost-model profiles (``models/``) and named instances (``instances/``) sit at the top of the
source tree, where users look for them; here they are mapped into the installed package as
``optsched.data_models`` and ``optsched.data_instances`` so that a plain ``pip install`` ships them.
"""

from setuptools import find_packages, setup

DATA_PACKAGES = {"optsched.data_models": "models", "optsched.data_instances": "instances"}

setup(
    packages=find_packages(include=["optsched", "optsched.*"]) + list(DATA_PACKAGES),
    package_dir=DATA_PACKAGES,
    package_data={
        "optsched.data_models": ["*.toml"],
        "optsched.data_instances": ["*.json", "*.csv", "*/*.json"],
        "optsched.problems.static_profiles": ["*.toml"],
        "optsched.executor": ["configs/*.json"],
    },
)
