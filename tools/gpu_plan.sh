#!/usr/bin/env bash
# The next GPU session's plan (docs/perf-log.md, "Next"), one stage per device call, each
# well inside a 10-minute call. Run from the repository root on the GPU machine:
#   bash tools/gpu_plan.sh check      # the experiments' GPU twins, then each experiment benched on the
#                                     # cases it touches (with champion-concurrent unless BASELINES=),
#                                     # and Nsight Compute on the champion at 640x512 (~9 min cold)
#   bash tools/gpu_plan.sh table      # the closing table: the champion, the previous champion
#                                     # (.gpu/champion-prev.py, if built and carried) and
#                                     # champion-concurrent on all 12 cases, then torch.geqrf in a
#                                     # run of its own (~8 min; TABLE_BUDGET=300 and GEQRF_BUDGET=100
#                                     # seconds of timing, GEQRF_BUDGET=0 leaves geqrf out)
#   bash tools/gpu_plan.sh bits A B   # do builds A and B factor the 640x512 cases' inputs to the same
#                                     # bits (tools/same_bits.py; ~1 min cold)
#   GPU_PLAN_CARD=H200 bash tools/gpu_plan.sh table   # any stage, on an H200 only (else it stops at once)
#   bash tools/gpu_plan.sh coop       # the cooperative panel's experiments: twins, bench at n >= 2048 (~5 min)
#   bash tools/gpu_plan.sh twins      # the general list of GPU twins (~5 min)
#   bash tools/gpu_plan.sh ncu V CASE  # Nsight Compute's counters for the first panel and strip
#                                      # launches of variant V on benchmark case CASE (~2 min)
#   bash tools/gpu_plan.sh means      # the harness's own means (benchmark mode), champion vs champion-capture, one case a route (~5 min)
#   bash tools/gpu_plan.sh decide     # the first calls' wall times (tools/call_phases.py), then means (~9 min cold)
#   bash tools/gpu_plan.sh seeds V [SEL]  # variant V over the 22 test cases (or SEL's), seeds unset and 1-5,
#                                         # then (all 22 only) its profile (~8 min)
#   bash tools/gpu_plan.sh profile V  # qrsub profile of variant V, every benchmark case (~2 min)
#   bash tools/gpu_plan.sh far [ARGS]  # tools/far_update_cost.py ARGS (default: its grid on the
#                                      # champion's two-level shapes), JSON to $OUT/far.json (~2-4 min)
#   bash tools/gpu_plan.sh ranked V SEL  # the service's ranked run (test, benchmark, leaderboard stages)
#                                        # of variant V on cases SEL, e.g. 0-5 then 6-11 (~5 min each)
# Logs and JSON go under $OUT (the device tool's output folder), else ./gpu-results, with the
# compiled kernels as $OUT/triton-cache.tgz: copy it to .gpu/ here and carry .gpu, and the next
# call compiles only what changed (tools/gpu_cache.py).
# Where qrsub is not installed, it installs the checkout itself, editable, as the README's
# offline install does.
set -u
case "${1:-}" in
check|table|coop|twins|means|decide|far) ;;
bits) [ -n "${3:-}" ] || { echo "bits needs two builds: bash tools/gpu_plan.sh bits variants/champion.yaml variants/NAME.yaml" >&2; exit 2; } ;;
seeds|profile) [ -n "${2:-}" ] || { echo "$1 needs a variant: bash tools/gpu_plan.sh $1 variants/NAME.yaml" >&2; exit 2; } ;;
ncu) [ -n "${3:-}" ] || { echo "ncu needs a variant and a case: bash tools/gpu_plan.sh ncu variants/NAME.yaml 3" >&2; exit 2; } ;;
ranked) [ -n "${3:-}" ] || { echo "ranked needs a variant and cases: bash tools/gpu_plan.sh ranked variants/NAME.yaml 0-5" >&2; exit 2; } ;;
*) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 2 ;;  # the header above
esac
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
# GPU_PLAN_CARD=H200 (any part of nvidia-smi's name): on another card the stage stops at once,
# before it installs or compiles anything, so that a machine of the wrong kind costs only its start.
if [ -n "${GPU_PLAN_CARD:-}" ]; then
    card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    case "$card" in
    *"$GPU_PLAN_CARD"*) ;;
    *) echo "gpu_plan: this machine's card is '${card:-none}', not $GPU_PLAN_CARD (GPU_PLAN_CARD): nothing run"; exit 0 ;;
    esac
fi
# `import qrsub` alone succeeds in the checkout (its qrsub/ folder), installed or not: the
# kernels package only exists under qrsub once installed.
if ! python3 -c "import qrsub.kernels" 2>/dev/null; then
    # Editable: the checkout's qrsub/ shadows any other install when run from its root.
    python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
fi
export PYTHONUNBUFFERED=1
# Triton's compiled kernels in an ignored folder of the checkout, which the device keeps between
# calls to a warm machine: a later stage loads them instead of compiling again.
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/.gpu/triton-cache}
# A fresh machine starts with no cache: an earlier call's kernels come back as
# $OUT/triton-cache.tgz (tools/gpu_cache.py); copied to .gpu/ and carried, they are unpacked here,
# and the outermost stage packs the cache again when it ends (compiling took about 140 s of a
# 183 s call in the twentieth session).
GPU_PLAN_DEPTH=$(( ${GPU_PLAN_DEPTH:-0} + 1 )); export GPU_PLAN_DEPTH
if [ "$GPU_PLAN_DEPTH" = 1 ]; then
    [ -f .gpu/triton-cache.tgz ] && python3 tools/gpu_cache.py unpack .gpu/triton-cache.tgz "$TRITON_CACHE_DIR"
    trap 'python3 tools/gpu_cache.py pack "$TRITON_CACHE_DIR" "$OUT/triton-cache.tgz"' EXIT
fi
# The previous champion, if built there as its commit had it (`python3 tools/build_at.py COMMIT
# -o .gpu/champion-prev.py`: that commit's variant, kernels and template) and carried to the
# device: the bench's "before".
PREVIOUS=$(ls .gpu/champion-prev.py 2>/dev/null)
# The experiments, by the cases their routes serve (a variant's other routes are the
# champion's own code, so its ratio there is 1). Nothing is queued: the twenty-fourth session
# measured and dropped the last ones (docs/perf-log.md). Experiment variants live in .gpu/v/,
# outside the repository: carry .gpu.
AT_SMALL=""
AT_512=""
AT_1024=""
AT_2048_UP=""
# The queued experiments' GPU twins (pytest -k over test_gpu_kernels.py), run before their benches.
EXPERIMENT_TWINS=(-k "drivers_pass and fused")
# graph.mode inplace everywhere: its call phases give each route's one-off cost (decide).
INPLACE="variants/champion-inplace.yaml"
# The bench's baseline beside the experiments: the opt-in concurrent graphs (BASELINES= in the
# environment leaves it out).
BASELINES=${BASELINES-"variants/champion-concurrent.yaml"}
# The starter, torch.geqrf, runs in a bench of its own (table; GEQRF= leaves it out): its calls of
# about a second at 640x512 slow the calls that follow them, so the champion's 640x512 read
# 4,490 us beside it and 4,291 without it (twenty-third session, H200).
GEQRF=${GEQRF-"variants/geqrf.yaml"}
# The table's timing budgets in seconds (qrsub bench --budget: warm-ups and compiles come on top).
TABLE_BUDGET=${TABLE_BUDGET:-300}
GEQRF_BUDGET=${GEQRF_BUDGET:-100}

case "${1:-}" in
check)
    # A bench for each group of cases, of the experiments that touch them (--budget shared by the cases).
    bench() {  # NAME CASES BUDGET CANDIDATES... (none: nothing to run)
        local name=$1 cases=$2 budget=$3
        shift 3
        [ $# -gt 0 ] || return 0
        timeout $((budget + 120)) python3 -m qrsub bench variants/champion.yaml $PREVIOUS "$@" $BASELINES \
            --cases "$cases" --budget "$budget" --target 0.003 --json "$OUT/bench-$name.json" 2>&1 \
            | tee "$OUT/bench-$name.txt" | tail -30
    }
    # The experiments' own GPU twins first (by the driver cases' ids; the general list is
    # `twins`): a cooperative experiment that hangs or fails shows here, before a bench waits on it.
    timeout 240 python3 -m pytest -q -x -m gpu tests/test_gpu_kernels.py "${EXPERIMENT_TWINS[@]}" \
        2>&1 | tee "$OUT/gpu-tests-experiments.txt" | tail -5
    bench small 0,1,2 40 $AT_SMALL
    bench 512 n=512 90 $AT_512
    bench large 4,8,11 60 $AT_1024
    bench coop 5,6 70 $AT_2048_UP
    # Where the champion's 640x512 time goes, with the stall reasons (about 15 s): `bash $0 ncu` below.
    bash "$0" ncu variants/champion.yaml 3 > /dev/null 2>&1 && echo "ncu of the champion: in $OUT"
    ;;
table)
    # The issue's closing table: every benchmark case, the champion beside the previous one and
    # champion-concurrent (BASELINES= leaves it out); then torch.geqrf's ratio, alone beside the champion.
    timeout $((TABLE_BUDGET + 120)) python3 -m qrsub bench variants/champion.yaml $PREVIOUS $BASELINES \
        --budget "$TABLE_BUDGET" --target 0.002 --json "$OUT/bench-table.json" 2>&1 | tee "$OUT/bench-table.txt" | tail -45
    if [ -n "$GEQRF" ] && [ "$GEQRF_BUDGET" != 0 ]; then
        timeout $((GEQRF_BUDGET + 100)) python3 -m qrsub bench variants/champion.yaml $GEQRF --budget "$GEQRF_BUDGET" \
            --target 0.01 --json "$OUT/bench-geqrf.json" 2>&1 | tee "$OUT/bench-geqrf.txt" | tail -8
    fi
    ;;
bits)
    # A knob that only reschedules work should leave the factors' bits as they were; where it
    # does, the seeds figures of A carry over to B.
    timeout 200 python3 tools/same_bits.py "$2" "$3" 2>&1 | tee "$OUT/bits-$(basename "$3" .yaml).txt" | tail -6
    ;;
coop)
    # The cooperative panel's GPU twins first (a hang ends at the timeout), then the bench of
    # the n >= 2048 experiments on 8x2048 and 2x4096.
    timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_kernels.py \
        -k "(several_programs and (spin or shuffle)) or coop-grouped or coop-spin or coop-parity or cleared_slots" \
        2>&1 | tee "$OUT/gpu-tests-coop.txt" | tail -5
    timeout 200 python3 -m qrsub bench variants/champion.yaml $AT_2048_UP --cases 5,6 --budget 60 \
        --target 0.003 --json "$OUT/bench-coop.json" 2>&1 | tee "$OUT/bench-coop.txt" | tail -25
    ;;
twins)
    # The general GPU list (it did not finish in 150 s beside check's bench, s11).
    timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_kernels.py \
        -k "grouped or inplace or relocate or shuffle or graph_replays or tf32 or (drivers_pass and not coop)" \
        2>&1 | tee "$OUT/gpu-tests.txt" | tail -5
    ;;
ncu)
    # Throughput against the ceilings, L2 hits, occupancy and stall reasons of one call's first
    # six panel, strip and rank-update launches (on the mid route: the first panels and strips).
    timeout 500 ncu --clock-control none --profile-from-start off \
        -k "regex:panel_kernel|strip_kernel|rank_update_kernel" --launch-count 6 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section LaunchStats --section SchedulerStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
        python3 tools/ncu_case.py "$2" --case "$3" 2>&1 | tee "$OUT/ncu-$(basename "$2" .yaml)-$3.txt" | tail -150
    ;;
means|decide)
    if [ "$1" = decide ]; then
        # Where graph.mode inplace spends its first calls in the harness's loop (this session's
        # harness runs of champion-inplace did not finish 6 cases in 110 and 150 s; the champion,
        # compiling from cold, did in 110).
        # The first process compiles every kernel on a fresh machine (60-100 s): a longer limit.
        limit=170
        for v in variants/champion.yaml $INPLACE; do
            timeout $limit python3 tools/call_phases.py "$v" --cases 0,1,2,4,5,6 2>&1 \
                | tee "$OUT/phases-$(basename "$v" .yaml).txt"
            limit=110
        done
    fi
    # qrsub's own --timeout, not timeout(1): a stage cut off still reports the cases it finished,
    # and each case's line is printed (and logged) as it ends. One case a graphed route: 640x512
    # runs eagerly in every variant (over graph_max_numel).
    for v in variants/champion.yaml variants/champion-capture.yaml; do
        python3 -m qrsub test --local "$v" --mode benchmark --cases 0,1,2,4,5,6 --timeout 150 \
            --json "$OUT/means-$(basename "$v" .yaml).json" 2>&1 | tee "$OUT/means-$(basename "$v" .yaml).txt" | tail -30
    done
    ;;
far)
    # The tools import each other by name: run from tools/, the JSON path made absolute first.
    shift
    json="$(cd "$OUT" && pwd)/far.json"
    (cd tools && timeout 400 python3 far_update_cost.py "$@" --json "$json") 2>&1 | tee "$OUT/far.txt" | tail -60
    ;;
profile)
    timeout 200 python3 -m qrsub profile "$2" --json "$OUT/profile-$(basename "$2" .yaml).json" \
        2>&1 | tee "$OUT/profile.txt" | tail -80
    ;;
ranked)
    # Each case's ranked mean and wall seconds: an in-place case runs every ranked repetition
    # (its one-off calls keep the error above the stop), each with a recheck, up to 120 s.
    python3 -m qrsub test --local "$2" --mode leaderboard --cases "$3" --timeout 290 \
        --json "$OUT/ranked-$(basename "$2" .yaml)-$3.json" 2>&1 | tee "$OUT/ranked-$3.txt" | tail -40
    ;;
seeds)
    for seed in "" 1 2 3 4 5; do
        python3 -m qrsub test --local "$2" ${3:+--cases "$3"} ${seed:+--seed "$seed"} --timeout 90 \
            --json "$OUT/seeds-$(basename "$2" .yaml)-${seed:-unset}.json" 2>&1 | tail -3
    done
    [ -n "${3:-}" ] && exit 0  # selected cases: no profile
    timeout 150 python3 -m qrsub profile "$2" --json "$OUT/profile-$(basename "$2" .yaml).json" \
        2>&1 | tee "$OUT/profile.txt" | tail -80
    ;;
esac
