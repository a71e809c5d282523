#!/usr/bin/env bash
# Device call G3 (2026-12-01, twelfth run), at 75fc703: issue 24's simulated nodes after the
# proxy's throughput work (xnode: waits keep spinning while their rounds work, 256 KiB UCX TCP
# segments, batched staging copies in a ring of 16 pieces) with each change undone in the same
# run, beside NCCL's socket transport (2x1 and 2x2: all_reduce, all_gather, reduce_scatter;
# then alltoall and sendrecv on the CUDA point-to-point engine across nodes); issue 22's
# figures with the threads rule at 512 (run_p2p.sh step 4); issue 25's GPU trace of a 2-rank
# allreduce (theseus-bench --trace, drawn). Carry .device/f and third_party.
CALL=rG3
DEADLINE=${DEADLINE:-575}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
mkdir -p $W/build
cp $D/f/build_nccl_tests.sh $D/f/build_nccl_baseline.sh $D/
(bash $D/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "theseus build rc=$?" >> $W/build/theseus.txt
 bash $D/build_nccl_baseline.sh > $W/build/nccl.txt 2>&1; echo "nccl build rc=$?" >> $W/build/nccl.txt) &
s trace 60 bash -c "$D/theseus-bench --backend cuda --nranks 2 --coll allreduce -b 8 -e 32K -f 64 -n 20 -w 5 --hotswap=false --trace $W/trace/trace-cuda-2rank.json && $D/theseus-bench trace-plot $W/trace/trace-cuda-2rank.json $W/trace/trace-cuda-2rank.png --calls 2 --call 'allreduce 8 B'; $D/theseus-bench trace-plot $W/trace/trace-cuda-2rank.json $W/trace/trace-cuda-2rank-32k.png --calls 2 --call 'allreduce 32768 B'"
wait; echo "== +$(( $(date +%s) - T0 ))s build: $(tail -1 $W/build/theseus.txt) $(tail -1 $W/build/nccl.txt)"
s p2p 80 env STEPS="4" P2P_MOE=0 DEADLINE=70 bash ncclabi/gpu/run_p2p.sh
s nodes-ab 215 env RESULTS=nodes-ab LAYOUTS=2x1 TESTS="all_reduce all_gather reduce_scatter" TRANSPORTS="tcp-l4 tcp-l4-base tcp-l4-seg8k tcp-l4-nobatch tcp-l4-spin tcp default" NT_SIZES="-b 8 -e 128M -f 4" NT_ITERS="-n 5 -w 2" DEADLINE=200 bash bench/gpu/run-nodes.sh info nccl theseus
s nodes-2x2 110 env RESULTS=nodes-2x2 LAYOUTS=2x2 TESTS="all_reduce all_gather reduce_scatter" TRANSPORTS="tcp-l4 default" NT_SIZES="-b 8 -e 128M -f 4" NT_ITERS="-n 5 -w 2" DEADLINE=100 bash bench/gpu/run-nodes.sh nccl theseus
s p2pnodes 60 env RESULTS=p2pnodes LAYOUTS="2x1 2x2" TRANSPORTS="tcp-l4" TESTS="alltoall sendrecv" NT_SIZES="-b 8 -e 32M -f 4" NT_ITERS="-n 5 -w 2" DEADLINE=55 bash bench/gpu/run-nodes.sh theseus
echo "== +$(( $(date +%s) - T0 ))s done"
pack
