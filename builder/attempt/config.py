"""One attempt, as pure values: its configuration (AttemptConfig), the cibuildwheel settings
that configuration becomes (cibuildwheel_env), and the in-container scripts it runs. What the
engine saw of it and how it ended are outcome.py's.

No Docker and no subprocess here: the engine runs the attempt and observes it; this module says
what to run, so it is tested exhaustively without a daemon.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import secrets
from ..errors import BadArgument
from ..image.inputs import IMAGES_DIR, SCRIPTS_INSIDE, image_script
from ..image.names import PIP_CACHE_VOLUME, SCCACHE_VOLUME, TORCH_WHEELS_VOLUME
from ..plan import online
from ..plan.dist import DistTarget, read_token
from ..variants import TorchVariant
from .ownership import ATTEMPT_LABEL, OWNER_LABEL, RUN_LABEL, owner_token

SCCACHE_DIR = "/root/.cache/sccache"
ADMIT_COSTS_PATH = "/tmp/wheelbuild-admit-costs.json"
ONLINE_RULE = "wheelbuild_online.py"  # plan/online.py, as images/wheelbuild-admit imports it
ADMIT_DIR = "/tmp/wheelbuild-admit"  # the wrapper's ledger's folder (its default), shared with the host


# ---------------------------------------------------------------------------------------------
# One attempt: one cibuildwheel run in one container


@dataclass(frozen=True)
class AttemptConfig:
    run_id: str
    attempt: int
    image: str
    project_dir: Path  # copied into the container as /project
    package: str  # what cibuildwheel builds: "." or an sdist path
    identifiers: tuple[str, ...]  # cp311-manylinux_x86_64 ...
    memory: int
    cpus: float
    gpus: bool
    build_env: Mapping[str, str]
    cuda_home: str
    torch: TorchVariant  # installed before the build (its requirement, from its index) and checked
    output_dir: Path
    log_path: Path
    compiler_cache: bool = True
    # With the compiler cache: compile every unit for real, reading nothing from it (sccache's
    # SCCACHE_RECACHE), through the same path a cached build takes, so the objects are alike.
    recache: bool = False
    # Admission by memory (images/wheelbuild-admit): the budget and the JSON costs file's text.
    admission: tuple[int, str] | None = None
    # With admission: a host folder the container shares as the wrapper's ledger's (ADMIT_DIR),
    # where the engine's watcher writes what each running unit measures, for the wrapper to learn
    # from while the build runs (images/wheelbuild-admit); and the host sees the ledger.
    admit_dir: Path | None = None
    # images/wheelbuild-ninja's order (JSON text): ninja launches the longest compiles first.
    ninja_order: str | None = None
    # Host env vars handed to the build by name (values never on a command line): a shared
    # sccache storage's settings and credentials (see SHARED_CACHE_ENV).
    pass_env: tuple[str, ...] = ()
    images_dir: Path = IMAGES_DIR  # where the in-container scripts are bind-mounted from
    # --dist: the scheduler (and network) the compiler cache sends compiles to; its token goes
    # into the secrets mount's client config (write_secrets), never into this config.
    dist: DistTarget | None = None
    # What wheelbuild-nvcc compiles: these archs (None: the package's own arch flags, kept with
    # --keep-package-archs) and each unit's ciccs at once (None: the package's --threads).
    nvcc_archs: tuple[int, ...] | None = None
    nvcc_ptx: tuple[int, ...] = ()  # of nvcc_archs, those whose PTX goes in too
    nvcc_threads: int | None = None
    # Keep the package's own C++ standard (--keep-package-std): else an older -std is raised to
    # what the installed torch's headers require (images/wheelbuild-cxx).
    keep_package_std: bool = False
    # The package's [build-system] requires (torch left out), installed before its build: it
    # runs without isolation.
    build_requires: tuple[str, ...] = ()
    # Take the container off its network for the package's build (images/wheelbuild-network):
    # no setup.py then fetches a prebuilt binary. Off with --build-network, --dist, a shared cache.
    offline_build: bool = False
    # The machine's wheel cache's bound (WHEELBUILD_WHEEL_CACHE_BOUND), passed in when set.
    wheel_cache_bound: int | None = None
    # What torch brings at run time: its own libraries and its CUDA libraries' wheels (a module
    # linking -lcublas needs libcublas.so.13, which torch has loaded; grafting it would add
    # hundreds of MB of a second copy).
    repair_excludes: tuple[str, ...] = (
        "libtorch*.so",
        "libc10*.so",
        "libcudart.so*",
        "libcuda.so*",
        "libshm.so",
        "libcublas*.so*",
        "libcusparse*.so*",
        "libcusolver*.so*",
        "libcurand.so*",
        "libcufft*.so*",
        "libnvrtc*.so*",
        "libnvJitLink.so*",
        "libcudnn*.so*",
        "libnccl.so*",
        "libnvshmem*.so*",
        "libcupti.so*",
        "libnvtx3interop.so*",
    )

    @property
    def attempt_id(self) -> str:
        return f"{self.run_id}.{self.attempt}"


def _env_assignments(env: Mapping[str, str]) -> str:
    return " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())


# sccache's shared storages (S3 and compatible, Redis, GitHub Actions' cache) and their
# credentials: when the host has any of these, the build gets them, so that runners share what
# any of them compiled.
SHARED_CACHE_ENV = (
    "SCCACHE_BUCKET", "SCCACHE_REGION", "SCCACHE_ENDPOINT", "SCCACHE_S3_KEY_PREFIX", "SCCACHE_S3_USE_SSL",
    "SCCACHE_S3_NO_CREDENTIALS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "SCCACHE_REDIS", "SCCACHE_REDIS_ENDPOINT", "SCCACHE_REDIS_PASSWORD", "SCCACHE_REDIS_KEY_PREFIX",
    "SCCACHE_GHA_ENABLED", "SCCACHE_GHA_VERSION", "ACTIONS_CACHE_URL", "ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN",
)  # fmt: skip


def shared_cache_env(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The SHARED_CACHE_ENV names set in `environ`."""
    return tuple(name for name in SHARED_CACHE_ENV if environ.get(name))


def network_while_building(asked: bool, dist: DistTarget | None, environ: Mapping[str, str]) -> str:
    """Whether the container has its network while the package builds: "off", or "on: <why>"."""
    if asked:
        return "on: --build-network"
    if dist is not None:
        return "on: --dist sends the compiles over it"
    if shared_cache_env(environ):
        return "on: the compiler cache's shared storage is reached over it"
    return "off"


# The in-container steps are images/ scripts, bind-mounted read-only next to wheelbuild-admit
# and run with `sh`/`python` (package data may lose its exec bit). Each is tested alone.
CHECK_MEMORY_SCRIPT = "wheelbuild-check-memory"  # before_all: the container got its limit
BEFORE_BUILD_SCRIPT = "wheelbuild-before-build"  # per Python: torch, its check, sccache's server
CHECK_TORCH_SCRIPT = "wheelbuild-check-torch"  # run by before-build
WHEEL_CACHE_SCRIPT = "wheelbuild-wheel-cache"  # run by before-build: torch installed from the cache
SITE_PACKAGES_SCRIPT = "wheelbuild-site-packages"  # SCCACHE_BASEDIRS, evaluated per Python
CACHE_LOG_SCRIPT = "wheelbuild-cache-log"  # per Python, before the repair: which units compiled
NINJA_ORDER_SCRIPT = "wheelbuild-ninja"  # ninja's launcher: the compiles in the plan's launch order
CICC_ADMISSION_SCRIPT = "wheelbuild-cicc-admission"  # run by before-build: ciccs through wheelbuild-admit
TOOLCHAIN_SCRIPT = "wheelbuild-toolchain"  # run by before-build: the two stand-ins below in place
NVCC_SCRIPT = "wheelbuild-nvcc"  # $CUDA_HOME/bin/nvcc: exactly the archs asked
LD_SCRIPT = "wheelbuild-ld"  # each linker: the ledger of what this build linked
CXX_SCRIPT = "wheelbuild-cxx"  # the build's CXX (and nvcc's -std): the C++ standard torch requires
# The build's CXX: wheelbuild-toolchain writes it to run WHEELBUILD_CXX through wheelbuild-cxx.
CXX_SHIM = "/usr/local/bin/wheelbuild-c++"
CHECK_LINKED_SCRIPT = "wheelbuild-check-linked"  # per Python, before the repair: every .so linked here
CUDA_LIBRARIES_SCRIPT = "wheelbuild-cuda-libraries"  # run by before-build: torch's CUDA library headers
NETWORK_SCRIPT = "wheelbuild-network"  # run by before-build: the container off its network, or on
ATTEMPT_SCRIPTS = (
    CHECK_MEMORY_SCRIPT, BEFORE_BUILD_SCRIPT, CHECK_TORCH_SCRIPT, WHEEL_CACHE_SCRIPT, SITE_PACKAGES_SCRIPT,
    CACHE_LOG_SCRIPT, NINJA_ORDER_SCRIPT, CICC_ADMISSION_SCRIPT, TOOLCHAIN_SCRIPT, NVCC_SCRIPT, LD_SCRIPT,
    CXX_SCRIPT, CHECK_LINKED_SCRIPT, CUDA_LIBRARIES_SCRIPT, NETWORK_SCRIPT,
)  # fmt: skip
# Where wheelbuild-cuda-libraries links torch's CUDA library headers and link names (cuBLAS,
# cuSPARSE, ...: torch's ATen/cuda/CUDAContext.h includes them; the toolkit has none).
CUDA_LIBRARIES_FARM = "/tmp/wheelbuild-cuda"
# Torch and its CUDA wheels, content-addressed, shared by every build and gate on the machine.
WHEEL_CACHE_DIR = "/root/.cache/wheelbuild-wheels"
# Its size bound, bytes on disk (each inode once): past it the least recently used trees go
# (images/wheelbuild-wheel-cache, whose default is the same). A machine's setting, not a build's:
# every build, gate and gc on the machine shares the one volume.
WHEEL_CACHE_BOUND_ENV = "WHEELBUILD_WHEEL_CACHE_BOUND"
DEFAULT_WHEEL_CACHE_BOUND = 40 * 1024**3


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+)([kmgt]?)(?:i?b)?", re.IGNORECASE)


def wheel_cache_bound(environ: Mapping[str, str]) -> int | None:
    """WHEELBUILD_WHEEL_CACHE_BOUND in Docker's units (40g, 500m; 1024-based, as the script
    reads it), or None when unset (the default holds). Raises BadArgument for another value."""
    given = environ.get(WHEEL_CACHE_BOUND_ENV, "").strip()
    if not given:
        return None
    found = _SIZE.fullmatch(given)
    if found is None:
        raise BadArgument(
            f"{WHEEL_CACHE_BOUND_ENV}={given!r} is not a size",
            "give bytes, or a whole number with k, m, g or t (40g)",
        )
    return int(found[1]) * _UNITS[found[2].lower()]


# The second Python reuses the first one's kernels when sccache strips its site-packages
# (images/wheelbuild-site-packages says why).
SITE_PACKAGES_BASEDIRS = f'SCCACHE_BASEDIRS="$(sh {SCRIPTS_INSIDE}/{SITE_PACKAGES_SCRIPT})"'


def cibuildwheel_env(config: AttemptConfig, secrets_dir: Path | None = None) -> dict[str, str]:
    """The CIBW_* settings of one attempt. Pure, so unit tests can read it. Secrets (the torch
    index URL, a shared cache's credentials) are never among them: cibuildwheel prints its
    options and runs commands as `env K=V ...`, so they reach the container as files in
    `secrets_dir`, mounted read-only (secrets.MOUNT), and only the commands that need them read them."""
    create_args = _create_args(config, secrets_dir)
    container_env = _container_env(config)
    before_build, repair = _before_build_and_repair(config)
    return {
        "CIBW_PLATFORM": "linux",
        "CIBW_ARCHS_LINUX": "x86_64",
        "CIBW_BUILD": " ".join(config.identifiers),
        "CIBW_MANYLINUX_X86_64_IMAGE": config.image,
        "CIBW_CONTAINER_ENGINE": "docker; create_args: " + " ".join(create_args),
        # pypa/build calls the backend's build_wheel alone: pip first runs setup.py for the
        # metadata, one more torch import per Python. No isolation, so torch is seen; no
        # dependency check, which would run setup.py again.
        "CIBW_BUILD_FRONTEND": "build; args: --no-isolation --skip-dependency-check",
        "CIBW_BUILD_VERBOSITY": "1",
        "CIBW_BEFORE_ALL_LINUX": f"sh {SCRIPTS_INSIDE}/{CHECK_MEMORY_SCRIPT}",
        "CIBW_BEFORE_BUILD_LINUX": before_build,
        # PATH keeps cibuildwheel's python first (it checks) and puts the variant's nvcc next.
        "CIBW_ENVIRONMENT_LINUX": " ".join(
            [
                _env_assignments(container_env),
                *([SITE_PACKAGES_BASEDIRS] if config.compiler_cache else []),
                f'PATH="$PATH:{config.cuda_home}/bin"',
            ]
        ),
        "CIBW_ENVIRONMENT_PASS_LINUX": "",
        "CIBW_REPAIR_WHEEL_COMMAND_LINUX": repair,
        "CIBW_TEST_COMMAND": "",
        # cibuildwheel audits an abi3 wheel with abi3audit on the host, in a virtualenv it first
        # downloads from GitHub (it waits forever where GitHub is unreachable); wheelbuild's
        # import gate loads that wheel under each Python built for instead.
        "CIBW_AUDIT_COMMAND": "",
    }


def _create_args(config: AttemptConfig, secrets_dir: Path | None) -> list[str]:
    """docker create's arguments: the plan's limits, the labels cleanup finds, the caches."""
    create_args = [
        f"--memory={config.memory}",
        f"--memory-swap={config.memory}",  # equal: no swap, so the limit is real
        f"--cpus={config.cpus:g}",
        f"--label={RUN_LABEL}={config.run_id}",
        f"--label={ATTEMPT_LABEL}={config.attempt_id}",
        f"--label={OWNER_LABEL}={owner_token()}",
        f"--volume={PIP_CACHE_VOLUME}:/root/.cache/pip",
        f"--volume={TORCH_WHEELS_VOLUME}:{WHEEL_CACHE_DIR}",
    ]
    if config.compiler_cache:
        create_args.append(f"--volume={SCCACHE_VOLUME}:{SCCACHE_DIR}")
    if secrets_dir is not None:
        create_args.append(f"--volume={secrets_dir}:{secrets.MOUNT}:ro")
    if config.gpus:
        create_args.append("--gpus=all")
    if config.dist is not None and config.dist.network:
        create_args.append(f"--network={config.dist.network}")
    if config.admission and config.admit_dir is not None:
        create_args.append(f"--volume={config.admit_dir}:{ADMIT_DIR}")
    if config.admission:  # the wrapper imports the rule it learns by from beside itself
        create_args.append(f"--volume={Path(online.__file__).resolve()}:{SCRIPTS_INSIDE}/{ONLINE_RULE}:ro")
    for name in ATTEMPT_SCRIPTS:
        create_args.append(f"--volume={image_script(name, config.images_dir)}:{SCRIPTS_INSIDE}/{name}:ro")
    # cibuildwheel splits create_args as a shell would.
    return [shlex.quote(arg) for arg in create_args]


def _container_env(config: AttemptConfig) -> dict[str, str]:
    """The build's environment inside the container: the recipe's, CUDA, the memory limit, and
    the compiler wrappers (sccache, the admission wrapper) when they are on."""
    container_env = {
        **config.build_env,
        "CUDA_HOME": config.cuda_home,
        "WHEELBUILD_MEMORY_LIMIT": str(config.memory),
    }
    # After the compiler's own -I and -L (the toolkit's headers first), and after a path the
    # build's env gives (an empty entry would mean the current folder).
    for variable, folder in (("CPATH", "include"), ("LIBRARY_PATH", "lib")):
        given = config.build_env.get(variable)
        container_env[variable] = ":".join(p for p in (given, f"{CUDA_LIBRARIES_FARM}/{folder}") if p)
    # $CUDA_HOME/bin/nvcc is wheelbuild-nvcc in the build (wheelbuild-toolchain): it rewrites the
    # arch flags, then runs the real nvcc through sccache, so the cache's key is the command that
    # really compiles. torch's cpp_extension puts PYTORCH_NVCC in place of nvcc and CXX in place
    # of c++; the admission wrapper goes in front of both (sccache-c++ runs it; it admits only
    # when its env is set).
    if config.offline_build:
        container_env["WHEELBUILD_OFFLINE_BUILD"] = "1"
    if config.wheel_cache_bound is not None:
        container_env[WHEEL_CACHE_BOUND_ENV] = str(config.wheel_cache_bound)
    if config.build_requires:  # "|" is in no requirement (PEP 508)
        container_env["WHEELBUILD_BUILD_REQUIRES"] = "|".join(config.build_requires)
    if config.nvcc_archs is not None:
        container_env["WHEELBUILD_NVCC_ARCHS"] = ",".join(map(str, config.nvcc_archs))
    if config.nvcc_ptx:
        container_env["WHEELBUILD_NVCC_PTX"] = ",".join(map(str, config.nvcc_ptx))
    if config.nvcc_threads is not None:
        container_env["WHEELBUILD_NVCC_THREADS"] = str(config.nvcc_threads)
    # CMake takes its CUDA compiler from CUDACXX before PATH: the same nvcc.
    container_env["CUDACXX"] = f"{config.cuda_home}/bin/nvcc"
    # torch 2.14's cpp_extension puts ccache or sccache, when one is on PATH, in front of every
    # compiler it writes into build.ninja; wheelbuild's own wrappers already run sccache, and
    # sccache in front of them fails each host compile ('Compiler not supported: ""').
    container_env["TORCH_NO_COMPILER_WRAPPER"] = "1"
    if config.compiler_cache and config.recache:
        container_env["SCCACHE_RECACHE"] = "1"
    if config.compiler_cache:
        container_env.update(
            {
                "WHEELBUILD_NVCC_LAUNCHER": "sccache",
                "CXX": "/usr/local/bin/sccache-c++",
                "SCCACHE_DIR": SCCACHE_DIR,
                "SCCACHE_IDLE_TIMEOUT": "0",
            }
        )
    # The build's C++ compiler goes through wheelbuild-cxx first (the standard torch requires),
    # then on to what it would have been: sccache's, the package's CXX, or plain c++.
    container_env["WHEELBUILD_CXX"] = container_env.get("CXX") or "c++"
    container_env["CXX"] = CXX_SHIM
    if config.keep_package_std:
        container_env["WHEELBUILD_KEEP_PACKAGE_STD"] = "1"
    if config.ninja_order is not None:
        container_env["WHEELBUILD_NINJA_ORDER"] = config.ninja_order
    if config.admission:
        budget, costs = config.admission
        container_env.update(
            {
                "PYTORCH_NVCC": f"wheelbuild-admit {config.cuda_home}/bin/nvcc",
                "WHEELBUILD_ADMIT_BUDGET": str(budget),
                "WHEELBUILD_ADMIT_COSTS": ADMIT_COSTS_PATH,
                "WHEELBUILD_ADMIT_COSTS_JSON": costs,
                "WHEELBUILD_ADMIT_DIR": ADMIT_DIR,
            }
        )
    return container_env


def _before_build_and_repair(config: AttemptConfig) -> tuple[str, str]:
    """CIBW_BEFORE_BUILD_LINUX (images/wheelbuild-before-build: torch from the mounted index URL,
    checked against the variant; the admission costs and the sccache server when they are on)
    and the repair command (sccache's counts and each unit's hit or compile first, read back
    from the log, when it is on)."""
    before_build = " ".join(
        [
            "sh",
            f"{SCRIPTS_INSIDE}/{BEFORE_BUILD_SCRIPT}",
            shlex.quote(config.torch.requirement),
            shlex.quote(config.torch.torch_minor),
            str(config.torch.cuda_major),
            config.torch.cache_key,
        ]
    )
    excludes = " ".join(f"--exclude {shlex.quote(e)}" for e in config.repair_excludes)
    # Before auditwheel grafts any library in: each shared object the backend wrote was linked here.
    repair = (
        f"python {SCRIPTS_INSIDE}/{CHECK_LINKED_SCRIPT} {{wheel}} && "
        f"auditwheel repair {excludes} -w {{dest_dir}} {{wheel}}"
    )
    if config.compiler_cache:
        repair = f"sccache --show-stats; python {SCRIPTS_INSIDE}/{CACHE_LOG_SCRIPT}; {repair}"
    return before_build, repair


def redactor_for(config: AttemptConfig, environ: Mapping[str, str]) -> secrets.Redactor:
    """What every line of the attempt passes through before a log or a terminal sees it."""
    found = secrets.run_secrets(environ, SHARED_CACHE_ENV, (config.torch.index_url,))
    token = (read_token(config.dist, environ),) if config.dist is not None else ()
    return secrets.Redactor((*found, *token))
