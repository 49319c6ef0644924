"""argus_cutlass: one installable namespace.

The user's top-level folders ``templates/``, ``invariants/`` and ``agent/`` install as
``argus_cutlass.templates``, ``argus_cutlass.invariants`` and ``argus_cutlass.agent``.
"""

import atexit
import shutil
import sys
import tempfile

from setuptools import find_packages, setup

# `pip install .` leaves no build artefacts in the source tree: setuptools' build/ and *.egg-info go to a
# scratch folder removed when the build step ends (pip copies what it needs first). An editable install
# (`pip install -e .`, setup.py develop) keeps its egg-info beside the sources: it is read from there.
_EDITABLE = any(cmd in sys.argv for cmd in ("develop", "editable_wheel"))
_options = {}
if not _EDITABLE:
    _scratch = tempfile.mkdtemp(prefix="argus_cutlass-build-")
    atexit.register(shutil.rmtree, _scratch, True)
    _options = {"build": {"build_base": f"{_scratch}/build"}, "egg_info": {"egg_base": _scratch}}

core = ["argus_cutlass"] + [f"argus_cutlass.{p}" for p in find_packages("argus_cutlass")]

setup(
    name="argus_cutlass",
    version="0.1.0",
    description="Verified CuTe/CUTLASS kernel generation for NVIDIA Hopper (sm_90a)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=core + ["argus_cutlass.templates", "argus_cutlass.invariants", "argus_cutlass.agent"],
    package_dir={
        "argus_cutlass.templates": "templates",
        "argus_cutlass.invariants": "invariants",
        "argus_cutlass.agent": "agent",
    },
    package_data={
        "argus_cutlass.templates": ["*.j2", "*/*.j2"],
        "argus_cutlass.invariants": ["*.toml"],
        "argus_cutlass.agent": ["*.toml", "*.json", "models/*.json"],
        "argus_cutlass.testing": ["*.toml"],
    },
    install_requires=[
        "nvidia-cutlass>=4.2",
        "cuda-python>=12.6",
        "jinja2>=3.1",
        "pydantic>=2.6",
        "z3-solver>=4.12",
        "numpy>=1.24",
    ],
    extras_require={
        # the LLM policy of the agent (argus-cutlass tune --policy llm) talks to an OpenAI-compatible API
        "llm": ["openai>=1.0"],
        # argus-cutlass tune --shapes/--model: compiles and measurements spread through Ray, a progress bar
        "tune": ["ray>=2.9", "tqdm>=4"],
        # the benchmarks' plots (bench/plots.py: ratio to the vendor per shape, roofline)
        "bench": ["matplotlib>=3.7"],
        # ray / tqdm: the tests run `tune --shapes` through a local Ray cluster too (session 44: without them in
        # this extra the Ray backend's test skipped itself in CI)
        "test": ["pytest>=8", "pytest-benchmark>=4", "hypothesis>=6", "openai>=1.0", "matplotlib>=3.7",
                 "ray>=2.9", "tqdm>=4"],
    },
    entry_points={"console_scripts": ["argus-cutlass=argus_cutlass.cli:main"]},
    options=_options,
)
