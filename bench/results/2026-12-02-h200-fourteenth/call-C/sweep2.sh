export THESEUS_ALLOW_SHARED_DEVICE=1 CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe
nvidia-cuda-mps-control -d
rm -f /tmp/sweep.id
for r in 1 0; do RANK=$r WORLD_SIZE=2 /work/main/.device/theseus-bench sweep --backend cuda --id-file /tmp/sweep.id "$@" >$OUT/sweep.$r.out 2>&1 & done
wait
cat $OUT/sweep.0.out
echo quit | nvidia-cuda-mps-control
