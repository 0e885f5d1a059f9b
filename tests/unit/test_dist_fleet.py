"""The sccache-dist fleet's pure parts: server sizing by memory, the configs and the start script
(the token only by placeholder), the labels the build's sweeper never selects, and the CLI's
refusals before any Docker call."""

from __future__ import annotations

import tomllib
from functools import partial
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from wheelbuild.attempt.ownership import ATTEMPT_LABEL, OWNER_LABEL, RUN_LABEL
from wheelbuild.cli.main import main
from wheelbuild.cli.seams import Seams
from wheelbuild.engine import dist_fleet
from wheelbuild.engine.dist_fleet import HEAVIEST_JOB, SERVER_RESERVE, scheduler_jobs, server_sizing
from wheelbuild.engine.docker_engine import DockerEngine
from wheelbuild.errors import BadArgument, BadMemory, BadUrl, OutOfRange
from wheelbuild.image.names import dist_image_tag

GIB = 1024**3
MIB = 1024**2


def test_scheduler_jobs_is_sccache_dist_0_16_load_weight() -> None:
    # cores + 1 + cores // 8: a job beyond that makes the server "full" (load_weight)
    assert [scheduler_jobs(n) for n in (1, 2, 7, 8, 16, 64)] == [2, 3, 8, 10, 19, 73]


def test_a_flash_attn_server_gets_the_cpus_whose_job_count_its_memory_holds() -> None:
    # 24 GiB less the reserve holds 4 bwd cicc jobs of 5949 MiB: N + 1 + N // 8 <= 4 -> N = 3
    sizing = server_sizing(memory=24 * GIB, cores=16)
    assert (sizing.cpus, sizing.max_jobs, sizing.memory_slots, sizing.slots) == (3, 4, 4, 4)
    assert sizing.job_memory == HEAVIEST_JOB.memory == 5949 * MIB
    assert "--cpus 3" in sizing.reason and "N + 1 + N // 8" in sizing.reason


def test_cores_bound_the_cpus_when_memory_is_plenty() -> None:
    sizing = server_sizing(memory=256 * GIB, cores=8.7)
    assert sizing.cpus == 8 and sizing.max_jobs == 10 and sizing.slots == 8


def test_an_explicit_job_memory_replaces_the_measured_peak() -> None:
    sizing = server_sizing(memory=GIB + SERVER_RESERVE, cores=2, job_memory=256 * MIB)
    assert (sizing.memory_slots, sizing.cpus, sizing.max_jobs) == (4, 2, 3)


def test_a_server_that_holds_fewer_than_two_jobs_is_refused_with_the_memory_it_needs() -> None:
    with pytest.raises(BadMemory) as caught:
        server_sizing(memory=8 * GIB, cores=4)
    assert "holds 1 job(s)" in caught.value.cause
    assert "--memory 11.9 GiB or more" in caught.value.remedy
    with pytest.raises(BadMemory):
        server_sizing(memory=GIB, cores=1, job_memory=0)


@given(
    memory=st.integers(min_value=0, max_value=2**40),
    cores=st.floats(min_value=1, max_value=512),
    job=st.integers(min_value=MIB, max_value=64 * GIB),
)
def test_the_scheduler_never_sends_a_server_more_jobs_than_its_memory_holds(
    memory: int, cores: float, job: int
) -> None:
    try:
        sizing = server_sizing(memory=memory, cores=cores, job_memory=job)
    except BadMemory:
        assert (memory - SERVER_RESERVE) // job < 2
        return
    assert 1 <= sizing.cpus <= int(cores)
    assert scheduler_jobs(sizing.cpus) * job <= memory - SERVER_RESERVE
    # and no larger count would still fit (cores permitting)
    assert sizing.cpus == int(cores) or scheduler_jobs(sizing.cpus + 1) * job > memory - SERVER_RESERVE


def test_configs_parse_as_toml_and_hold_the_token_only_as_a_placeholder() -> None:
    scheduler = tomllib.loads(dist_fleet.scheduler_config(10700))
    assert scheduler["public_addr"] == "0.0.0.0:10700"
    assert scheduler["client_auth"] == scheduler["server_auth"] == {"type": "token", "token": "@TOKEN@"}
    server = tomllib.loads(dist_fleet.server_config("http://wbdist-scheduler:10600"))
    assert server["public_addr"] == "@PUBLIC_IP@:10501"
    assert server["scheduler_url"] == "http://wbdist-scheduler:10600"
    assert server["builder"]["build_dir"].startswith(dist_fleet.BUILD_DIR_INSIDE)
    assert server["scheduler_auth"] == {"type": "token", "token": "@TOKEN@"}
    given_addr = tomllib.loads(
        dist_fleet.server_config("http://s:1", port=10502, public_addr="10.0.0.5:10502")
    )
    assert given_addr["public_addr"] == "10.0.0.5:10502" and given_addr["bind_address"] == "0.0.0.0:10502"


def test_the_start_script_reads_the_token_from_the_mount_by_builtins_only() -> None:
    script = dist_fleet.start_script("server")
    assert f"$(<{dist_fleet.TOKEN_INSIDE})" in script
    assert "${c//@TOKEN@/$t}" in script and "unset t" in script
    assert "umask 077; printf" in script  # a builtin: the rendered config is on no command line
    assert script.rstrip().endswith("exec sccache-dist server --config /tmp/wbdist/config.toml")
    assert "mkdir -p /tmp/wbdist /sccache-dist/build" in script
    assert "/sccache-dist" not in dist_fleet.start_script("scheduler")


def test_fleet_labels_are_never_the_builds_ownership_labels() -> None:
    """The orphan sweep selects OWNER_LABEL and the reaper RUN_LABEL: the fleet carries neither."""
    for role in ("scheduler", "server", "network", "build-dir"):
        found = dist_fleet.labels(role, "wbdist")
        assert not {OWNER_LABEL, RUN_LABEL, ATTEMPT_LABEL} & set(found)
        assert found[dist_fleet.ROLE_LABEL] == role


def test_the_dist_image_tag_is_dist_smokes_digest() -> None:
    # scripts/dist-smoke: { cat Dockerfile; echo "$build_id"; } | sha256sum | cut -c1-16
    tag = dist_image_tag(b"FROM x\n", "sha256:abc")
    assert tag == "wbdist-sccache:" + __import__("hashlib").sha256(b"FROM x\nsha256:abc\n").hexdigest()[:16]
    assert dist_image_tag(b"FROM y\n", "sha256:abc") != tag


def test_token_files_are_checked_without_showing_them(tmp_path: Path) -> None:
    good = tmp_path / "token"
    good.write_text("0123abcdef-secret\n")
    assert dist_fleet.check_token_file(good) == good.resolve()
    for content, why in (("", "is empty"), ('a"b', "does not hold one token"), ("a b", "does not hold")):
        bad = tmp_path / "bad"
        bad.write_text(content)
        with pytest.raises(BadArgument) as caught:
            dist_fleet.check_token_file(bad)
        assert why in caught.value.cause and (not content or content not in str(caught.value))
    with pytest.raises(BadArgument, match="cannot be read"):
        dist_fleet.check_token_file(tmp_path / "missing")


def _cli(*args: str, env: dict[str, str] | None = None, seams: Seams | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env, obj=seams)
    return result.exit_code, result.output


def _no_docker(**options: object) -> DockerEngine:
    raise AssertionError("Docker was asked")


def test_dist_server_refuses_bad_input_before_docker(tmp_path: Path) -> None:
    cli = partial(_cli, seams=Seams(engine=_no_docker))
    token = tmp_path / "token"
    token.write_text("s3cr3t-token-value")
    base = ["dist-server", "--token-file", str(token)]
    code, out = cli(*base, "--memory", "4g")
    assert code == BadMemory.exit_code and "holds 0 job(s)" in out and "remedy" in out.lower()
    code, out = cli(*base, "--memory", "lots")
    assert code == BadMemory.exit_code and "not understood" in out
    code, out = cli(*base, "--memory", "16g", "--scheduler", "wbdist-scheduler")
    assert code == BadUrl.exit_code and "not a scheduler URL" in out
    code, out = cli(*base, "--memory", "16g", "--name", "bad name")
    assert code == BadArgument.exit_code and "not a Docker name" in out
    code, out = cli(*base, "--memory", "16g", "--cpus", "0")
    assert code == OutOfRange.exit_code
    code, out = cli(
        "dist-server", "--memory", "16g", env={"WHEELBUILD_DIST_TOKEN_FILE": str(tmp_path / "no")}
    )
    assert code == BadArgument.exit_code and "cannot be read" in out
    code, out = cli("dist-server", "--memory", "16g")
    assert code == 2 and "--token-file" in out
    assert "s3cr3t-token-value" not in out


def test_dist_scheduler_takes_the_token_file_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: dict[str, object] = {}
    # No Docker here: the engine wraps a stand-in client, which start_scheduler's fake ignores.
    fleet = Seams(engine=lambda **options: DockerEngine(object(), **options))
    cli = partial(_cli, seams=fleet)
    monkeypatch.setattr(dist_fleet, "start_scheduler", lambda client, **kw: started.update(kw))
    token = tmp_path / "token"
    token.write_text("s3cr3t-token-value")
    code, out = cli(
        "dist-scheduler", "--image", "wbdist-sccache:x", "--port", "10700", "--network", "wbdist-t",
        env={"WHEELBUILD_DIST_TOKEN_FILE": str(token)},
    )  # fmt: skip
    assert code == 0, out
    assert started["token_file"] == token and started["port"] == 10700 and started["network"] == "wbdist-t"
    assert "http://wbdist-scheduler:10700" in out and "s3cr3t-token-value" not in out
    code, out = cli("dist-scheduler", "--image", "i", env={"WHEELBUILD_DIST_TOKEN_FILE": str(tmp_path / "e")})
    assert code == BadArgument.exit_code and "cannot be read" in out


COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "sccache-dist" / "compose.yaml"


def _compose_lines() -> set[str]:
    return {line.strip() for line in COMPOSE.read_text().splitlines()}


def test_the_compose_file_starts_what_dist_fleet_starts() -> None:
    """compose.yaml's scripts and configs are dist_fleet's, $ written $$ for compose; the
    server's privileges are SERVER_CAPS, its seccomp profile and unmasked system paths."""
    lines = _compose_lines()
    for role in ("scheduler", "server"):
        for line in dist_fleet.start_script(role).splitlines():
            assert line.replace("$", "$$").strip() in lines, (role, line)
    server = dist_fleet.server_config("http://scheduler:10600")
    for line in (*dist_fleet.scheduler_config().splitlines(), *server.splitlines()):
        if not line.startswith('public_addr = "@PUBLIC_IP@'):
            assert line.strip() in lines, line
    assert 'public_addr = "${WBDIST_SERVER_PUBLIC_ADDR:-@PUBLIC_IP@:10501}"' in lines
    assert f"cap_add: [{', '.join(dist_fleet.SERVER_CAPS)}]" in lines
    assert f"- seccomp=../../images/{dist_fleet.SECCOMP_PROFILE}" in lines
    assert "- systempaths=unconfined" in lines and lines >= {"cap_drop: [ALL]", "target: /run/wbdist/token"}
    # the default server size is the rule's answer
    sizing = server_sizing(memory=24 * GIB, cores=64)
    assert "cpus: ${WBDIST_SERVER_CPUS:-" + str(sizing.cpus) + "}" in lines
    assert "mem_limit: ${WBDIST_SERVER_MEMORY:-24g}" in lines
