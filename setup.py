"""Build hpcgnn: a pure-Python package plus the compiled graph kernels in cython/."""
import ast
import os
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

kernels = [
    Extension(
        f"hpcgnn._{name}",
        [f"cython/{name}.pyx"],
        include_dirs=[numpy.get_include(), "cython"],
        language="c++",
        # no fused multiply-add contraction: the AVX-512 builds of the kernels (cython/cpu_dispatch.h)
        # then give the bits of the baseline ones, so the build a node picks does not change a run
        extra_compile_args=["-O3", "-std=c++17", "-ffp-contract=off"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    for name in ("csr", "sample", "layerwise", "dense", "rows", "progress", "spmm", "attention", "partition")
]


def package_version() -> str:
    """hpcgnn.__version__, read from the source without importing the package (one place to bump)."""
    tree = ast.parse((Path(__file__).resolve().parent / "hpcgnn" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"]:
            return ast.literal_eval(node.value)
    raise RuntimeError("hpcgnn/__init__.py defines no __version__")


setup(
    name="hpcgnn",
    version=package_version(),
    description="Distributed GNN training on CPU clusters as one MPI program",
    packages=find_packages(include=["hpcgnn", "hpcgnn.*"]),
    ext_modules=cythonize(kernels, language_level=3, nthreads=os.cpu_count() or 1,
                          compiler_directives={"boundscheck": False, "wraparound": False}),
    python_requires=">=3.11",
    # torch: install the build you want first (`make install` pins the CPU wheel), or pip takes
    # PyPI's default one; MPI: mpi4py needs an MPI library, a site one or the `mpich` wheel
    install_requires=["numpy>=1.24", "scipy", "h5py", "pymetis", "mpi4py>=3.1", "torch", "tqdm", "psutil",
                      "pyyaml"],
    extras_require={"kaminpar": ["kaminpar"],  # --method kaminpar
                    "plot": ["matplotlib"]},  # train --plot
    entry_points={"console_scripts": ["hpcgnn = hpcgnn.cli:program"]},
    # the kernels are compiled side by side, one per core: a fresh build (a wheel, an sdist's
    # wheel, `make install`) is bound by the C++ compiler
    options={"build_ext": {"parallel": os.cpu_count() or 1}},
)
