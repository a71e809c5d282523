export THESEUS_ALLOW_SHARED_DEVICE=1
rm -f /tmp/sweep.id
for r in 1 0; do RANK=$r WORLD_SIZE=2 "/work/main/.device/theseus-bench" sweep --backend cuda --id-file /tmp/sweep.id "$@" >"/tmp/small-messages.1Lid5v/sweep.$r.out" 2>&1 & done
wait
cat "/tmp/small-messages.1Lid5v/sweep.0.out"
