"""--dist on the client side: its options, the token's ways in, the sccache client config in the
secrets mount, the build container's network, the plan, and the per-server counts read back from
sccache's stats. The fleet itself runs in tests/integration/test_dist_build.py."""

from __future__ import annotations

import stat
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wheelbuild.attempt.buildlog import BuildLog
from wheelbuild.attempt.config import AttemptConfig, cibuildwheel_env, redactor_for
from wheelbuild.engine.attempt_run import write_secrets
from wheelbuild.errors import BadArgument
from wheelbuild.plan.dist import (
    CLIENT_CONFIG_FILE,
    TOKEN_ENV,
    DistTarget,
    ServerShape,
    client_config,
    dist_summary,
    dist_target,
    parse_scheduler_url,
    parse_servers,
    read_token,
)
from wheelbuild.plan.dist_plan import with_distribution
from wheelbuild.plan.memory_model import GIB, flash_attn_model, wbdemo_model
from wheelbuild.plan.planner import plan_build
from wheelbuild.report.attempt_records import attempt_record

TOKEN = "s3cr3t-dist-token-0123456789"


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("http://scheduler:10600", "http://scheduler:10600/"),
        ("https://10.0.0.5:443/", "https://10.0.0.5:443/"),
    ],
)
def test_a_scheduler_url_is_scheme_host_and_port(text: str, url: str) -> None:
    assert parse_scheduler_url(text) == url


@pytest.mark.parametrize(
    "text",
    [
        "scheduler:10600",
        "http://scheduler",
        "ftp://s:1",
        "http://u:pw@s:10600",
        "http://s:10600/api",
        "http://s:99999",
    ],
)
def test_anything_else_is_refused_with_a_remedy(text: str) -> None:
    with pytest.raises(BadArgument) as refused:
        parse_scheduler_url(text)
    assert refused.value.remedy and "pw" not in str(refused.value)


def test_servers_are_count_cores_memory_and_the_other_options_need_dist() -> None:
    assert parse_servers("2x16x64g") == ServerShape(2, 16, 64 * GIB)
    for bad in ("2x16", "0x16x64g", "2x0x1g", "twox16x64g"):
        with pytest.raises(BadArgument):
            parse_servers(bad)
    with pytest.raises(BadArgument, match="need --dist"):
        dist_target(None, "wbdist", None, None)
    assert dist_target(None, None, None, None) is None
    target = dist_target("http://s:10600", "wbdist", None, "1x4x8g")
    assert target == DistTarget("http://s:10600/", "wbdist", None, ServerShape(1, 4, 8 * GIB))


def test_the_token_comes_by_name_or_from_a_file_and_never_into_the_error(tmp_path: Path) -> None:
    target = DistTarget("http://s:10600/")
    assert read_token(target, {TOKEN_ENV: TOKEN}) == TOKEN
    with pytest.raises(BadArgument, match=TOKEN_ENV):
        read_token(target, {})
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert read_token(DistTarget("http://s:10600/", token_file=token_file), {}) == TOKEN
    token_file.write_text('two words"\n')
    with pytest.raises(BadArgument) as refused:
        read_token(DistTarget("http://s:10600/", token_file=token_file), {})
    assert "two words" not in str(refused.value) + refused.value.remedy


def test_the_client_config_is_toml_sccache_reads() -> None:
    parsed = tomllib.loads(client_config("http://s:10600/", TOKEN, "/root/.cache/sccache/dist-toolchains"))
    assert parsed["dist"]["scheduler_url"] == "http://s:10600/"
    assert parsed["dist"]["toolchains"] == []
    assert parsed["dist"]["auth"] == {"type": "token", "token": TOKEN}


def test_the_token_reaches_the_container_only_in_the_secret_client_config(
    make_config: Callable[..., AttemptConfig], tmp_path: Path
) -> None:
    config = make_config(dist=DistTarget("http://wbdist-scheduler:10600/", network="wbdist"))
    env = cibuildwheel_env(config, tmp_path)
    assert "--network=wbdist" in env["CIBW_CONTAINER_ENGINE"]
    assert not any(TOKEN in value for value in env.values())
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    write_secrets(config, {TOKEN_ENV: TOKEN}, secrets_dir)
    written = secrets_dir / CLIENT_CONFIG_FILE
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert tomllib.loads(written.read_text())["dist"]["auth"]["token"] == TOKEN
    # Any line that would carry it is masked on its way to the log and the terminal.
    assert TOKEN not in redactor_for(config, {TOKEN_ENV: TOKEN})(f"dist auth {TOKEN} failed")
    without = make_config()
    assert "--network" not in cibuildwheel_env(without, tmp_path)["CIBW_CONTAINER_ENGINE"]


def test_the_dist_plan_frees_max_jobs_from_the_device_compiles_memory() -> None:
    """flash-attn in 20 GiB on 2 CPUs: the static plan runs 2 units at once, bound by their
    whole peaks; with two 16-core servers holding cicc and ptxas, only the local steps count."""
    static = plan_build(budget=20 * GIB, cpus=2.0, archs=2, model=flash_attn_model())
    dist = with_distribution(static, ServerShape(2, 16, 64 * GIB))
    assert dist.max_jobs > static.max_jobs
    assert dist.nvcc_threads == 1 and dist.admission_budget is None
    assert dist.predicted_peak <= dist.memory  # the local parts of MAX_JOBS units fit
    assert "bound: local memory" in dist.reasons[-2]
    assumed = with_distribution(static, None)
    assert "assumed" in assumed.reasons[-2] and "bound:" in assumed.reasons[-2]


@settings(max_examples=30, deadline=None)
@given(budget_gib=st.integers(4, 128), cpus=st.integers(1, 64), servers=st.integers(1, 8))
def test_the_dist_plan_always_fits_the_local_parts(budget_gib: int, cpus: int, servers: int) -> None:
    static = plan_build(budget=budget_gib * GIB, cpus=float(cpus), archs=2, model=flash_attn_model())
    dist = with_distribution(static, ServerShape(servers, 16, 64 * GIB))
    assert 1 <= dist.max_jobs <= len(flash_attn_model().units)
    assert dist.max_jobs == 1 or dist.predicted_peak <= dist.memory


SHOW_STATS_WITH_DIST = """\
Compile requests                     24
Cache misses                         12
Failed distributed compilations       1
Successful distributed compiles
  172.25.0.4:10501                    6
  172.25.0.5:10501                    5
Non-cacheable compilations            2
"""


def test_per_server_counts_are_read_from_sccaches_stats_and_reported(tmp_path: Path) -> None:
    progress = BuildLog()
    for line in ["Building cp311-manylinux_x86_64 wheel", *SHOW_STATS_WITH_DIST.splitlines()]:
        progress.feed(line)
    assert progress.dist_seen
    assert progress.dist_by_server == {"172.25.0.4:10501": 6, "172.25.0.5:10501": 5}
    assert progress.dist_local == 1
    line = dist_summary(tuple(progress.dist_by_server.items()), progress.dist_local)
    assert line == (
        "--dist: 11 compiles on build servers (172.25.0.4:10501 6, 172.25.0.5:10501 5), "
        "1 ran locally instead: 92% remote"
    )
    plain = BuildLog()
    for line in ["Compile requests 3", "Cache misses 1"]:
        plain.feed(line)
    assert not plain.dist_seen and dist_summary(None, 0).startswith("--dist: sccache printed no")


def test_the_report_keeps_the_counts_and_the_remote_share(tmp_path: Path) -> None:
    from wheelbuild.attempt.outcome import AttemptResult

    plan = plan_build(budget=6 * GIB, cpus=2.0, archs=2, model=wbdemo_model())
    result = AttemptResult(
        attempt=1, returncode=0, duration_s=1.0, wheels=(), memory_limit_seen=None,
        log_path=tmp_path / "build.log", dist_by_server=(("a:1", 6), ("b:1", 3)), dist_local=1,
    )  # fmt: skip
    record = attempt_record(plan, result, []).to_json()
    assert (record["dist_by_server"], record["dist_local"], record["dist_remote_share"]) == (
        {"a:1": 6, "b:1": 3},
        1,
        0.9,
    )
    local = AttemptResult(
        attempt=1,
        returncode=0,
        duration_s=1.0,
        wheels=(),
        memory_limit_seen=None,
        log_path=tmp_path / "b.log",
    )
    assert "dist_by_server" not in attempt_record(plan, local, []).to_json()
