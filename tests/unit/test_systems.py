"""Systems as data (hardware/system.py, hardware/systems/*.toml): every packaged file loads and
cites a source for each figure, the figures agree with the GPU catalog, user directories add and
override systems beside GPU files, malformed files name their file and field, and the default
system of a GPU without one reproduces what the performance model assumed before."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from whichgpu.errors import CatalogError, InputError, UnknownNameError
from whichgpu.hardware.catalog import ENV_VAR, Catalog, load_catalog, read_toml
from whichgpu.hardware.system import (
    SYSTEMS_DIR,
    Pcie,
    ScaleOut,
    ScaleUp,
    System,
    Systems,
    default_system,
    load_systems,
    peer_access,
    resolve_system,
    synthesised_system,
)
from whichgpu.hardware.system_files import validate_raw


def _packaged() -> tuple[Systems, Catalog]:
    saved = os.environ.pop(ENV_VAR, None)
    try:
        return load_systems(), load_catalog()
    finally:
        if saved is not None:
            os.environ[ENV_VAR] = saved


SYSTEMS, CATALOG = _packaged()
PACKAGED = list(SYSTEMS)


def by_id(s: System) -> str:
    return s.id


@pytest.fixture(autouse=True)
def _no_env_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


# --------------------------------------------------------------------------- packaged files


def test_every_packaged_file_validates_and_is_named_after_its_id() -> None:
    files = sorted(SYSTEMS_DIR.glob("*.toml"))
    assert len(files) == len(SYSTEMS) >= 14
    for p in files:
        raw = read_toml(p)
        validate_raw(str(p), raw)
        assert p.stem == raw["id"], f"{p.name} holds id {raw['id']!r}"
    assert len(set(SYSTEMS.ids())) == len(SYSTEMS)


def _numeric_paths(s: System) -> list[str]:
    """Walk the dataclass fields: every int/float figure (bools are switches, strings names)."""
    paths = ["gpus_per_node"]
    for name in ("scaleup", "pcie", "scaleout"):
        sec = getattr(s, name)
        if sec is not None:
            paths += [f"{name}.{f.name}" for f in dataclasses.fields(sec)
                      if isinstance(getattr(sec, f.name), (int, float)) and not isinstance(getattr(sec, f.name), bool)]
    return paths


@pytest.mark.parametrize("system", PACKAGED, ids=by_id)
def test_every_numeric_figure_has_a_source_of_its_own(system: System) -> None:
    numeric = _numeric_paths(system)
    assert len(numeric) >= 4  # gpus_per_node and at least pcie.gen, lanes, latency_us
    for path in numeric:
        src = system.sources.get(path, "")
        assert len(src) > 10, f"{system.id}: {path} has no [sources] key of its own"
    # every figure, numeric or not, resolves to a source (its own key, its section's or the default)
    assert all(system.source_of(p) for p in system.figures())
    assert "default" in system.sources


@pytest.mark.parametrize("system", [s for s in PACKAGED if s.gpu is not None], ids=by_id)
def test_scaleup_and_pcie_agree_with_the_gpu_catalog(system: System) -> None:
    gpu = CATALOG.get(system.gpu or "")
    assert system.scaleup is not None, "every packaged system built from one GPU has its NVLink"
    assert system.scaleup.gbps_per_direction == gpu.scaleup_gbps_per_direction
    assert system.scaleup.domain_gpus == gpu.scaleup_domain_gpus
    assert system.scaleup.domain_gpus == system.gpus_per_node  # one all-to-all domain per node
    if gpu.pcie_gen is not None:
        assert system.pcie.gen == gpu.pcie_gen
    assert system.scaleout is not None
    # The network is always the slower link: NVLink per GPU >> its share of the NICs.
    assert system.scaleout.gbps_per_gpu < system.scaleup.gbps_per_direction / 2


# NIC line rates in Gb/s by fabric, for the arithmetic below (vendor pages cited in the files).
@pytest.mark.parametrize(("sid", "nic_gbit", "rails", "gpus", "per_gpu"), [
    ("dgx-1-v100", 100, 4, 8, 6.25),        # 4 x EDR 100 Gb/s = 50 GB/s / 8
    ("dgx-2", 100, 8, 16, 6.25),            # 8 x EDR 100 Gb/s = 100 GB/s / 16
    ("dgx-a100", 200, 8, 8, 25.0),          # 8 x HDR 200 Gb/s = 200 GB/s / 8
    ("dgx-a100-320gb", 200, 8, 8, 25.0),
    ("dgx-h100", 400, 8, 8, 50.0),          # 8 x NDR 400 Gb/s = 400 GB/s / 8
    ("dgx-h200", 400, 8, 8, 50.0),
    ("hgx-b200", 400, 8, 8, 50.0),
    ("gb200-nvl72", 400, 72, 72, 50.0),     # one ConnectX-7 per GPU, 72 per rack
    ("aws-p4d-24xlarge", 100, 4, 8, 6.25),  # 400 Gbps EFA = 4 x 100
    ("aws-p4de-24xlarge", 100, 4, 8, 6.25),
    ("aws-p5-48xlarge", 100, 32, 8, 50.0),  # 3,200 Gbps EFA = 32 x 100
    ("gcp-a3-highgpu-8g", 200, 4, 8, 12.5),  # GPUDirect-TCPX 4 x 200 Gbps
    ("azure-nd-h100-v5", 400, 8, 8, 50.0),  # 8 x NDR 400 Gb/s
    ("pcie-server-8gpu", 100, 1, 8, 1.5625),  # one 100 GbE RoCE NIC
])
def test_network_per_gpu_is_node_total_over_gpus(sid: str, nic_gbit: float, rails: int, gpus: int,
                                                  per_gpu: float) -> None:
    s = SYSTEMS.get(sid)
    assert s.scaleout is not None
    assert (s.scaleout.rails, s.gpus_per_node) == (rails, gpus)
    assert s.scaleout.gbps_per_gpu == pytest.approx(nic_gbit * rails / 8 / gpus) == per_gpu


def test_generic_systems_take_any_pcie_card_and_have_no_nvlink() -> None:
    generic = [s for s in PACKAGED if s.gpu is None]
    assert {s.id for s in generic} >= {"pcie-server-8gpu", "workstation-1gpu", "workstation-2gpu", "workstation-4gpu"}
    for s in generic:
        assert s.scaleup is None and s.default_for == ()
    assert [SYSTEMS.get(f"workstation-{n}gpu").gpus_per_node for n in (1, 2, 4)] == [1, 2, 4]
    assert all(SYSTEMS.get(f"workstation-{n}gpu").scaleout is None for n in (1, 2, 4))


EXPECTED_DEFAULTS = {
    "a100-sxm4-80gb": "dgx-a100", "a100-sxm4-40gb": "dgx-a100-320gb", "h100-sxm5-80gb": "dgx-h100",
    "h200-sxm-141gb": "dgx-h200", "b200": "hgx-b200", "gb200": "gb200-nvl72",
    "v100-sxm2-16gb": "dgx-1-v100", "v100-sxm2-32gb": "dgx-1-v100", "v100-sxm3-32gb": "dgx-2",
    "mi300x": "azure-nd-mi300x-v5", "b300": "hgx-b300",
}


def test_amd_instinct_platforms_carry_their_infinity_fabric_and_mi300x_its_cloud_network() -> None:
    # MI325X and MI355X had no scale-up bandwidth, so their plans ran tensor parallelism over PCIe
    for gid, per_direction in (("mi300x", 448), ("mi325x", 448), ("mi355x", 537.6)):
        s = default_system(CATALOG.get(gid), SYSTEMS)
        assert s.scaleup is not None and s.scaleup.gbps_per_direction == per_direction
        assert s.scaleup.domain_gpus == 8
    mi300x = default_system(CATALOG.get("mi300x"), SYSTEMS)
    assert mi300x.scaleout is not None and mi300x.scaleout.kind == "infiniband-ndr"
    assert mi300x.scaleout.gbps_per_gpu == 50 and mi300x.scaleout.rails == 8


def test_b300_runs_in_its_hgx_board_with_800_gbps_per_gpu() -> None:
    s = default_system(CATALOG.get("b300"), SYSTEMS)  # was synthesised: InfiniBand HDR, 25 GB/s per GPU
    assert s.id == "hgx-b300" and s.scaleout is not None and s.scaleout.gbps_per_gpu == 100
    assert s.scaleup is not None and s.scaleup.gbps_per_direction == 900 and s.pcie.gen == 6


def test_on_a_full_mesh_a_group_reaches_its_peers_over_its_own_direct_links_only() -> None:
    from whichgpu.parallel.comm import node_link
    from whichgpu.perf.params import load_params

    params = load_params()
    mi300x = default_system(CATALOG.get("mi300x"), SYSTEMS)
    assert mi300x.scaleup is not None and mi300x.scaleup.topology == "full-mesh"
    whole = node_link(mi300x, 8, params).bytes_per_s
    pair, four = node_link(mi300x, 2, params), node_link(mi300x, 4, params)
    assert pair.bytes_per_s == pytest.approx(whole / 7) and four.bytes_per_s == pytest.approx(whole * 3 / 7)
    assert "1 of each GPU's 7 direct links" in pair.text
    # the synthesised AMD platforms are meshes too; NVSwitch domains give any pair the whole bandwidth
    mi355x = synthesised_system(CATALOG.get("mi355x"))
    assert mi355x.scaleup is not None and mi355x.scaleup.topology == "full-mesh"
    mi250x = synthesised_system(CATALOG.get("mi250x-gcd"))  # uneven links between dies: no full mesh
    assert mi250x.scaleup is not None and mi250x.scaleup.topology == "switch"
    dgx = SYSTEMS.get("dgx-h100")
    assert dgx.scaleup is not None and dgx.scaleup.topology == "switch"
    assert node_link(dgx, 2, params).bytes_per_s == node_link(dgx, 8, params).bytes_per_s


def test_default_for_names_exactly_the_expected_gpus() -> None:
    claimed = {gid: s.id for s in PACKAGED for gid in s.default_for}
    assert claimed == EXPECTED_DEFAULTS
    for gid, sid in EXPECTED_DEFAULTS.items():
        assert default_system(CATALOG.get(gid), SYSTEMS).id == sid


def test_no_pcie_card_has_a_packaged_default() -> None:
    for gpu in CATALOG:
        if "pcie" in gpu.form_factor.lower():
            assert SYSTEMS.default_of(gpu.id) is None, gpu.id


@pytest.mark.parametrize(("name", "sid"), [
    ("dgx-h100", "dgx-h100"), ("DGX H100", "dgx-h100"), ("p5.48xlarge", "aws-p5-48xlarge"),
    ("p4d", "aws-p4d-24xlarge"), ("p4de", "aws-p4de-24xlarge"), ("DGX A100", "dgx-a100"),
    ("DGX A100 40GB", "dgx-a100-320gb"), ("Standard_ND96isr_H100_v5", "azure-nd-h100-v5"),
    ("NVL72", "gb200-nvl72"), ("a3-highgpu-8g", "gcp-a3-highgpu-8g"),
])
def test_systems_resolve_by_id_name_and_alias(name: str, sid: str) -> None:
    assert SYSTEMS.get(name).id == sid


def test_unknown_system_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError, match="unknown system 'dgx-h300'; did you mean 'dgx-h"):
        SYSTEMS.get("dgx-h300")


# --------------------------------------------------------------------------- defaults


def test_h100_default_is_dgx_h100() -> None:
    s = default_system(CATALOG.get("h100-sxm5-80gb"), SYSTEMS)
    assert s.id == "dgx-h100" and s.path.endswith("dgx-h100.toml")
    assert s.scaleout is not None and s.scaleout.gbps_per_gpu == 50.0


def test_pcie_card_default_is_synthesised_pcie_only_with_25_gbps_network() -> None:
    gpu = CATALOG.get("l40s")
    s = default_system(gpu, SYSTEMS)
    assert s.path == "" and s.gpu == "l40s" and s.id == "l40s-default"
    assert s.scaleup is None  # no NVLink on an L40S
    assert s.gpus_per_node == 8
    assert s.pcie == Pcie(gen=4, lanes=16, p2p=True, latency_us=4.0)
    # InfiniBand HDR: 200 Gb/s per GPU / 8 bits = 25 GB/s, the model's default network
    assert s.scaleout == ScaleOut(kind="infiniband-hdr", gbps_per_gpu=25.0, rails=8, latency_us=10.0)
    assert all(s.source_of(p) for p in s.figures())
    assert "assumed" in s.source_of("scaleout.gbps_per_gpu")


def test_bridged_pcie_card_keeps_its_two_card_nvlink() -> None:
    s = synthesised_system(CATALOG.get("a100-pcie-80gb"))
    assert s.scaleup == ScaleUp(link="NVLink 3.0 bridge between 2 cards (600 GB/s total bidirectional)",
                                generation="nvlink3", gbps_per_direction=300.0, domain_gpus=2, latency_us=4.0)
    assert "a100-pcie-80gb" in s.source_of("scaleup.gbps_per_direction")


def test_gpu_without_pcie_figures_gets_the_assumed_pcie_4_x16() -> None:
    tpu = CATALOG.get("tpu-v5e")
    assert tpu.pcie_gen is None
    s = synthesised_system(tpu)
    assert (s.pcie.gen, s.pcie.lanes) == (4, 16)
    assert "assumed" in s.source_of("pcie.gen")


def _legacy(gpu_id: str) -> tuple[object, ...]:
    """What parallel/comm.py and perf/plan.py derived from a GpuSpec before systems were data: 8 GPUs
    per node; the scale-up link over scaleup_domain_gpus or (1 for a PCIe card, else 8); PCIe
    pcie_gen or 4, pcie_lanes or 16; the ib-hdr-200 network, 25 GB/s per GPU; ring steps of
    4 us inside a node and 10 us between nodes (RING_STEP_LATENCY_S); PCIe peer-to-peer except
    on GeForce cards without peer access (since 2026-11-25, `peer_access`)."""
    spec = CATALOG.get(gpu_id)
    domain = spec.scaleup_domain_gpus or (1 if "pcie" in spec.form_factor.lower() else 8)
    up = (spec.scaleup_gbps_per_direction, domain) if spec.scaleup_gbps_per_direction else None
    return (8, up, spec.pcie_gen or 4, spec.pcie_lanes or 16, peer_access(spec), 25.0, 4.0, 10.0)


def test_geforce_cards_without_peer_access_stage_peer_traffic_in_host_memory() -> None:
    """RTX 40 and 50 series: no CUDA peer access over PCIe, in their synthesised server and in a
    generic chassis that allows it for other cards; the RTX 3090, the L40S and datacenter cards keep it."""
    no_p2p = [g.id for g in CATALOG if not peer_access(g)]
    assert "rtx-4090" in no_p2p and "rtx-3090" not in no_p2p and "l40s" not in no_p2p
    assert all(CATALOG.get(g).segment == "consumer" for g in no_p2p)
    s = default_system(CATALOG.get("rtx-4090"), SYSTEMS)
    assert not s.pcie.p2p and "peer access" in s.source_of("pcie.p2p")
    chassis = SYSTEMS.get("pcie-server-8gpu")
    assert chassis.pcie.p2p
    for gpu_id, p2p in (("rtx-4090", False), ("l40s", True)):
        got = resolve_system(CATALOG.get(gpu_id), "pcie-server-8gpu", SYSTEMS)
        assert got.pcie.p2p is p2p and got.id == chassis.id
    assert resolve_system(CATALOG.get("rtx-4090"), chassis, SYSTEMS) is resolve_system(CATALOG.get("rtx-4090"),
                                                                                      chassis, SYSTEMS)


@pytest.mark.parametrize("gpu_id", [g.id for g in CATALOG])
def test_synthesised_system_reproduces_the_legacy_assumptions(gpu_id: str) -> None:
    s = synthesised_system(CATALOG.get(gpu_id))
    up = None if s.scaleup is None else (s.scaleup.gbps_per_direction, s.scaleup.domain_gpus)
    intra_us = s.pcie.latency_us if s.scaleup is None else s.scaleup.latency_us
    assert s.scaleout is not None and s.pcie.latency_us == intra_us
    got = (s.gpus_per_node, up, s.pcie.gen, s.pcie.lanes, s.pcie.p2p, s.scaleout.gbps_per_gpu, intra_us,
           s.scaleout.latency_us)
    assert got == _legacy(gpu_id)
    assert all(s.source_of(p) for p in s.figures())


# --------------------------------------------------------------------------- resolve_system


def test_resolve_none_is_the_default() -> None:
    assert resolve_system(CATALOG.get("h200-sxm-141gb"), None, SYSTEMS).id == "dgx-h200"
    assert resolve_system(CATALOG.get("rtx-4090"), None, SYSTEMS).id == "rtx-4090-default"


def test_resolve_a_system_of_another_gpu_is_a_one_line_error_naming_both() -> None:
    with pytest.raises(InputError) as err:
        resolve_system(CATALOG.get("h100-sxm5-80gb"), "dgx-a100", SYSTEMS)
    msg = str(err.value)
    assert "\n" not in msg
    assert "dgx-a100" in msg and "a100-sxm4-80gb" in msg and "h100-sxm5-80gb" in msg
    for sid in ("dgx-h100", "aws-p5-48xlarge", "gcp-a3-highgpu-8g", "azure-nd-h100-v5"):
        assert sid in msg
    assert err.value.field == "system"


def test_resolve_generic_accepts_pcie_cards_only() -> None:
    assert resolve_system(CATALOG.get("rtx-4090"), "workstation-2gpu", SYSTEMS).id == "workstation-2gpu"
    assert resolve_system(CATALOG.get("l40s"), "8-GPU PCIe server", SYSTEMS).id == "pcie-server-8gpu"
    with pytest.raises(InputError, match="takes PCIe cards"):
        resolve_system(CATALOG.get("h100-sxm5-80gb"), "workstation-4gpu", SYSTEMS)


def test_resolve_accepts_a_listed_variant_of_the_system_gpu() -> None:
    assert resolve_system(CATALOG.get("v100-sxm2-16gb"), "DGX-1", SYSTEMS).id == "dgx-1-v100"
    with pytest.raises(InputError):
        resolve_system(CATALOG.get("v100-sxm3-32gb"), "dgx-1-v100", SYSTEMS)


def test_to_dict_has_every_figure_and_its_source() -> None:
    d = SYSTEMS.get("workstation-2gpu").to_dict()
    assert d["scaleup"] is None and d["scaleout"] is None and d["gpu"] is None
    assert set(d["sources"]) == {"gpus_per_node", "pcie.gen", "pcie.lanes", "pcie.p2p", "pcie.latency_us"}
    d = SYSTEMS.get("dgx-h100").to_dict()
    assert d["scaleup"]["gbps_per_direction"] == 450.0 and d["scaleout"]["rails"] == 8
    assert len(d["sources"]) == 15 and all(d["sources"].values())  # scaleup.topology: "switch" by default
    assert d["scaleup"]["topology"] == "switch"


# --------------------------------------------------------------------------- user directories


NEW_SYSTEM = """\
schema = "whichgpu.system/1"
id = "acme-cluster"
name = "Acme L40S cluster"
kind = "server"
gpu = "L40S"
gpus_per_node = 4
default_for = ["l40s"]

[pcie]
gen = 4
lanes = 16
p2p = false
latency_us = 5

[scaleout]
kind = "roce"
gbps_per_gpu = 6.25
rails = 2
latency_us = 12

[sources]
default = "Acme cluster inventory, 2026-01"
"""

H100_OVERRIDE = """\
schema = "whichgpu.system/1"
id = "dgx-h100"

[scaleout]
gbps_per_gpu = 25

[sources]
"scaleout.gbps_per_gpu" = "our fabric: 4 of the 8 rails cabled"
"""

GPU_OVERRIDE = """\
schema = "whichgpu.gpu/1"
id = "h100-sxm5-80gb"

[price]
street_usd = 12345
"""


def test_user_dir_adds_a_system_and_overrides_a_field(tmp_path: Path) -> None:
    (tmp_path / "acme.toml").write_text(NEW_SYSTEM)
    (tmp_path / "h100.toml").write_text(H100_OVERRIDE)
    found = load_systems(str(tmp_path))
    assert len(found) == len(SYSTEMS) + 1
    acme = found.get("acme-cluster")
    assert acme.gpu == "l40s"  # a GPU name resolves to its catalog id
    assert acme.scaleup is None and acme.pcie.p2p is False and acme.path.endswith("acme.toml")
    assert acme.source_of("scaleout.gbps_per_gpu") == "Acme cluster inventory, 2026-01"
    assert default_system(CATALOG.get("l40s"), found).id == "acme-cluster"

    h100 = found.get("dgx-h100")
    packaged = SYSTEMS.get("dgx-h100")
    assert h100.scaleout is not None and packaged.scaleout is not None
    assert h100.scaleout.gbps_per_gpu == 25.0
    assert dataclasses.replace(h100.scaleout, gbps_per_gpu=50.0) == packaged.scaleout  # only that field
    assert h100.scaleup == packaged.scaleup and h100.pcie == packaged.pcie
    assert h100.source_of("scaleout.gbps_per_gpu") == "our fabric: 4 of the 8 rails cabled"
    assert h100.source_of("scaleout.rails") == packaged.source_of("scaleout.rails")
    assert h100.overridden_by == (str(tmp_path / "h100.toml"),)


def test_a_user_claim_on_a_gpu_wins_over_the_packaged_default(tmp_path: Path) -> None:
    mine = NEW_SYSTEM.replace('gpu = "L40S"', 'gpu = "H100 SXM"').replace('["l40s"]', '["h100-sxm5-80gb"]')
    (tmp_path / "acme.toml").write_text(mine)
    found = load_systems(str(tmp_path))
    assert default_system(CATALOG.get("h100-sxm5-80gb"), found).id == "acme-cluster"
    assert default_system(CATALOG.get("h100-sxm5-80gb"), SYSTEMS).id == "dgx-h100"


def test_override_without_a_source_is_marked_as_unsourced_not_given_the_packaged_one(tmp_path: Path) -> None:
    (tmp_path / "h100.toml").write_text('schema = "whichgpu.system/1"\nid = "dgx-h100"\ngpus_per_node = 4\n'
                                        "[scaleup]\ndomain_gpus = 4\n")
    s = load_systems(str(tmp_path)).get("dgx-h100")
    assert s.gpus_per_node == 4 and s.scaleup is not None and s.scaleup.domain_gpus == 4
    assert "user override" in s.source_of("gpus_per_node")
    assert "user override" in s.source_of("scaleup.domain_gpus")


def test_override_can_remove_the_network(tmp_path: Path) -> None:
    (tmp_path / "solo.toml").write_text('schema = "whichgpu.system/1"\nid = "dgx-a100"\nscaleout = "none"\n')
    s = load_systems(str(tmp_path)).get("dgx-a100")
    assert s.scaleout is None and "scaleout.rails" not in s.figures()


def test_gpu_and_system_files_share_a_directory(tmp_path: Path) -> None:
    (tmp_path / "acme.toml").write_text(NEW_SYSTEM)
    (tmp_path / "h100-price.toml").write_text(GPU_OVERRIDE)
    cat = load_catalog(str(tmp_path))  # the system file is skipped, not rejected
    assert len(cat) == len(CATALOG)
    assert cat.get("h100-sxm5-80gb").price.street_usd == 12345
    assert load_systems(str(tmp_path)).get("acme-cluster").gpus_per_node == 4  # the GPU file is skipped


def test_environment_variable_dir_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "acme.toml").write_text(NEW_SYSTEM)
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert "acme-cluster" in load_systems().ids()


MEASURED = '\n[[measured_allreduce]]\ngpus = 2\nsizes_bytes = [1000, 2000]\ntimes_us = [10, 12]\nsource = "our nccl-tests run"\n'


def _with(table: str) -> str:
    """NEW_SYSTEM with `table` before its [sources]."""
    return NEW_SYSTEM.replace("\n[sources]", table + "\n[sources]")


@pytest.mark.parametrize(("text", "field", "valid"), [
    (NEW_SYSTEM.replace("gbps_per_gpu = 6.25", 'gbps_per_gpu = "fast"'), "scaleout.gbps_per_gpu", "a number > 0"),
    (NEW_SYSTEM.replace("gbps_per_gpu = 6.25", "gbps_per_gpu = -1"), "scaleout.gbps_per_gpu", "a number > 0"),
    (NEW_SYSTEM.replace("rails = 2", "rails = 2.5"), "scaleout.rails", "a whole number > 0"),
    (NEW_SYSTEM.replace("gbps_per_gpu = 6.25", "gbps = 6.25"), "scaleout.gbps", "valid: kind, gbps_per_gpu"),
    (NEW_SYSTEM.replace('kind = "roce"', 'kind = "myrinet"'), "scaleout.kind", "one of infiniband-edr"),
    (NEW_SYSTEM.replace("gen = 4", "gen = 7"), "pcie.gen", "one of 3, 4, 5, 6"),
    (NEW_SYSTEM.replace("p2p = false", "p2p = 1"), "pcie.p2p", "true or false"),
    (NEW_SYSTEM.replace('kind = "server"', 'kind = "mainframe"'), "kind", "one of dgx, hgx"),
    (NEW_SYSTEM.replace('gpu = "L40S"', 'gpu = "L40Z"'), "gpu", "did you mean"),
    (NEW_SYSTEM.replace('gpu = "L40S"\n', "").replace('["l40s"]', '["h100-sxm5-80gb"]'), "default_for", "PCIe card"),
    (NEW_SYSTEM.replace("[pcie]\ngen = 4\nlanes = 16\np2p = false\nlatency_us = 5\n", ""), "pcie", "missing"),
    (NEW_SYSTEM.replace("latency_us = 12\n", ""), "scaleout.latency_us", "missing"),
    (NEW_SYSTEM.replace('default = "Acme cluster inventory, 2026-01"', '"scaleout.kind" = "x"'),
     "sources.gpus_per_node", "no source"),
    (NEW_SYSTEM.replace('default = "Acme', '"scaleout.gbps" = "x"\ndefault = "Acme'), "sources.scaleout.gbps",
     "did you mean 'scaleout.gbps_per_gpu'"),
    (NEW_SYSTEM + "\nfoo = 1\n", "sources.foo", "names no figure"),    (_with(MEASURED.replace("gpus = 2", "gpus = 8")), "measured_allreduce[0].gpus", "at most the node's 4 GPUs"),
    (_with(MEASURED.replace("gpus = 2", "gpus = 1")), "measured_allreduce[0].gpus", "from 2"),
    (_with(MEASURED + MEASURED), "measured_allreduce[1].gpus", "once per group size"),
    (_with(MEASURED.replace("[1000, 2000]", "[2000, 1000]")), "measured_allreduce[0].sizes_bytes", "increasing"),
    (_with(MEASURED.replace("[10, 12]", "[10]")), "measured_allreduce[0].times_us", "at least 2 numbers"),
    (_with(MEASURED.replace("[10, 12]", "[10, 12, 14]")), "measured_allreduce[0].times_us", "one time per size"),
    (_with(MEASURED.replace("[10, 12]", "[10, -1]")), "measured_allreduce[0].times_us", "numbers > 0"),
    (_with(MEASURED.replace("[10, 12]", "[10, nan]")), "measured_allreduce[0].times_us", "numbers > 0"),
    (_with(MEASURED.replace('source = "our nccl-tests run"\n', "")), "measured_allreduce[0].source", "missing"),
    (_with(MEASURED.replace("gpus = 2", "gpus = 2\nbus = 3")), "measured_allreduce[0].bus", "valid: gpus, sizes_bytes"),
    (NEW_SYSTEM.replace("gpus_per_node = 4\n", "gpus_per_node = 4\nmeasured_allreduce = 3\n"), "measured_allreduce",
     "array of tables"),
])
def test_malformed_user_file_names_file_field_and_what_is_valid(tmp_path: Path, text: str, field: str,
                                                                 valid: str) -> None:
    bad = tmp_path / "acme.toml"
    bad.write_text(text)
    with pytest.raises(CatalogError) as err:
        load_systems(str(tmp_path))
    assert err.value.path == str(bad)
    assert err.value.field == field
    assert valid in str(err.value)




def test_a_user_system_carries_measured_all_reduce_times(tmp_path: Path) -> None:
    (tmp_path / "acme.toml").write_text(_with(MEASURED))
    s = load_systems(str(tmp_path)).get("acme-cluster")
    (m,) = s.measured_allreduce
    assert (m.gpus, m.sizes_bytes, m.times_us, m.source) == (2, (1000.0, 2000.0), (10.0, 12.0), "our nccl-tests run")
    assert s.to_dict()["measured_allreduce"][0]["times_us"] == [10.0, 12.0]
    # the packaged DGX A100 carries vTrain's nccl-tests tables for 2, 4 and 8 GPUs, 1-256 MiB
    a100 = SYSTEMS.get("dgx-a100")
    assert [m.gpus for m in a100.measured_allreduce] == [2, 4, 8]
    assert all(m.sizes_bytes[0] == 2**20 and m.sizes_bytes[-1] == 2**28 and "vTrain" in m.source
               for m in a100.measured_allreduce)


def test_malformed_override_names_its_file(tmp_path: Path) -> None:
    bad = tmp_path / "h100.toml"
    bad.write_text('schema = "whichgpu.system/1"\nid = "dgx-h100"\n[scaleup]\ngeneration = "nvlink9"\n')
    with pytest.raises(CatalogError) as err:
        load_systems(str(tmp_path))
    assert (err.value.path, err.value.field) == (str(bad), "scaleup.generation")


def test_new_system_close_to_a_packaged_id_hints_at_it(tmp_path: Path) -> None:
    (tmp_path / "typo.toml").write_text('schema = "whichgpu.system/1"\nid = "dgx-h10"\ngpus_per_node = 4\n')
    with pytest.raises(CatalogError, match="'dgx-h100'"):
        load_systems(str(tmp_path))


def test_invalid_toml_and_missing_directory(tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text('schema = "whichgpu.system/1"\nid = \n')
    with pytest.raises(CatalogError, match="not valid TOML"):
        load_systems(str(tmp_path))
    with pytest.raises(CatalogError, match="does not exist"):
        load_systems(str(tmp_path / "nowhere"))
