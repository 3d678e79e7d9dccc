#!/usr/bin/env bash
# The README's GPU benchmark table: the train step of BERT-base (seq 128), BERT-large (seq 512)
# and ViT-B/16 (224x224) in bfloat16 compute with float32 parameters and optimizer state, our
# attention through cuDNN's fused kernel where it can run (`--attention auto`), MFU against the
# GPU's bf16 data-sheet peak (train/flops.py). cuDNN's kernel has no attention-probability
# dropout, so both libraries run with it at 0 (BERT keeps its hidden dropout 0.1).
#
#   bash benchmarks/gpu_table.sh OUTDIR [more benchmark flags, which win over these]
#   PYTHON=/path/to/python bash benchmarks/gpu_table.sh workdirs/bench/gpu --peer none
#
#   ROWS="vit_b16" bash benchmarks/gpu_table.sh workdirs/bench/gpu      # some rows only
#
# Needs jax with its CUDA plugin; the peer needs transformers 4.57.6 (`pip install -e .[bench]`),
# else pass --peer none. DRY_RUN=1 prints the commands instead of running them. A row that fails
# does not stop the others (a GPU session is short); the script names the failed rows at the end
# and exits 1. With the peer, the three rows take longer than 8 minutes on one H100 (each BERT
# row compiles and times three contenders): where a machine is lent for minutes at a time, run
# them one call each with ROWS, which names rows by their names below.
set -euo pipefail
if [[ $# -lt 1 ]]; then
    echo "usage: bash benchmarks/gpu_table.sh OUTDIR [benchmark flags]" >&2
    exit 2
fi
out=$1
shift
python=${PYTHON:-python3}
common=(--dtype bfloat16 --attention auto --attention_dropout 0 --steps 10 --repeats 5)
rows=(
    "bert_base_128 --model bert --size base --seq 128 --batch 256"
    "bert_large_512 --model bert --size large --seq 512 --batch 32"
    "vit_b16 --model vit --size B/16 --batch 256"
)
names=()
for row in "${rows[@]}"; do names+=("${row%% *}"); done
for wanted in ${ROWS:-}; do
    if [[ " ${names[*]} " != *" $wanted "* ]]; then
        echo "gpu_table.sh: ROWS names $wanted, which is not a row; the rows: ${names[*]}" >&2
        exit 2
    fi
done
[[ -n ${DRY_RUN:-} ]] || mkdir -p "$out"
failed=()
for row in "${rows[@]}"; do
    read -r -a words <<< "$row"
    name=${words[0]}
    [[ -z ${ROWS:-} || " $ROWS " == *" $name "* ]] || continue
    command=("$python" -m benchmarks.train_step "${words[@]:1}" "${common[@]}"
             --json "$out/$name.json" --markdown "$out/$name.md" "$@")
    if [[ -n ${DRY_RUN:-} ]]; then
        echo "${command[@]}"
    elif ! "${command[@]}"; then
        failed+=("$name")
    fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "gpu_table.sh: failed rows: ${failed[*]} (the others' tables are in $out)" >&2
    exit 1
fi
