#!/bin/bash
# plan_compare.sh OLD_PDONNX NEW_PDONNX OUTDIR - plans every profile (the zoo's
# tests/fixtures/profiles and PipeDream's ../shared/pipedream-profiles) with
# every algorithm, both cost models, 2/3/4/8 workers and the 2x2 and 4x2
# topologies, with both binaries, and compares the plan files: those whose old
# run did not hit the prefix fallback must be byte-identical (docs/PLANNER.md).
OLD=$1; NEW=$2; OUT=$3
root=$(cd "$(dirname "$0")/.." && pwd)
profs="$(ls $root/tests/fixtures/profiles/*.json) $(ls $root/../shared/pipedream-profiles/*/graph.txt)"
for bin in old new; do
  B=$OLD; [ $bin = new ] && B=$NEW
  mkdir -p $OUT/$bin
  for p in $profs; do
    name=$(basename $p .json); [ $name = graph.txt ] && name=$(basename $(dirname $p))
    for algo in pipedream 2bw bipartition uniform params avgpipe; do
      for cm in default pipedream; do
        for w in 2 3 4 8 "4 --topology 2x2 --bandwidth 10e9,1.25e9" "8 --topology 4x2 --bandwidth 10e9,1.25e9"; do
          tag=$name.$algo.$cm.$(echo $w | tr " " "_" | tr -d ",")
          timeout 120 $B plan --profile $p --workers $w --algo $algo --cost-model $cm -o $OUT/$bin/$tag.json \
            > $OUT/$bin/$tag.out 2>&1
          echo "rc $?" >> $OUT/$bin/$tag.out
        done
      done
    done
  done
done
same=0; differ=0; fb_same=0; fb_changed=0; noplan=0
for o in $OUT/old/*.out; do
  t=$(basename $o .out)
  if [ ! -f $OUT/old/$t.json ]; then noplan=$((noplan+1)); continue; fi
  if grep -q "prefixes of one topological order" $o; then
    if cmp -s $OUT/old/$t.json $OUT/new/$t.json; then fb_same=$((fb_same+1)); else fb_changed=$((fb_changed+1)); fi
  elif cmp -s $OUT/old/$t.json $OUT/new/$t.json; then same=$((same+1))
  else differ=$((differ+1)); echo "DIFFERS (no fallback): $t"; fi
done
echo "no fallback: $same identical, $differ different; fallback: $fb_same identical, $fb_changed changed; old made no plan: $noplan"
[ $differ = 0 ]
