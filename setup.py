"""argus_cutlass: one installable namespace.

The user's top-level folders ``templates/``, ``invariants/`` and ``agent/`` install as
``argus_cutlass.templates``, ``argus_cutlass.invariants`` and ``argus_cutlass.agent``.
"""

from setuptools import find_packages, setup

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
        "test": ["pytest>=8", "pytest-benchmark>=4", "hypothesis>=6", "openai>=1.0"],
    },
    entry_points={"console_scripts": ["argus-cutlass=argus_cutlass.cli:main"]},
)
