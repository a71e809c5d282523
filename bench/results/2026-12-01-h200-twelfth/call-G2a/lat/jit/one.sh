# one.sh VARIANT GROUP: the JIT of one variant's modules of GROUP (P, C, R from the caller).
v=$1 n=$2
case $n in fp8e5m2 | fp8e4m3) g=$n ;; *) g='int8|uint8|int32|uint32|int64|uint64|float16|float32|float64|bfloat16' ;; esac
THESEUS_PTX_DIR="$P/$v" "$C" -test.run "TestModuleLoadPTXDir\$/^($g)\$" -test.v >"$R/jit/$v-$n.txt" 2>&1
echo "JIT $v $n rc=$?"
