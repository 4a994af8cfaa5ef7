"""Builds the Cython kernels in pyx/ into broker.kernels.* and installs the broker package.

BROKER_BUILD=asan builds with gcc's AddressSanitizer (the hypothesis suites run once on it);
BROKER_BUILD=fuzz builds with clang, ASan and libFuzzer's coverage hooks (`make fuzz`; such a build
imports only with atheris' asan_with_fuzzer.so preloaded). Both go to their own build folder
(`--build-lib build-asan|build-fuzz`) and are loaded through BROKER_KERNELS_DIR; the default is an
optimised -O3 build in place.
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
    "entry_push": (["pyx/entry_push.pyx"], ["z"]),
    "wbuf": (["pyx/wbuf.pyx"], []),
    "header": (["pyx/header.pyx"], []),
    "cq_dispatch": (["pyx/cq_dispatch.pyx"], []),
    "send_path": (["pyx/send_path.pyx"], []),
    "client_codec": (["pyx/client_codec.pyx"], ["z"]),
    "pulled": (["pyx/pulled.pyx"], []),
    "queue_read": (["pyx/queue_read.pyx"], []),
    "index_dispatch": (["pyx/index_dispatch.pyx"], []),
    "sql92": (["pyx/sql92.pyx"], []),
    "h2_session": (["pyx/h2_session.pyx"], ["nghttp2"]),
    "timer_wheel": (["pyx/timer_wheel.pyx"], []),
    "send_request": (["pyx/send_request.pyx"], []),
    "receive_reply": (["pyx/receive_reply.pyx"], ["crypto"]),
    "ack_request": (["pyx/ack_request.pyx"], []),
    "batch_ack": (["pyx/batch_ack.pyx"], []),
    "pop_record": (["pyx/pop_record.pyx"], []),
}

flags = ["-O3", "-Wall", "-Wno-unused-function", "-Wno-unreachable-code"]
link = []
if os.environ.get("BROKER_BUILD") == "asan":
    flags = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address"]
    link = ["-fsanitize=address"]
elif os.environ.get("BROKER_BUILD") == "fuzz":
    # gcc cannot emit libFuzzer's coverage hooks (-fsanitize=fuzzer-no-link): clang only.
    flags = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,fuzzer-no-link"]
    link = ["-fsanitize=address,fuzzer-no-link"]

# Cython looks for a module's own .pxd under its package path (broker/kernels/x.pxd), while
# the sources live in pyx/: mirror the interfaces into a build folder it searches.
PXD_MIRROR = os.path.join("build", "pxd")
os.makedirs(os.path.join(PXD_MIRROR, "broker", "kernels"), exist_ok=True)
for pxd in glob.glob("pyx/*.pxd"):
    shutil.copy2(pxd, os.path.join(PXD_MIRROR, "broker", "kernels", os.path.basename(pxd)))

JOBS = os.cpu_count() or 1

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
        nthreads=JOBS,
    ),
    # the C files compiled side by side too (build_ext -j): twenty-odd kernels at -O3 are most of
    # `make install`'s time on a fresh machine
    options={"build_ext": {"parallel": JOBS}},
    python_requires=">=3.11",
    entry_points={"console_scripts": ["broker=broker.cli:main"]},
    zip_safe=False,
)
