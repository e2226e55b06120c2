#!/usr/bin/env bash
# The thread policy (dtensor/core/compute_threads.h): `dtensor launch` gives each of N local ranks
# max(1, cores / N) compute threads through OMP_NUM_THREADS and OPENBLAS_NUM_THREADS, unless the user
# set them; `dtensor train` on thread ranks says how many each rank uses, and --threads overrides it.
set -uo pipefail
bin="$1"
fails=0
check() {  # check WHAT GOT WANT
  if [ "$2" = "$3" ]; then echo "ok: $1: $2"; else echo "FAILED: $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}
cores=$(nproc)
want=$((cores / 2)); [ "$want" -lt 1 ] && want=1
got=$(env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS "$bin" launch -n 2 -- sh -c 'echo "$OMP_NUM_THREADS/$OPENBLAS_NUM_THREADS"' | sort -u)
check "launch -n 2 on $cores cores" "$got" "$want/$want"
got=$(env -u OPENBLAS_NUM_THREADS OMP_NUM_THREADS=3 "$bin" launch -n 2 -- sh -c 'echo "$OMP_NUM_THREADS/${OPENBLAS_NUM_THREADS:-unset}"' | sort -u)
check "launch -n 2 with OMP_NUM_THREADS=3 set" "$got" "3/unset"
want=$((cores / 4)); [ "$want" -lt 1 ] && want=1
got=$(env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS "$bin" train --mesh tp=4 --steps 1 --sample 0 --seq 8 --dim 16 --heads 4 --layers 1 |
      grep -o '[0-9]* compute thread' | grep -o '^[0-9]*')
check "train --mesh tp=4 on $cores cores" "$got" "$want"
got=$("$bin" train --mesh tp=2 --threads 3 --steps 1 --sample 0 --seq 8 --dim 16 --heads 2 --layers 1 |
      grep -o '[0-9]* compute thread' | grep -o '^[0-9]*')
check "train --threads 3" "$got" "3"
echo "thread policy: $fails failure(s)"
[ "$fails" -eq 0 ]
