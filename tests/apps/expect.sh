# Shared by the CLI test scripts (sourced): a scratch directory $tmp removed
# on exit, the pass/fail counters, and the checks. Each check counts a pass
# or prints FAIL with the first lines of what it saw; `finish NAME` prints
# the counts and fails when any check failed.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
py=/usr/bin/python3
[ -x "$py" ] || py=python3

fail() {  # fail <message> [file to quote]
  echo "FAIL: $1"
  [ $# -gt 1 ] && head -c 600 "$2" | head -5 | sed 's/^/  | /'
  fails=$((fails + 1))
}

expect_rc() {  # expect_rc <rc> <description> <command...>: stdout in $tmp/out, stderr in $tmp/err
  local want="$1" what="$2"
  shift 2
  timeout "${EXPECT_TIMEOUT_S:-300}" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then fail "$what: exit $got, expected $want" "$tmp/err"; else passes=$((passes + 1)); fi
}
expect_in() {  # expect_in <file> <text> <description>
  if grep -qF -- "$2" "$1"; then passes=$((passes + 1)); else fail "$3: '$2' not in output" "$1"; fi
}
expect_not_in() {  # expect_not_in <file> <text> <description>
  if grep -qF -- "$2" "$1"; then fail "$3: '$2' in output"; else passes=$((passes + 1)); fi
}
expect_match() {  # expect_match <file> <extended regex> <description>
  if grep -qE -- "$2" "$1"; then passes=$((passes + 1)); else fail "$3: /$2/ not in output" "$1"; fi
}
expect_json() {  # expect_json <file> <schema> <description>: parses, carries "schema": <schema>
  if "$py" -c 'import json,sys; d=json.load(open(sys.argv[1], "rb")); sys.exit(0 if d.get("schema")==sys.argv[2] else 1)' "$1" "$2" 2>/dev/null; then
    passes=$((passes + 1))
  else
    fail "$3: $1 is not JSON with schema $2" "$1"
  fi
}
expect_stdout_json() {  # expect_stdout_json <description> <command...>: stdout alone is one JSON document
  local what="$1"
  shift
  if "$@" 2>"$tmp/err" | "$py" -m json.tool >/dev/null 2>"$tmp/jsonerr"; then
    passes=$((passes + 1))
  else
    fail "$what: stdout is not pure JSON" "$tmp/jsonerr"
  fi
}
finish() {  # finish <name>
  echo "$1: $passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
