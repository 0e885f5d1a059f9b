"""Every option of `wheelbuild build` (and `wheelbuild plan`, which takes the same), declared once.

One row per option says everything about it: its long name (also the key of [tool.wheelbuild] in
wheelbuild.toml or pyproject.toml), the parameter the command receives, its kind, its default, its
help and how its value is checked. From the rows come the command line's options (cli/options.py
turns each into a click option), the config file's keys and their parsing (spec/config.py), the
WHEELBUILD_* variables, plan's column of where each value came from, and the reference the docs
show (`reference()`). A new row is a new option everywhere at once. Pure: no click here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from ..bounded import http_url_problem
from ..errors import BadUrl, ConfigValueInvalid, OutOfRange
from ..host.gpu import GpuMode
from ..secrets import BY_NAME_ONLY, redact_url, url_secrets
from ..units import parse_memory
from ..variants import DEFAULT_ARCHS, parse_variant
from .build_spec import (
    DEFAULT_OUTPUT_DIR,
    MAX_CPUS,
    TORCH_RANGE_OLDER,
    check_cpus,
    parse_archs,
    parse_env,
    parse_pythons,
)

__all__ = ["BY_KEY", "NO_SECRETS", "OPTIONS", "REPEATABLE", "Kind", "Option", "ReferenceRow", "reference"]

REPEATABLE = "repeatable, the lists add up"
NO_SECRETS = (
    "leave credentials out of config files (they are committed and shared); "
    f"they reach wheelbuild {BY_NAME_ONLY}"
)


class Kind(StrEnum):
    """What a value is, as a config file writes it (the words are the file's error messages')."""

    TEXT = "a string"
    PATH = "a path (string)"
    INT = "an integer"
    NUMBER = "a number"
    BOOL = "true or false"
    ARCHS = 'a string like "100,120" or a list of SM numbers'
    STRINGS = "a string or a list of strings"
    TABLE = "a table of strings"


# The kinds an option takes several of on the command line (repeated, the values add up).
LIST_KINDS = (Kind.ARCHS, Kind.STRINGS, Kind.TABLE)


@dataclass(frozen=True, kw_only=True)
class Option:
    """One build option. The command line, the config files, the variables, plan's sources and
    the docs' reference all read it from here."""

    key: str  # the long flag without its dashes and the config file's key: max-jobs
    param: str  # the parameter the command receives (click's default_map key): max_jobs
    kind: Kind
    example: str  # a value in TOML, for remedies and the docs
    help: str
    default: object = None  # None: nothing set means `unset`, which the build decides
    show_default: bool = True  # whether --help shows a default that is not None
    unset: str = "-"  # what no value means, for plan's sources and the docs
    check: Callable[..., object] | None = None  # the build's own parser: a file's bad value names its file
    choices: tuple[str, ...] = ()
    bounds: tuple[int, int] | None = None  # an integer's range on the command line
    refuse_empty: bool = False  # the command line refuses '' itself (an unset shell variable)
    off: str = ""  # a switch's negative long name (no-gate); '' for a flag that only turns on
    short: str = ""  # short names, as click writes them: -v/-q
    # Earlier long names (and config keys), still taken, never shown in --help; a switch's old
    # negative is its old name after no-.
    old_names: tuple[str, ...] = ()
    hidden: bool = False  # taken everywhere but left out of --help

    @property
    def env(self) -> str:
        return "WHEELBUILD_" + self.key.upper().replace("-", "_")

    @property
    def flag(self) -> str:
        return f"--{self.key}"

    @property
    def old_flags(self) -> tuple[str, ...]:
        """The old names as flags, with a switch's old negatives: --cicc-gate, --no-cicc-gate."""
        negatives = tuple(f"no-{old}" for old in self.old_names) if self.off else ()
        return tuple(f"--{name}" for name in (*self.old_names, *negatives))

    @property
    def switch(self) -> str:
        """The flag as --help writes it: `--gate / --no-gate` is `--gate/--no-gate`."""
        return f"{self.flag}/--{self.off}" if self.off else self.flag


def _jobs(value: int) -> None:
    if not 1 <= value <= MAX_CPUS:
        raise OutOfRange(f"{value} is not from 1 to {MAX_CPUS}", "give a count of jobs, e.g. 8")


def checked_index_url(url: str) -> str:
    """The torch index URL, if a request can go to it; BadUrl (one line) if not."""
    if (problem := http_url_problem(url)) is not None:
        whole = "give the index's whole URL, e.g. https://pypi.org/simple or https://download.pytorch.org/whl/cu130"
        raise BadUrl(
            f"the torch index URL {redact_url(url)!r} is not one a request can go to: {problem}",
            f"add https:// (--torch-index-url https://{redact_url(url)}); {whole}"
            if "://" not in url
            else whole,
        )
    return url


def _no_url_secrets(url: str) -> None:
    checked_index_url(url)
    if url_secrets(url):
        raise ConfigValueInvalid(f"the URL {redact_url(url)} carries credentials", NO_SECRETS)


def _pythons(values: Iterable[str]) -> list[str]:
    return list(parse_pythons(values))


# In help order: the image's options (base-image, ca-bundle, cuda12-image) last, as other commands
# take them too (cli/options.py's with_image_flags).
OPTIONS: tuple[Option, ...] = (
    Option(
        key="torch",
        param="torch_variant",
        kind=Kind.TEXT,
        example='"cu130"',
        default="cu130",
        check=parse_variant,
        help="cu130, cu128, ... or 2.11.0+cu130.",
    ),
    Option(
        key="like",
        param="like",
        kind=Kind.PATH,
        example='".venv"',
        unset="-",
        help="A venv or Python interpreter to build for: the torch installed there, its CPython and "
        "the archs of the GPUs it sees (each unless given on the command line); build ends with the "
        "lines that install the wheel there, and --install installs it.",
    ),
    Option(
        key="torch-index-url",
        param="torch_index_url",
        kind=Kind.TEXT,
        example='"https://download.pytorch.org/whl/cu130"',
        unset="PyTorch's index for the variant",
        check=_no_url_secrets,
        refuse_empty=True,
        help="Index to install torch from [default: PyTorch's index for the variant].",
    ),
    Option(
        key="archs",
        param="archs",
        kind=Kind.ARCHS,
        example='"100,120"',
        default=",".join(map(str, DEFAULT_ARCHS)),
        check=parse_archs,
        help="CUDA SM archs to compile SASS for, plain numbers, comma-separated (120+PTX: its PTX too; a "
        f"package's own 90a or 100f variant is kept); {REPEATABLE} (the variable: space-separated).",
    ),
    Option(
        key="python",
        param="pythons",
        kind=Kind.STRINGS,
        example='["3.11", "3.12"]',
        unset="every one in the image",
        check=_pythons,
        help=f"3.11 or cp311, or a list (3.11,3.12); {REPEATABLE} (the variable: space-separated) "
        "[default: every one in the image].",
    ),
    Option(
        key="version",
        param="recipe_version",
        kind=Kind.TEXT,
        example='"2.8.3"',
        unset="the recipe's default",
        help="Release of a known recipe (flash-attn 2.8.3) to build; not wheelbuild's own version, which "
        "`wheelbuild --version` prints.",
    ),
    Option(
        key="arch-env",
        param="arch_env",
        kind=Kind.TEXT,
        example='"NATTEN_CUDA_ARCH:dotted"',
        help="Env var a generic extension reads its arch list from, and its form: NAME (90;100), "
        "NAME:dotted (9.0;10.0), NAME:sm (sm_90;sm_100), NAME:cmake (90-real), each also -comma or "
        "-space (NAME:dotted-comma). The survey sets the ones it finds read in a form it can tell.",
    ),
    Option(
        key="memory",
        param="memory",
        kind=Kind.TEXT,
        example='"64g"',
        unset="this machine's, less a reserve",
        check=parse_memory,
        help="Container memory limit, docker units (12g) [default: host available minus a reserve].",
    ),
    Option(
        key="cpus",
        param="cpus",
        kind=Kind.NUMBER,
        example="16",
        unset="all of this process's",
        check=check_cpus,
        help="Container CPUs [default: all of this process's].",
    ),
    Option(
        key="max-jobs",
        param="max_jobs",
        kind=Kind.INT,
        example="8",
        unset="planned",
        check=_jobs,
        bounds=(1, MAX_CPUS),
        help="MAX_JOBS for ninja [default: from memory and CPUs].",
    ),
    Option(
        key="nvcc-threads",
        param="nvcc_threads",
        kind=Kind.INT,
        example="2",
        unset="planned",
        check=_jobs,
        bounds=(1, MAX_CPUS),
        help="NVCC_THREADS [default: planned from memory, CPUs and the recipe's model].",
    ),
    Option(
        key="env",
        param="env_pairs",
        kind=Kind.TABLE,
        example='{ FLASH_ATTENTION_FORCE_BUILD = "TRUE" }',
        unset="none",
        check=parse_env,
        help=f"KEY=VALUE for the build's environment; {REPEATABLE} (the variable: space-separated).",
    ),
    Option(
        key="gpus",
        param="gpus",
        kind=Kind.TEXT,
        example='"auto"',
        default=GpuMode.AUTO.value,
        choices=tuple(mode.value for mode in GpuMode),
        help="Pass the GPUs to the build's containers and the import gate (its GPU smoke test needs one): "
        "auto (when Docker has the NVIDIA runtime), all (fail without it), none. Compiling needs none.",
    ),
    Option(
        key="output-dir",
        param="output_dir",
        kind=Kind.PATH,
        example='"wheelhouse"',
        default=DEFAULT_OUTPUT_DIR,
        help="Where each run's folder goes (OUTPUT_DIR/runs/<run-id>: wheels, build.log, build-report.json).",
    ),
    Option(
        key="admission",
        param="admission",
        kind=Kind.BOOL,
        example="false",
        default=True,
        off="no-admission",
        help="Admit compiles by memory: MAX_JOBS up to the CPUs, each compile waiting until its predicted "
        "peak fits. --no-admission: the static plan alone.",
    ),
    Option(
        key="cicc-admission",
        param="cicc_admission",
        kind=Kind.BOOL,
        example="false",
        default=True,
        off="no-cicc-admission",
        old_names=("cicc-gate",),
        help="With admission, admit each cicc on its own too: a compile waits at its cost outside cicc, "
        "each cicc until its own peak fits. --no-cicc-admission: admit each compile at its whole peak.",
    ),
    Option(
        key="dist",
        param="dist",
        kind=Kind.TEXT,
        example='"http://scheduler:10600"',
        unset="local compiles",
        refuse_empty=True,
        help="Send compiles to this sccache-dist scheduler (http://HOST:PORT); its token from "
        "$WHEELBUILD_DIST_TOKEN or --dist-token-file.",
    ),
    Option(
        key="dist-network",
        param="dist_network",
        kind=Kind.TEXT,
        example='"wbdist"',
        unset="the default bridge",
        refuse_empty=True,
        help="Docker network the build joins to reach it.",
    ),
    Option(
        key="dist-token-file",
        param="dist_token_file",
        kind=Kind.PATH,
        example='"/run/secrets/dist-token"',
        unset="$WHEELBUILD_DIST_TOKEN",
        help="File holding the scheduler's token.",
    ),
    Option(
        key="dist-servers",
        param="dist_servers",
        kind=Kind.TEXT,
        example='"2x16x64g"',
        unset="assumed",
        refuse_empty=True,
        help="The build servers, COUNTxCORESxMEMORY (2x16x64g), for the plan.",
    ),
    Option(
        key="keep-package-archs",
        param="keep_package_archs",
        kind=Kind.BOOL,
        example="true",
        help="Compile the archs the package's own build files name (an arch-specific kernel) instead of "
        "exactly --archs; the check then allows their extra SASS.",
    ),
    Option(
        key="keep-package-std",
        param="keep_package_std",
        kind=Kind.BOOL,
        example="true",
        help="Keep the C++ standard the package's build passes (-std=c++17) even where the torch it "
        "builds against requires a newer one; by default an older standard is raised to torch's.",
    ),
    Option(
        key="build-network",
        param="build_network",
        kind=Kind.BOOL,
        example="true",
        help="Keep the network on while the package builds (by default the build container is taken "
        "off it, so no setup.py fetches a prebuilt binary); for a package that truly needs it.",
    ),
    Option(
        key="compiler-cache",
        param="compiler_cache",
        kind=Kind.BOOL,
        example="false",
        default=True,
        off="no-compiler-cache",
        help="Compile through the machine's sccache (retries and rebuilds resume from it); "
        "--no-compiler-cache compiles every unit for real.",
    ),
    Option(
        key="rebuild",
        param="rebuild",
        kind=Kind.BOOL,
        example="true",
        help="Build even if a finished build had exactly these inputs.",
    ),
    Option(
        key="gate",
        param="gate",
        kind=Kind.BOOL,
        example="false",
        default=True,
        off="no-gate",
        help="Install and import each wheel in a fresh container of the base image before calling it done "
        "(--no-gate: publish then checks it statically only).",
    ),
    Option(
        key="torch-range",
        param="torch_range",
        kind=Kind.BOOL,
        example="false",
        default=True,
        off="no-torch-range",
        help="After the gate, load each wheel under the torch releases around its own (same CUDA major: "
        "the newest patch of each minor, every newer one and --torch-range-older older ones), each "
        "checked first against that torch's exported symbols, and report the range it loads with.",
    ),
    Option(
        key="torch-range-older",
        param="torch_range_older",
        kind=Kind.INT,
        example="1",
        default=TORCH_RANGE_OLDER,
        bounds=(0, 20),
        help="How many minors older than the build's torch the range tries.",
    ),
    Option(
        key="pin",
        param="pin",
        kind=Kind.TEXT,
        example='"proven"',
        default="built",
        choices=("built", "proven"),
        help="What the wheel requires of torch: the minor it was built with (torch==2.14.*), or the "
        "contiguous range it loaded with (torch>=2.12,<2.15; needs --torch-range).",
    ),
    Option(
        key="verbose",
        param="verbose",
        kind=Kind.BOOL,
        example="true",
        default=False,
        show_default=False,
        off="quiet",
        short="-v/-q",
        help="Show cibuildwheel's full log as it runs (the run's build.log has it either way), or "
        "not: the default prints the steps, a status line at least every 15 s and the summaries.",
    ),
    Option(
        key="base-image",
        param="base_image",
        kind=Kind.TEXT,
        example='"manylinux_2_28_x86_64:local"',
        unset="cibuildwheel's pin",
        refuse_empty=True,
        help="Base for the build image [default: manylinux_2_28 pinned by cibuildwheel; "
        "tests use scripts/make-base-image].",
    ),
    Option(
        key="ca-bundle",
        param="ca_bundle",
        kind=Kind.PATH,
        example='"certs/proxy-ca.pem"',
        unset="the host's",
        help="PEM bundle trusted inside builds (TLS proxies) [default: the host's bundle].",
    ),
    Option(
        key="cuda12-image",
        param="cuda12_image",
        kind=Kind.TEXT,
        example='"nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:..."',
        refuse_empty=True,
        help="NVIDIA CUDA 12.8+ devel image (pinned by digest) whose compiler serves cu12x variants.",
    ),
)
BY_KEY = {o.key: o for o in OPTIONS}


@dataclass(frozen=True)
class ReferenceRow:
    """One option as the docs' reference shows it."""

    option: str  # the flag, with its negative when it has one: --gate/--no-gate
    config_key: str  # [tool.wheelbuild]'s key
    variable: str  # WHEELBUILD_*
    kind: str  # as a config file writes it
    default: str  # the default, or what no value means
    help: str


def _default_text(option: Option) -> str:
    value = option.default
    if value is None:
        return "false" if option.kind is Kind.BOOL else option.unset
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def reference(options: Iterable[Option] = OPTIONS) -> list[ReferenceRow]:
    """Every option's row for the docs, in help order."""
    return [
        ReferenceRow(
            option=" ".join(filter(None, (option.short, option.switch))),
            config_key=option.key,
            variable=option.env,
            kind=option.kind.value + (f": one of {', '.join(option.choices)}" if option.choices else ""),
            default=_default_text(option),
            help=option.help,
        )
        for option in options
    ]
