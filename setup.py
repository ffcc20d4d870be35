"""Build hpcgnn: a pure-Python package plus the compiled graph kernels in cython/."""
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

setup(
    name="hpcgnn",
    version="0.1.0",
    description="Distributed GNN training on CPU clusters as one MPI program",
    packages=find_packages(include=["hpcgnn", "hpcgnn.*"]),
    ext_modules=cythonize(kernels, language_level=3, compiler_directives={"boundscheck": False,
                                                                          "wraparound": False}),
    python_requires=">=3.11",
    install_requires=["numpy>=1.24", "scipy", "h5py", "pymetis", "mpi4py>=3.1", "tqdm", "psutil", "pyyaml"],
    extras_require={"kaminpar": ["kaminpar"]},  # --method kaminpar
    entry_points={"console_scripts": ["hpcgnn = hpcgnn.cli:program"]},
)
