"""The variant schema: accepted files, rejected files (with file:line:col), extends, coverage."""
from pathlib import Path

import pytest

from qrsub.kernels import plan
from qrsub.cli.variants import diff_variants
from qrsub.variant import ROUTE_KNOBS, VariantError, load_variant

VARIANTS = Path(__file__).resolve().parent.parent / "variants"

BASE = """\
gpu: H200
routes:
  - name: all
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def reject(tmp_path: Path, text: str, name: str = "v.yaml") -> str:
    with pytest.raises(VariantError) as info:
        load_variant(write(tmp_path, name, text))
    return str(info.value)


# ---------------------------------------------------------------------------
# Accepted


def test_minimal_variant_gets_every_knob_from_the_schema(tmp_path):
    v = load_variant(write(tmp_path, "mini.yaml", BASE))
    assert (v.name, v.leaderboard, v.gpu, v.description, v.parents) == ("mini", "qr_v2", "H200", "", ())
    route = v.routes[0]
    assert route == plan.Route(name="all"), "every knob at its one default"
    assert route.n_range == (1, None) and route.batch_range == (1, None)
    assert [name for name, _ in route.knob_items()][2:] == [k.dotted for k in ROUTE_KNOBS]
    assert v.settings == plan.Settings(graph_min_numel=5000, graph_max_numel=100_000_000, clone_outputs=True)


def test_full_route_as_the_docs_write_it(tmp_path):
    text = """\
leaderboard: qr_v2
gpu: H200
description: one line
settings: {graph_min_numel: 0, clone_outputs: false}
defaults:
  panel: {width: 32, num_warps: 4}
routes:
  - name: mid
    n: [64, 383]
    batch: [1, null]
    driver: blocked
    panel: {width: 16, num_warps: [[128, 2], [null, 4]]}
    strip: {bm: 32, bn: 16, num_stages: 3, num_warps: 2}
    precision: {project: fp16, tcontract: tf32x3, apply: fp16}
    twolevel: {outer: 128, far_precision: tf32}
    coop: {programs: 8, max_rows: 1024}
    graph: {mode: capture}
  - name: rest
"""
    v = load_variant(write(tmp_path, "full.yaml", text))
    mid, rest = v.routes
    assert mid.panel == plan.PanelKnobs(width=16, num_warps=((128, 2), (None, 4)))
    assert mid.strip == plan.StripKnobs(bm=32, bn=16, num_stages=3, num_warps=2)
    assert mid.precision == plan.PrecisionKnobs(project="fp16", tcontract="tf32x3", apply="fp16")
    assert mid.twolevel == plan.TwoLevelKnobs(outer=128, far_precision="tf32")
    assert mid.coop == plan.CoopKnobs(programs=8, max_rows=1024) and mid.graph.mode == "capture"
    assert rest.panel == plan.PanelKnobs(width=32, num_warps=4)  # from `defaults`
    assert v.settings.graph_min_numel == 0 and v.settings.clone_outputs is False
    assert v.route_for(100, 3).name == "mid" and v.route_for(384, 3).name == "rest"


def test_off_is_a_string_not_yaml_1_1_false(tmp_path):
    v = load_variant(write(tmp_path, "v.yaml", BASE + "    graph: {mode: off}\n"))
    assert v.routes[0].graph.mode == "off"


def test_a_single_integer_range_is_exact(tmp_path):
    v = load_variant(write(tmp_path, "v.yaml", BASE.replace("- name: all", "- name: one\n    n: 512")
                           + "  - name: all\n"))
    assert v.routes[0].n_range == (512, 512)


# ---------------------------------------------------------------------------
# Rejected: (route lines appended to BASE's route, expected location, expected words)

REJECTS = [
    ("    drvier: blocked\n", "4:5", ["routes[all].drvier", "did you mean 'driver'", "allowed:"]),
    ("    panel: {widht: 16}\n", "4:13", ["routes[all].panel.widht", "did you mean 'width'"]),
    ("    panel_width: 16\n", "4:5", ["did you mean panel.width", "panel: {width: ...}"]),
    ("    driver: cusolver\n", "4:13", ["routes[all].driver", "'cusolver'", "one of geqrf, blocked, twolevel, coop"]),
    ("    panel: {width: 24}\n", "4:20", ["panel.width", "got 24", "a power of two in 1..64"]),
    ("    panel: {width: 128}\n", "4:20", ["panel.width", "power of two in 1..64"]),
    ("    panel: {width: true}\n", "4:20", ["panel.width", "got True"]),
    ("    panel: {width: '32'}\n", "4:20", ["panel.width", "got '32'"]),
    ("    panel: {num_warps: 3}\n", "4:24", ["panel.num_warps", "got 3", "[rows_max, value]"]),
    ("    panel: {num_warps: [[256, 4], [128, 2]]}\n", "4:24", ["panel.num_warps", "ascending"]),
    ("    panel: {num_warps: [[null, 4], [128, 2]]}\n", "4:24", ["panel.num_warps", "only last"]),
    ("    panel: {num_warps: [[128, 3]]}\n", "4:24", ["panel.num_warps"]),
    ("    panel: {num_warps: []}\n", "4:24", ["panel.num_warps"]),
    ("    strip: {bm: 8}\n", "4:17", ["strip.bm", "got 8", "power of two in 16..256"]),
    ("    strip: {bn: 512}\n", "4:17", ["strip.bn", "16..256"]),
    ("    strip: {num_stages: 7}\n", "4:25", ["strip.num_stages", "an integer in 1..6"]),
    ("    strip: {num_warps: 32}\n", "4:24", ["strip.num_warps", "power of two in 1..16"]),
    ("    precision: {project: bf16}\n", "4:26", ["precision.project", "'bf16'",
                                                "one of fp32, tf32, tf32x3, fp16x3, fp16x2lo, fp16"]),
    ("    precision: {apply: fp8}\n", "4:24", ["precision.apply"]),
    ("    precision: {tcontrac: fp16}\n", "4:17", ["did you mean 'tcontract'"]),
    ("    twolevel: {outer: 48}\n", "4:23", ["twolevel.outer", "power of two in 32..512"]),
    ("    driver: twolevel\n    twolevel: {outer: 32}\n    panel: {width: 64}\n", "5:23",
     ["twolevel.outer", "panel.width 64 does not divide twolevel.outer 32"]),
    ("    driver: twolevel\n    panel: {width: 8}\n", "5:20", ["panel.width", "got 8 with driver twolevel"]),
    ("    driver: coop\n    panel: {width: 8}\n", "5:20", ["panel.width", "at least 16"]),
    ("    strip: {split_rows: 100}\n", "4:25", ["strip.split_rows", "0 (off) or a power of two in 16..8192"]),
    ("    strip: {bm: 64, split_rows: 32}\n", "4:33", ["strip.split_rows", "at least strip.bm (64)"]),
    ("    strip: {bm: 64, rank_rows: 32}\n", "4:32", ["strip.rank_rows", "at least strip.bm (64)"]),
    ("    strip: {rank_rows: 100}\n", "4:24", ["strip.rank_rows", "0 (off) or a power of two in 16..8192"]),
    ("    driver: twolevel\n    strip: {bm: 16, rank_rows: 16}\n    twolevel: {first_far: direct, first_far_bm: 32}\n",
     "5:32", ["strip.rank_rows", "got 16 with twolevel.first_far_bm 32", "at least first_far_bm"]),
    ("    driver: twolevel\n    strip: {fuse_next: true}\n", "5:24",
     ["strip.fuse_next", "got true with driver twolevel", "allowed: true with driver blocked"]),
    ("    strip: {fuse_next: true, split_rows: 32}\n", "4:24", ["strip.fuse_next", "split_rows 32"]),
    ("    strip: {fuse_next: 1}\n", "4:24", ["strip.fuse_next", "true or false"]),
    ("    panel: {split: 4}\n", "4:20", ["panel.split", "an integer in 1..2"]),
    ("    panel: {apply_pending: true}\n", "4:28", ["panel.apply_pending", "strip.fuse_next false",
                                                  "allowed: true with strip.fuse_next true"]),
    ("    strip: {tail_update: true}\n", "4:26", ["strip.tail_update", "got true with strip.fuse_next false"]),
    ("    strip: {max_registers: 128}\n", "4:28", ["strip.max_registers", "got 128 with strip.fuse_next false",
                                                "only the fused pass takes it"]),
    ("    strip: {max_registers: 256, fuse_next: true}\n", "4:28", ["strip.max_registers", "an integer in 0..255"]),
    ("    panel: {apply_pending: true}\n    strip: {fuse_next: true, tail_update: true}\n", "5:43",
     ["strip.tail_update", "panel.apply_pending true", "apply it twice"]),
    ("    strip: {halves: 2}\n", "4:21", ["strip.halves", "got 2 with strip.fuse_next false",
                                         "allowed: 2 with strip.fuse_next true"]),
    ("    strip: {halves: 3, fuse_next: true}\n", "4:21", ["strip.halves", "an integer in 1..2"]),
    ("    driver: twolevel\n    graph: {mode: relocate}\n", "5:19", ["graph.mode", "got relocate with driver "
                                                                   "twolevel", "cuBLAS"]),
    ("    coop: {exchange: atomic}\n", "4:22", ["coop.exchange", "one of counter, slots"]),
    ("    twolevel: {far_precision: fp16}\n", "4:31", ["twolevel.far_precision", "one of fp32, tf32"]),
    ("    coop: {programs: 3}\n", "4:22", ["coop.programs", "power of two in 1..64"]),
    ("    coop: {max_rows: 0}\n", "4:22", ["coop.max_rows", "an integer >= 1"]),
    ("    graph: {mode: off, head: 1}\n", "4:30", ["graph.head", "got 1 with graph.mode off",
                                                "capture, inplace or relocate"]),
    ("    graph: {mode: on}\n", "4:19", ["graph.mode", "'on'", "one of off, capture, inplace, relocate, concurrent"]),
    ("    graph: {mode: concurrent}\n", "4:19", ["graph.mode", "got concurrent with graph.groups 0",
                                                 "graph.groups 2..32"]),
    ("    graph: {mode: concurrent, groups: 1}\n", "4:19", ["graph.mode", "with graph.groups 1"]),
    ("    graph: {mode: concurrent, groups: 33}\n", "4:39", ["graph.groups", "an integer in 0..32"]),
    ("    graph: {groups: 4}\n", "4:21", ["graph.groups", "got 4 with graph.mode capture", "allowed: 0"]),
    ("    graph: {mode: off, groups: 4}\n", "4:32", ["graph.groups", "got 4 with graph.mode off"]),
    ("    driver: coop\n    graph: {mode: concurrent, groups: 4}\n", "5:19",
     ["graph.mode", "got concurrent with driver coop", "allowed: concurrent with driver blocked", "spin"]),
    ("    driver: twolevel\n    graph: {mode: concurrent, groups: 4}\n", "5:19",
     ["graph.mode", "got concurrent with driver twolevel", "workspace"]),
    ("    driver: geqrf\n    graph: {mode: concurrent, groups: 4}\n", "5:19",
     ["graph.mode", "got concurrent with driver geqrf", "never graphed"]),
    ("    graph: capture\n", "4:12", ["routes[all].graph", "expected a mapping of mode"]),
    ("    n: [100, 50]\n", "4:8", ["routes[all].n", "max is below min"]),
    ("    n: big\n", "4:8", ["routes[all].n", "[min, max]"]),
    ("    batch: [0, 4]\n", "4:12", ["routes[all].batch"]),
    ("    remove: true\n", "4:5", ["routes[all].remove", "only in a variant that `extends` another"]),
]


@pytest.mark.parametrize("lines,where,words", REJECTS, ids=[r[0].strip() for r in REJECTS])
def test_route_rejections_name_file_line_column_knob_and_allowed(tmp_path, lines, where, words):
    message = reject(tmp_path, BASE + lines)
    assert f"v.yaml:{where}: " in message
    for word in words:
        assert word in message


TOP_REJECTS = [
    ("gpu: H200\nrootes: []\nroutes:\n  - name: a\n", "2:1", ["unknown key 'rootes'", "did you mean 'routes'"]),
    ("routes:\n  - name: a\n", "1:1", ["gpu: missing", "H200"]),
    ("gpu: H 200\nroutes:\n  - name: a\n", "1:6", ["gpu", "one GPU type"]),
    ("gpu: H200\nleaderboard: QR V2\nroutes:\n  - name: a\n", "2:14", ["leaderboard"]),
    ("gpu: H200\ndescription: a streamlined one\nroutes:\n  - name: a\n", "2:14", ["description", "refuses"]),
    ("gpu: H200\nroutes:\n  - name: my-Stream\n", "3:11", ["routes[my-Stream].name", "refuses"]),
    ("gpu: H200\nroutes: []\n", "2:9", ["routes", "non-empty list"]),
    ("gpu: H200\nroutes:\n  - name: a\n  - name: a\n", "4:5", ["duplicate route name"]),
    ("gpu: H200\ngpu: B200\nroutes:\n  - name: a\n", "2:1", ["duplicate key", "first at line 1"]),
    ("gpu: H200\nroutes:\n  - name: a\n    panel: {width: [1, 2}\n", "4:", ["yaml:"]),
    ("gpu: H200\nsettings: {graph_min_numel: -1}\nroutes:\n  - name: a\n", "2:29",
     ["settings.graph_min_numel", "an integer >= 0"]),
    ("gpu: H200\nsettings: {clone_outputs: yes}\nroutes:\n  - name: a\n", "2:27",
     ["settings.clone_outputs", "'yes'", "true or false"]),
    ("gpu: H200\nsettings: {graph_min: 1}\nroutes:\n  - name: a\n", "2:12", ["did you mean 'graph_min_numel'"]),
    ("gpu: H200\nsettings: {graph_min_numel: 10, graph_max_numel: 5}\nroutes:\n  - name: a\n", "2:50",
     ["settings.graph_max_numel", "at least graph_min_numel (10)"]),
    ("gpu: H200\ndefaults: {panel: {width: 12}}\nroutes:\n  - name: a\n", "2:27", ["routes[a].panel.width"]),
    ("gpu: H200\ndefaults: {name: x}\nroutes:\n  - name: a\n", "2:12", ["defaults.name", "unknown key"]),
]


@pytest.mark.parametrize("text,where,words", TOP_REJECTS, ids=[t[2][0].replace("gpu", "GPU") for t in TOP_REJECTS])  # "gpu" in an id reads as the marker
def test_top_level_rejections(tmp_path, text, where, words):
    message = reject(tmp_path, text)
    assert f"v.yaml:{where}" in message
    for word in words:
        assert word in message


def test_empty_file(tmp_path):
    assert "v.yaml:1:1: variant: the file is empty" in reject(tmp_path, "")


def test_every_problem_is_reported_at_once(tmp_path):
    message = reject(tmp_path, BASE + "    panel: {width: 24}\n    strip: {bm: 8}\n")
    assert "v.yaml:4:20" in message and "v.yaml:5:17" in message


def test_a_bad_default_is_reported_once_for_many_routes(tmp_path):
    text = "gpu: H200\ndefaults: {strip: {bm: 7}}\nroutes:\n  - {name: a, n: [1, 9]}\n  - {name: b}\n"
    with pytest.raises(VariantError) as info:
        load_variant(write(tmp_path, "v.yaml", text))
    assert all("v.yaml:2:24" in p for p in info.value.problems)


# ---------------------------------------------------------------------------
# Coverage


def test_gap_in_n_is_an_error(tmp_path):
    message = reject(tmp_path, "gpu: H200\nroutes:\n  - name: a\n    n: [1, 100]\n")
    assert "v.yaml:3:3: routes: no route covers n in 101..8192, batch in 1..2048" in message


def test_gap_in_batch_is_an_error(tmp_path):
    text = "gpu: H200\nroutes:\n  - {name: a, n: [1, 63]}\n  - {name: b, n: [64, null], batch: [2, null]}\n"
    assert "no route covers n in 64..8192, batch in 1..1" in reject(tmp_path, text)


def test_shadowed_route_is_an_error(tmp_path):
    text = "gpu: H200\nroutes:\n  - name: all\n  - {name: late, n: [64, 128]}\n"
    message = reject(tmp_path, text)
    assert "v.yaml:4:5: routes[late]: never used" in message and "before:" in message


# ---------------------------------------------------------------------------
# extends


PARENT = """\
gpu: H200
description: parent
settings: {graph_min_numel: 100}
routes:
  - name: small
    n: [1, 255]
    panel: {width: 16, num_warps: 2}
    strip: {bm: 32}
  - name: big
    driver: twolevel
    twolevel: {outer: 256}
"""


def test_child_patches_routes_by_name_and_merges_deeply(tmp_path):
    write(tmp_path, "parent.yaml", PARENT)
    child = write(tmp_path, "child.yaml", """\
extends: parent.yaml
description: child
settings: {clone_outputs: false}
routes:
  - name: small
    panel: {width: 32}
""")
    v = load_variant(child)
    small, big = v.routes
    assert small.panel == plan.PanelKnobs(width=32, num_warps=2) and small.strip.bm == 32
    assert small.n_range == (1, 255)
    assert big.driver == "twolevel" and big.twolevel.outer == 256
    assert v.description == "child" and v.gpu == "H200"
    assert v.settings.graph_min_numel == 100 and v.settings.clone_outputs is False
    assert [p.name for p in v.parents] == ["parent.yaml"]


def test_new_routes_append_or_go_before_one_and_remove_drops(tmp_path):
    write(tmp_path, "parent.yaml", PARENT)
    child = write(tmp_path, "child.yaml", """\
extends: parent.yaml
routes:
  - {name: tiny, n: [1, 31], before: small}
  - {name: small, remove: true}
  - {name: mid, n: [32, 511], before: big}
""")
    v = load_variant(child)
    assert [r.name for r in v.routes] == ["tiny", "mid", "big"]


def test_child_defaults_reach_parent_routes_that_do_not_set_the_knob(tmp_path):
    write(tmp_path, "parent.yaml", PARENT)
    v = load_variant(write(tmp_path, "child.yaml", "extends: parent.yaml\ndefaults: {panel: {width: 64}}\n"))
    assert v.routes[0].panel.width == 16 and v.routes[1].panel.width == 64


def test_three_level_chain(tmp_path):
    write(tmp_path, "parent.yaml", PARENT)
    write(tmp_path, "child.yaml", "extends: parent.yaml\nroutes:\n  - {name: big, coop: {programs: 4}}\n")
    v = load_variant(write(tmp_path, "grandchild.yaml", "extends: child.yaml\ngpu: B200\n"))
    assert [p.name for p in v.parents] == ["child.yaml", "parent.yaml"]
    assert v.gpu == "B200" and v.routes[1].coop.programs == 4


def test_error_in_parent_points_into_the_parent(tmp_path):
    write(tmp_path, "parent.yaml", PARENT.replace("bm: 32", "bm: 33"))
    message = reject(tmp_path, "extends: parent.yaml\ndescription: c\n", "child.yaml")
    assert "parent.yaml:8:17: routes[small].strip.bm" in message


def test_error_in_child_override_points_into_the_child(tmp_path):
    write(tmp_path, "parent.yaml", PARENT)
    message = reject(tmp_path, "extends: parent.yaml\nroutes:\n  - name: big\n    twolevel: {outer: 100}\n",
                     "child.yaml")
    assert "child.yaml:4:23: routes[big].twolevel.outer" in message


def test_remove_of_an_unknown_route(tmp_path):
    write(tmp_path, "parent.yaml", PARENT)
    message = reject(tmp_path, "extends: parent.yaml\nroutes:\n  - {name: smal, remove: true}\n", "child.yaml")
    assert "child.yaml:3:18: routes.remove: no route named 'smal'" in message


def test_before_an_unknown_route(tmp_path):
    write(tmp_path, "parent.yaml", PARENT)
    message = reject(tmp_path, "extends: parent.yaml\nroutes:\n  - {name: x, n: 3, before: nope}\n", "child.yaml")
    assert "child.yaml:3:29: routes.before: no route named 'nope'" in message


def test_extends_cycle_and_missing_parent(tmp_path):
    write(tmp_path, "a.yaml", "extends: b.yaml\ngpu: H200\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\n")
    with pytest.raises(VariantError, match=r"b.yaml:1:10: extends: a cycle: a.yaml -> b.yaml -> a.yaml"):
        load_variant(tmp_path / "a.yaml")
    assert "v.yaml:1:10: extends: no such file" in reject(tmp_path, "extends: nothere.yaml\n")


# ---------------------------------------------------------------------------
# The shipped variants


SHIPPED = sorted(p.name for p in VARIANTS.glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_variants_load(name):
    v = load_variant(VARIANTS / name)
    assert v.description and v.routes
    if name.startswith("champion-"):
        assert [p.name for p in v.parents] == ["champion.yaml"]
        assert len((VARIANTS / name).read_text().splitlines()) <= 20  # a few-line diff


def test_geqrf_is_the_starter():
    v = load_variant(VARIANTS / "geqrf.yaml")
    assert [(r.driver, r.n_range, r.batch_range) for r in v.routes] == [("geqrf", (1, None), (1, None))]


def test_champion_routes_the_benchmark_shapes():
    v = load_variant(VARIANTS / "champion.yaml")
    assert v.gpu == "H200"
    assert v.route_for(32, 20).driver == "warp"
    assert v.route_for(176, 40).panel.width == 16
    big = v.route_for(512, 640)
    assert (big.driver, big.panel.width, big.graph.mode) == ("blocked", 32, "relocate")
    assert v.route_for(1024, 60).driver == "twolevel"
    assert v.route_for(2048, 8).driver == "coop"
    assert v.route_for(4096, 2).coop.programs == 4


def test_variations_differ_from_the_champion_only_where_they_say():
    champion = load_variant(VARIANTS / "champion.yaml")

    def diff(name):
        return diff_variants(champion, load_variant(VARIANTS / name))

    nograph = diff("champion-nograph.yaml")
    assert len(nograph) == 7 and all(line.endswith(tuple(f"graph.mode: {mode} -> off" for mode in
                                                         ("capture", "inplace", "relocate")))
                                     for line in nograph)
    assert diff("champion-inplace.yaml") == [f"route {r}: graph.mode: {mode} -> inplace" for r, mode in
                                             (("small", "relocate"), ("mid", "relocate"), ("huge", "capture"),
                                              ("giant", "capture"))]
    assert diff("champion-capture.yaml") == ["settings.graph_max_numel: 200000000 -> 100000000",
                                             "route warp: graph.mode: inplace -> capture",
                                             "route tiny: graph.mode: inplace -> capture",
                                             "route small: graph.mode: relocate -> capture",
                                             "route mid: graph.mode: relocate -> capture",
                                             "route large: graph.mode: inplace -> capture"]
    huge_outer = champion.route_for(2048, 8).twolevel.outer
    assert diff("champion-outer32-2048.yaml") == [f"route huge: twolevel.outer: {huge_outer} -> 32"]
    assert diff("champion-tf32t.yaml") == ["route large: twolevel.far_tcontract: fp16x3 -> tf32x3",
                                           "route large: twolevel.tproduct_warps: 8 -> 4",
                                           "route huge: twolevel.far_tcontract: fp16x3 -> fp32",
                                           "route giant: twolevel.far_tcontract: fp16x3 -> fp32"]
    assert any("panel.num_warps" in line for line in diff("champion-warps-by-batch.yaml"))
    assert load_variant(VARIANTS / "b200.yaml").gpu == "B200"
    assert diff("champion-concurrent.yaml") == ["route mid: graph.mode: relocate -> concurrent",
                                                "route mid: graph.groups: 0 -> 10"]
    assert diff("champion-nowarp.yaml") == ["route warp: only in champion", "route tiny: n: 33..63 -> 1..63"]
    champion = load_variant(VARIANTS / "champion.yaml")
    assert (champion.route_for(32, 20).driver, champion.route_for(33, 20).name) == ("warp", "tiny")
    # the B200 has never run the warp driver's layout: its variant keeps the tiny route
    assert load_variant(VARIANTS / "champion-b200.yaml").route_for(32, 20).name == "tiny"


def test_concurrent_groups_serve_640x512_in_champion_concurrent_only():
    concurrent = load_variant(VARIANTS / "champion-concurrent.yaml")
    assert concurrent.route_for(512, 640).graph == plan.GraphKnobs(mode="concurrent", groups=10)
    assert concurrent.settings == load_variant(VARIANTS / "champion.yaml").settings
    # Opt-in: no other shipped variant runs concurrent branches.
    for path in VARIANTS.glob("*.yaml"):
        if path.name != "champion-concurrent.yaml":
            assert all(r.graph.mode != "concurrent" for r in load_variant(path).routes), path.name


def test_a_concurrent_route_in_defaults_names_the_route_it_breaks(tmp_path):
    text = ("gpu: H200\ndefaults: {graph: {mode: concurrent, groups: 4}}\nroutes:\n"
            "  - {name: a, n: [1, 63]}\n  - {name: b, driver: coop}\n")
    message = reject(tmp_path, text)
    assert "routes[b].graph.mode: got concurrent with driver coop" in message
    assert "routes[a]" not in message


def test_a_misspelled_patch_is_caught_as_a_shadowed_route(tmp_path):
    write(tmp_path, "parent.yaml", PARENT)
    message = reject(tmp_path, "extends: parent.yaml\nroutes:\n  - {name: bigg, coop: {programs: 4}}\n", "child.yaml")
    assert "child.yaml:3:5: routes[bigg]: never used" in message and "did you mean to patch 'big'?" in message


def test_child_routes_must_be_a_list(tmp_path):
    write(tmp_path, "parent.yaml", PARENT)
    message = reject(tmp_path, "extends: parent.yaml\nroutes: {name: big}\n", "child.yaml")
    assert "child.yaml:2:9: routes: expected a list of routes" in message


def test_a_geqrf_route_may_extend_the_champion(tmp_path):
    """The champion's defaults set panel.reciprocal approx; geqrf has no panel and ignores it, as
    it ignores every panel knob, so a user's geqrf route on top of the champion loads."""
    child = write(tmp_path, "torchy.yaml", f"extends: {VARIANTS / 'champion.yaml'}\n"
                  "routes:\n  - {name: torchy, n: [5000, null], driver: geqrf, before: giant}\n")
    torchy = next(r for r in load_variant(child).routes if r.name == "torchy")
    assert torchy.driver == "geqrf" and torchy.panel.reciprocal == "approx"
