"""wheelbuild.doctor.checks: every check's ok / warn / fail path from plain facts, and its edges (HTTP reach,
the CA bundle, free disk) against local stand-ins: a server on 127.0.0.1, files in tmp_path."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import certifi
import pytest
from wheelbuild.doctor import checks
from wheelbuild.doctor import facts as doctor_facts
from wheelbuild.doctor.checks import Check, DockerFacts
from wheelbuild.doctor.facts import CaFacts, DiskFacts, Reach

GIB = 1024**3

HEALTHY = DockerFacts(
    host="unix:///var/run/docker.sock",
    version="20.10.24",
    api_version="1.41",
    cgroup_version="1",
    cgroup_driver="cgroupfs",
    runtimes=("io.containerd.runc.v2", "runc"),
    root_dir="/var/lib/docker",
    probe_image="wheelbuild-cuda131:0123456789abcdef",
    probe_limit="67108864",
    base_pin="quay.io/pypa/manylinux_2_28_x86_64@sha256:" + "e0" * 32,
    base_pin_present=True,
)
NO_DOCKER = DockerFacts(host="unix:///nonexistent.sock", error="No such file or directory")


def _remedied(check: Check) -> Check:
    """Every warn and fail says what to do; an ok says nothing more."""
    assert bool(check.remedy) == (check.status != "ok"), check
    return check


# --- docker -------------------------------------------------------------------------------------


def test_docker_answering_rootful_is_ok_with_its_version() -> None:
    check = _remedied(checks.check_docker(HEALTHY))
    assert check.status == "ok"
    assert check.found == "Docker 20.10.24 (API 1.41) at unix:///var/run/docker.sock, rootful"


def test_no_docker_daemon_is_a_fail_naming_the_host() -> None:
    check = _remedied(checks.check_docker(NO_DOCKER))
    assert check.status == "fail"
    assert "unix:///nonexistent.sock" in check.found and "DOCKER_HOST" in check.remedy


def test_rootless_on_cgroup_v1_is_a_warn_and_on_v2_ok() -> None:
    assert _remedied(checks.check_docker(replace(HEALTHY, rootless=True))).status == "warn"
    check = _remedied(checks.check_docker(replace(HEALTHY, rootless=True, cgroup_version="2")))
    assert check.status == "ok" and "rootless" in check.found


# --- memory limit -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit"),
    [("67108864\n", 67108864), ("max", None), ("", None), (None, None), ("9223372036854771712", None)],
)
def test_parse_limit_reads_bytes_and_every_form_of_no_limit(text: str | None, limit: int | None) -> None:
    assert checks.parse_limit(text) == limit


def test_memory_limit_read_back_is_ok() -> None:
    check = _remedied(checks.check_memory_limit(HEALTHY, "hybrid"))
    assert check.status == "ok"
    assert check.found == (
        "cgroup v1 (driver cgroupfs, host hybrid); a container given --memory 64.0 MiB reads 64.0 MiB "
        "back inside (wheelbuild-cuda131:0123456789abcdef)"
    )


@pytest.mark.parametrize("seen", ["max", "9223372036854771712", "134217728"])
def test_memory_limit_not_applied_is_a_fail(seen: str) -> None:
    check = _remedied(checks.check_memory_limit(replace(HEALTHY, probe_limit=seen)))
    assert check.status == "fail"
    assert "Docker ignores --memory" in check.found and "rootful" in check.remedy


def test_memory_probe_that_could_not_run_is_a_fail_with_its_error() -> None:
    check = _remedied(
        checks.check_memory_limit(replace(HEALTHY, probe_limit=None, probe_error="exit 127: sh"))
    )
    assert check.status == "fail" and "exit 127: sh" in check.found


def test_no_local_image_to_probe_with_is_a_warn_never_a_pull() -> None:
    check = _remedied(checks.check_memory_limit(replace(HEALTHY, probe_image="", probe_limit=None)))
    assert check.status == "warn"
    assert "no local image" in check.found and "wheelbuild image build" in check.remedy


def test_docker_dependent_checks_warn_when_docker_is_down() -> None:
    for check in (
        checks.check_memory_limit(NO_DOCKER),
        checks.check_nvidia(NO_DOCKER, None),
        checks.check_base_image(NO_DOCKER),
        checks.check_disk("disk-docker", "Docker's root", None),
    ):
        assert _remedied(check).status == "warn"
        assert "no Docker daemon answered" in check.found


# --- nvidia -------------------------------------------------------------------------------------


def test_nvidia_runtime_and_a_gpu_is_ok() -> None:
    facts = replace(HEALTHY, runtimes=("nvidia", "runc"))
    check = _remedied(checks.check_nvidia(facts, ("GPU 0: NVIDIA H200 (UUID: GPU-1)",)))
    assert check.status == "ok" and "NVIDIA H200" in check.found


def test_nvidia_runtime_without_a_gpu_is_a_warn() -> None:
    facts = replace(HEALTHY, runtimes=("nvidia", "runc"))
    assert _remedied(checks.check_nvidia(facts, ())).status == "warn"
    assert _remedied(checks.check_nvidia(facts, None)).status == "warn"


@pytest.mark.parametrize("gpus", [None, (), ("GPU 0: NVIDIA B200",)])
def test_no_nvidia_runtime_is_a_warn_not_a_fail(gpus: tuple[str, ...] | None) -> None:
    check = _remedied(checks.check_nvidia(HEALTHY, gpus))
    assert check.status == "warn"
    assert "no NVIDIA runtime" in check.found and "compiling needs no GPU" in check.remedy


# --- disk ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "status"),
    [(100 * GIB, "ok"), (40 * GIB, "ok"), (40 * GIB - 1, "warn"), (10 * GIB, "warn"), (10 * GIB - 1, "fail")],
)
def test_disk_thresholds(free: int, status: str) -> None:
    check = _remedied(checks.check_disk("disk-cache", "the wheelbuild cache", DiskFacts("/c", free)))
    assert check.status == status
    assert check.found.endswith("free in the wheelbuild cache /c")


def test_disk_of_a_remote_daemon_is_a_warn() -> None:
    check = _remedied(checks.check_disk("disk-docker", "Docker's root", DiskFacts("/var/lib/docker", None)))
    assert check.status == "warn" and "not on this machine" in check.found


def test_disk_facts_of_a_cache_not_made_yet_reads_its_nearest_parent(tmp_path: Path) -> None:
    facts = doctor_facts.disk_facts(tmp_path / "not" / "yet")
    assert facts.path == str(tmp_path / "not" / "yet")
    assert facts.free is not None and facts.free > 0


def test_docker_root_not_on_this_machine_has_no_free_figure(tmp_path: Path) -> None:
    assert doctor_facts.docker_root_disk(str(tmp_path / "elsewhere")).free is None
    assert doctor_facts.docker_root_disk(str(tmp_path)).free is not None


# --- CA bundle ----------------------------------------------------------------------------------


def test_a_real_pem_bundle_is_ok_with_its_certificate_count() -> None:
    facts = doctor_facts.ca_facts(Path(certifi.where()))
    assert facts.exists and facts.given and facts.certificates > 50
    check = _remedied(checks.check_ca_bundle(facts))
    assert check.status == "ok" and "WHEELBUILD_CA_BUNDLE" in check.found


def test_a_missing_bundle_that_was_given_is_a_fail(tmp_path: Path) -> None:
    check = _remedied(checks.check_ca_bundle(doctor_facts.ca_facts(tmp_path / "nope.pem")))
    assert check.status == "fail" and "does not exist" in check.found


@pytest.mark.parametrize("content", ["", "not a certificate\n", "-----BEGIN CERTIFICATE-----\nAAAA\n"])
def test_a_file_that_is_no_pem_bundle_is_a_fail(tmp_path: Path, content: str) -> None:
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(content)
    facts = doctor_facts.ca_facts(bundle)
    check = _remedied(checks.check_ca_bundle(facts))
    assert check.status == "fail" and "not a usable PEM bundle" in check.found


def test_no_host_bundle_and_none_given_is_a_warn() -> None:
    check = _remedied(checks.check_ca_bundle(CaFacts(None, given=False)))
    assert check.status == "warn" and "WHEELBUILD_CA_BUNDLE" in check.remedy


def test_ca_bundle_with_certificates_but_an_error_is_a_fail() -> None:
    facts = CaFacts(Path("/b.pem"), given=True, exists=True, certificates=0)
    assert checks.check_ca_bundle(facts).status == "fail"


# --- reach --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reach", "status"),
    [
        (Reach("https://i/torch/", status=200), "ok"),
        (Reach("https://i/torch/", status=301), "ok"),
        (Reach("https://i/torch/", status=404), "fail"),
        (Reach("https://i/torch/", status=401), "fail"),
        (Reach("https://i/torch/", status=503), "fail"),
        (Reach("https://i/torch/", error="Name or service not known"), "fail"),
    ],
)
def test_torch_index_and_pypi_unreachable_are_fails(reach: Reach, status: str) -> None:
    for check in (checks.check_torch_index(reach), checks.check_pypi(reach)):
        assert _remedied(check).status == status


def test_refused_credentials_are_named() -> None:
    check = checks.check_torch_index(Reach("https://***@i/torch/", status=403))
    assert "credentials missing or refused" in check.found and "user:token" in check.remedy


def test_unreachable_cuda_downloads_are_a_warn_with_both_remedies() -> None:
    check = _remedied(checks.check_cuda_downloads(Reach("https://nv/redist/", error="timed out")))
    assert check.status == "warn"
    assert "WHEELBUILD_CUDA_REDIST_URL" in check.remedy and "--cuda12-image" in check.remedy
    assert _remedied(checks.check_cuda_downloads(Reach("https://nv/redist/", status=200))).status == "ok"


def test_cuda_downloads_are_not_needed_with_a_cuda12_image() -> None:
    check = checks.check_cuda_downloads(
        Reach("https://nv/redist/", error="timed out"), "nvidia/cuda@sha256:ab"
    )
    assert check.status == "ok" and "not needed" in check.found


def test_reach_of_a_closed_port_is_an_error_not_an_exception() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    found = doctor_facts.reach(f"http://127.0.0.1:{port}/")
    assert found.status is None and found.error


def test_reach_targets_use_the_env_and_default_to_pytorch_cu130() -> None:
    assert checks.reach_targets({}, None) == {
        "torch-index": "https://download.pytorch.org/whl/cu130/torch/",
        "pypi": "https://pypi.org/simple/pip/",
        "cuda-downloads": "https://developer.download.nvidia.com/compute/cuda/redist/",
    }
    env = {"WHEELBUILD_TORCH_INDEX_URL": "https://idx/simple/", "WHEELBUILD_CUDA_REDIST_URL": "https://m/r/"}
    targets = checks.reach_targets(env, None)
    assert targets["torch-index"] == "https://idx/simple/torch/"
    assert targets["cuda-downloads"] == "https://m/r/"
    assert checks.reach_targets(env, "https://given")["torch-index"] == "https://given/torch/"


# --- sccache ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "status", "says"),
    [
        ((), "ok", "no shared storage set"),
        (
            ("SCCACHE_BUCKET", "SCCACHE_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
            "ok",
            "S3 storage set",
        ),
        (("SCCACHE_BUCKET", "SCCACHE_ENDPOINT", "SCCACHE_S3_NO_CREDENTIALS"), "ok", "S3 storage set"),
        (("SCCACHE_BUCKET", "SCCACHE_REGION"), "warn", "without AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        (("SCCACHE_BUCKET", "SCCACHE_REGION", "AWS_ACCESS_KEY_ID"), "warn", "without AWS_SECRET_ACCESS_KEY"),
        (
            ("SCCACHE_BUCKET", "SCCACHE_S3_NO_CREDENTIALS"),
            "warn",
            "without SCCACHE_REGION or SCCACHE_ENDPOINT",
        ),
        (("SCCACHE_REGION",), "warn", "SCCACHE_REGION without SCCACHE_BUCKET"),
        (("SCCACHE_REDIS_ENDPOINT", "SCCACHE_REDIS_PASSWORD"), "ok", "Redis storage set"),
        (("SCCACHE_REDIS_PASSWORD",), "warn", "Redis settings without"),
        (("SCCACHE_GHA_ENABLED", "ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN"), "ok", "GitHub Actions"),
        (("SCCACHE_GHA_ENABLED",), "warn", "SCCACHE_GHA_ENABLED without"),
        (("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), "ok", "no shared storage among them"),
    ],
)
def test_sccache_storage_complete_or_not(names: tuple[str, ...], status: str, says: str) -> None:
    check = _remedied(checks.check_sccache(names))
    assert check.status == status
    assert says in check.found


# --- base image ---------------------------------------------------------------------------------


def test_base_pin_present_is_ok_and_absent_a_warn() -> None:
    assert _remedied(checks.check_base_image(HEALTHY)).status == "ok"
    check = _remedied(checks.check_base_image(replace(HEALTHY, base_pin_present=False)))
    assert check.status == "warn" and "first build pulls it" in check.remedy


def test_base_override_is_named_and_judged_by_its_presence() -> None:
    present = replace(HEALTHY, base_override="wheelbuild-base:x", base_override_present=True)
    check = _remedied(checks.check_base_image(present))
    assert check.status == "ok" and "wheelbuild-base:x (present here) replaces the pin" in check.found
    assert _remedied(checks.check_base_image(replace(present, base_override_present=False))).status == "warn"


def test_base_override_says_where_it_was_set() -> None:
    present = replace(HEALTHY, base_override="wheelbuild-base:x", base_override_present=True)
    check = checks.check_base_image(present, "wheelbuild.toml's base-image")
    assert check.found.startswith("wheelbuild.toml's base-image wheelbuild-base:x (present here) replaces")
    assert checks.check_base_image(present).found.startswith(
        "WHEELBUILD_BASE_IMAGE/--base-image wheelbuild-base:x"
    )


def test_unreadable_base_pin_is_a_fail() -> None:
    check = _remedied(checks.check_base_image(replace(HEALTHY, base_pin="", base_pin_error="KeyError")))
    assert check.status == "fail"


# --- output -------------------------------------------------------------------------------------


def test_line_and_json_forms() -> None:
    warn = Check("nvidia", "warn", "no runtime", "install it")
    assert warn.line() == "warn  nvidia         no runtime; remedy: install it"
    assert Check("pypi", "ok", "HTTP 200").line() == "ok    pypi           HTTP 200"
    assert warn.to_json() == {
        "check": "nvidia",
        "status": "warn",
        "found": "no runtime",
        "remedy": "install it",
    }
    assert checks.failed([warn, Check("docker", "fail", "x", "y")]) == [Check("docker", "fail", "x", "y")]


def test_a_torch_index_answering_404_is_said_to_be_a_wrong_url_not_the_network() -> None:
    found = checks.check_torch_index(Reach("https://pypi.org/simpel/torch/", status=404))
    assert (found.status, found.found) == ("fail", "HTTP 404 from https://pypi.org/simpel/torch/")
    assert found.remedy.startswith("the index has no torch page there: check WHEELBUILD_TORCH_INDEX_URL")
    assert "network" not in found.remedy
