# Sourced by the command-line tests (cli_hostile_test.sh, calibrate_cli_test.sh) after they set
# `bin` (the dtensor binary) and `fails=0`.
#
# expect STATUS NEEDLE -- ARGS...: runs `dtensor ARGS` (stdin from /dev/null, killed after
# EXPECT_TIMEOUT seconds, default 60) and checks the exit status and that NEEDLE appears in what it
# printed; a mismatch prints the output's first lines and counts in `fails`.
expect() {
  local want="$1" needle="$2"
  shift 3
  local out rc
  out=$(timeout -s KILL "${EXPECT_TIMEOUT:-60}" "$bin" "$@" </dev/null 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAILED: dtensor $* -> exit $rc (want $want), output:"
    echo "$out" | head -8
    fails=$((fails + 1))
  else
    echo "ok: dtensor $* -> $rc"
  fi
}
