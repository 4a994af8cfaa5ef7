"""Builds the Cython kernels in pyx/ into broker.kernels.* and installs the broker package.

BROKER_BUILD=asan builds with AddressSanitizer (used by the hardening suite);
the default is an optimised -O3 build.
"""
import glob
import os
import shutil

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

KERNELS = {
    # module name        sources                 extra libraries
    "codec": (["pyx/codec.pyx"], ["z"]),
    "atomics": (["pyx/atomics.pyx"], []),
    "remoting": (["pyx/remoting.pyx"], []),
    "ha": (["pyx/ha.pyx"], []),
}

flags = ["-O3", "-Wall", "-Wno-unused-function", "-Wno-unreachable-code"]
link = []
if os.environ.get("BROKER_BUILD") == "asan":
    flags = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address"]
    link = ["-fsanitize=address"]

# Cython looks for a module's own .pxd under its package path (broker/kernels/x.pxd), while
# the sources live in pyx/: mirror the interfaces into a build folder it searches.
PXD_MIRROR = os.path.join("build", "pxd")
os.makedirs(os.path.join(PXD_MIRROR, "broker", "kernels"), exist_ok=True)
for pxd in glob.glob("pyx/*.pxd"):
    shutil.copy2(pxd, os.path.join(PXD_MIRROR, "broker", "kernels", os.path.basename(pxd)))

extensions = [
    Extension(
        f"broker.kernels.{name}",
        sources,
        include_dirs=[numpy.get_include(), "pyx"],
        libraries=libs,
        extra_compile_args=flags,
        extra_link_args=link,
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    for name, (sources, libs) in KERNELS.items()
]

setup(
    name="pyrocketmq-broker",
    version="0.1.0",
    description="A RocketMQ-compatible message broker: numpy memory maps, Cython kernels, services as processes",
    packages=find_packages(include=["broker", "broker.*"]),
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
        include_path=["pyx", PXD_MIRROR],
    ),
    python_requires=">=3.11",
    entry_points={"console_scripts": ["broker=broker.cli:main"]},
    zip_safe=False,
)
