"""wheelbuild.plan.calibration: sampling across families, scaling the built-in profile by measurements,
and the files it writes (pure; the compiles themselves are in tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelbuild.pipeline import preflight
from wheelbuild.plan.calibration import (
    Measurement,
    calibrated_model,
    compare_with,
    load_calibrated,
    measurements_tsv,
    profile_path,
    profile_tsv,
    read_measurements,
    sample_units,
)
from wheelbuild.plan.memory_model import GIB, MIB, flash_attn_model, parse_profile
from wheelbuild.recipes import resolve_recipe
from wheelbuild.recipes.flash_attn import UNITS
from wheelbuild.spec.build_spec import Resources

FAMILIES = UNITS.families
MODEL = flash_attn_model()
FWD32 = "csrc/flash_attn/src/flash_fwd_hdim32_bf16_causal_sm80.cu"
BWD32 = "csrc/flash_attn/src/flash_bwd_hdim32_bf16_causal_sm80.cu"


def test_sample_one_is_the_cheapest_kernel_and_more_reach_every_family() -> None:
    assert [u.name for u in sample_units(MODEL, FAMILIES, 1, 2)] == [FWD32]
    two = [u.name for u in sample_units(MODEL, FAMILIES, 2, 2)]
    assert two == [FWD32, BWD32]
    three = [u.name.rsplit("/", 1)[-1] for u in sample_units(MODEL, FAMILIES, 3, 2)]
    assert three[2].startswith("flash_fwd_split_")
    assert len(sample_units(MODEL, FAMILIES, 500, 2)) == 72  # every kernel; flash_api.cpp is host code


def test_a_family_is_scaled_by_its_measured_ratio_and_unsampled_ones_by_the_worst() -> None:
    fwd = next(u for u in MODEL.units if u.name == FWD32)
    measured = Measurement(
        unit=FWD32, archs=(100,), threads=1, peak=int(fwd.peak(1, 1) * 1.2), wall_s=fwd.wall(1, 1) * 0.5
    )
    model = calibrated_model(MODEL, [measured], FAMILIES, "13.1")
    scaled = {u.name: u for u in model.units}
    assert scaled[FWD32].peak(1, 1) == pytest.approx(fwd.peak(1, 1) * 1.2, rel=1e-3)
    assert scaled[FWD32].wall(1, 1) == pytest.approx(fwd.wall(1, 1) * 0.5)
    bwd = next(u for u in MODEL.units if u.name == BWD32)
    assert scaled[BWD32].peak(1, 2) == pytest.approx(bwd.peak(1, 2) * 1.2, rel=1e-3)
    assert "not sampled" in scaled[BWD32].basis and "measured on CUDA 13.1" in scaled[FWD32].basis
    # Only the unit measured is marked so (admission then adds MEASURED_MARGIN, not ADMIT_MARGIN).
    assert [u.name for u in model.units if u.measured] == [FWD32]
    host = "csrc/flash_attn/flash_api.cpp"
    assert scaled[host] == next(u for u in MODEL.units if u.name == host)
    assert model.source.startswith("calibrated on CUDA 13.1 from 1 sampled unit")


def test_a_cheaper_sample_lowers_its_own_unit_but_never_the_others_memory() -> None:
    fwd = next(u for u in MODEL.units if u.name == FWD32)
    cheaper = Measurement(
        unit=FWD32, archs=(100,), threads=1, peak=int(fwd.peak(1, 1) * 0.8), wall_s=fwd.wall(1, 1) * 0.6
    )
    scaled = {u.name: u for u in calibrated_model(MODEL, [cheaper], FAMILIES, "13.1").units}
    assert scaled[FWD32].peak(1, 1) == pytest.approx(fwd.peak(1, 1) * 0.8, rel=1e-3)
    for original in MODEL.units:
        if original.name != FWD32 and "flash_api" not in original.name:
            assert scaled[original.name].peak(1, 2) == original.peak(1, 2), original.name  # floor kept
            assert scaled[original.name].wall(1, 2) == pytest.approx(
                original.wall(1, 2) * 0.6
            )  # time may drop


def test_oom_killed_rows_do_not_scale_and_alone_are_an_error() -> None:
    killed = Measurement(unit=FWD32, archs=(100, 120), threads=2, peak=8 * GIB, wall_s=10.0, oom=True)
    with pytest.raises(ValueError, match="nothing to calibrate"):
        calibrated_model(MODEL, [killed], FAMILIES, "13.1")


def test_profile_and_measurements_round_trip_through_their_files(tmp_path: Path) -> None:
    rows = [
        Measurement(unit=FWD32, archs=(100, 120), threads=1, peak=4200 * MIB, wall_s=201.5),
        Measurement(unit=BWD32, archs=(100, 120), threads=2, peak=20 * GIB, wall_s=99.0, oom=True),
    ]
    text = measurements_tsv(rows, ["a header"])
    assert read_measurements(text) == rows and "\t>=20480\t" in text
    model = calibrated_model(MODEL, rows, FAMILIES, "13.1")
    path = profile_path(tmp_path, "flash-attn", "2.8.3", "13.1")
    path.parent.mkdir(parents=True)
    path.write_text(profile_tsv(model, ["calibrated"]))
    again = load_calibrated(tmp_path, "flash-attn", "2.8.3", "13.1")
    assert again is not None and again.source == model.source
    assert [u.name for u in again.units] == [u.name for u in model.units]
    assert parse_profile(path.read_text(), name="x").reserve == MODEL.reserve
    assert load_calibrated(tmp_path, "flash-attn", "2.8.3", "12.8") is None  # per toolkit


def test_a_profile_with_another_header_names_its_columns_as_words_not_a_list() -> None:
    with pytest.raises(ValueError) as refused:
        parse_profile("unit\tfixed_mib\n", name="edited")
    assert str(refused.value) == (
        "profile edited: its header is unit, fixed_mib, "
        "not unit, fixed_mib, per_arch_mib, front_s, per_arch_s, basis, measured"
    )


def test_the_planner_prefers_a_calibrated_profile(own_cache_dir: Path) -> None:
    recipe = resolve_recipe("flash-attn", version="2.8.3")
    before = preflight.plan_for(recipe, (100, 120), Resources(memory=64 * GIB, cpus=128))
    fwd = next(u for u in MODEL.units if u.name == FWD32)
    heavier = Measurement(
        unit=FWD32, archs=(100, 120), threads=1, peak=int(fwd.peak(1, 2) * 1.5), wall_s=200.0
    )
    path = profile_path(own_cache_dir, "flash-attn", "2.8.3", "13.1")
    path.parent.mkdir(parents=True)
    path.write_text(profile_tsv(calibrated_model(MODEL, [heavier], FAMILIES, "13.1"), []))
    after = preflight.plan_for(recipe, (100, 120), Resources(memory=64 * GIB, cpus=128))
    assert after.max_jobs < before.max_jobs  # 1.5x the memory per unit: fewer fit
    assert any("calibrated on CUDA 13.1" in reason for reason in after.reasons)


def test_compare_sets_our_numbers_against_a_reference_table() -> None:
    reference = "tu\tarchs\tnvcc_threads\tpeak_mib\twall_s\ncsrc/flash_attn/src/flash_fwd_hdim32_bf16_causal_sm80.cu\t100\t1\t4000\t100.0\n"
    ours = Measurement(unit=FWD32, archs=(100,), threads=1, peak=4400 * MIB, wall_s=120.0)
    (line,) = compare_with([ours], reference, "ref.tsv")
    assert "peak 4400 MiB vs 4000 in ref.tsv (x1.10), wall 120.0 s vs 100.0 (x1.20)" in line


def test_a_profile_marked_a_guess_is_planned_and_admitted_as_one(tmp_path: Path) -> None:
    """A hand-made profile in the calibrated profile's place, "#@ guess yes": the plan says it is
    a guess, and the wrapper starts its units cold, as it does the default model's."""
    from wheelbuild.plan.admission import admission_costs, with_admission
    from wheelbuild.plan.planner import BLIND, plan_build

    header = "unit\tfixed_mib\tper_arch_mib\tfront_s\tper_arch_s\tbasis\n"
    text = (
        f"#@ reserve_mib 512\n{header}csrc/a.cu\t100\t200\t1\t1\twritten\ncsrc/b.cpp\t400\t0\t1\t0\twritten\n"
    )
    path = profile_path(tmp_path, "wbdemo", None, "13.1")
    path.parent.mkdir(parents=True)
    for guess, cold in (("#@ guess yes\n", 2.0), ("", 1.0)):
        path.write_text(guess + text)
        model = load_calibrated(tmp_path, "wbdemo", None, "13.1")
        assert model is not None and model.blind is bool(guess)
        plan = plan_build(budget=4 * GIB, cpus=2, archs=2, model=model)
        assert (BLIND in plan.reasons) is bool(guess)
        assert admission_costs(with_admission(plan))["learn"] == {"cold": cold}
