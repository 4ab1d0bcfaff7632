#!/usr/bin/env bash
# Files in directories other users can write into (issue 26): nothing the CLI
# writes goes through a link planted at a temporary name, gnuplot runs from a
# private directory, model-dir and inspect never follow a link, never block
# on a FIFO, never quote a file's bytes, never delete outside the directory,
# and model-dir --keep judges versions as a default consumer does.
#
# A planted name is predicted the way an attacker on main could: the
# temporaries were named after the pid, and `sh -c '...; exec viper'` keeps
# the pid, so the links are planted under exactly the names main used.
set -u
viper="$1"
src="$2"
corpus="$src/fuzz/corpus/safetensors"
log="$src/datasets/logs/sgd-h256.csv.gz"
. "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

secret="TOPSECRET-do-not-leak-0123456789"
victim="$tmp/victim"                 # stands for a root-only file
printf '%s\n' "$secret" >"$victim"
chmod 600 "$victim"
victim_intact() {  # victim_intact <description>
  if [ "$(cat "$victim")" = "$secret" ]; then passes=$((passes + 1)); else fail "$1: the link's target was written"; fi
}
regular_file() {  # regular_file <path> <description>
  if [ -f "$1" ] && [ ! -L "$1" ]; then passes=$((passes + 1)); else fail "$2: $1 is not a regular file"; fi
}
# plant <names> <target> <command...>: sh plants a link to <target> at each
# name (@PID@ = its own pid), then execs the command under that pid.
plant='for n in $1; do ln -s "$2" "$(printf %s "$n" | sed "s/@PID@/$$/g")"; done; shift 2; exec "$@"'

# ------------------------------------------------ item 1: gnuplot's files
shared="$tmp/shared"   # a world-writable temporary directory (TMPDIR)
out="$tmp/o"
mkdir -p "$shared" "$out"
chmod 1777 "$shared"
names="$shared/viper-gnuplot-@PID@.err $shared/.viper-gnuplot-@PID@.gp.tmp.@PID@"
names="$names $out/.sim.json.tmp.@PID@ $out/.trace.json.tmp.@PID@ $out/.req.csv.tmp.@PID@ $out/.plot.png.tmp.@PID@"
plot_rc=0
command -v gnuplot >/dev/null 2>&1 || plot_rc=1
expect_rc "$plot_rc" "simulate --plot --json --trace --requests-csv with links planted at every temporary name" \
  env TMPDIR="$shared" sh -c "$plant" sh "$names" "$victim" \
  "$viper" simulate --log "$log" -q --strategies epoch,oracle --trace-strategy epoch --plot "$out/plot.png" \
  --json "$out/sim.json" --trace "$out/trace.json" --requests-csv "$out/req.csv"
victim_intact "simulate's outputs and gnuplot's script and stderr"
if [ "$plot_rc" -eq 0 ]; then
  regular_file "$out/plot.png" "--plot"
  regular_file "$out/sim.json" "--json"
  regular_file "$out/trace.json" "--trace"
  regular_file "$out/req.csv" "--requests-csv"
  expect_json "$out/sim.json" "viper.simulate/1" "--json beside planted links"
fi
leftover="$(find "$shared" -mindepth 1 ! -type l | head -3)"
[ -z "$leftover" ] && passes=$((passes + 1)) || fail "gnuplot's private directory was left behind: $leftover"
leftover="$(find "$out" -name '.*tmp*' ! -type l | head -3)"
[ -z "$leftover" ] && passes=$((passes + 1)) || fail "temporaries left beside the outputs: $leftover"

# ------------------------------------------------ item 2: every CLI output
for cmd in plan fit; do
  case "$cmd" in
    plan) args=(plan --log "$log" --strategy epoch --json "$out/$cmd.json") ;;
    fit) args=(fit --log "$log" --json "$out/$cmd.json") ;;
  esac
  expect_rc 0 "$cmd --json with a link planted at its temporary name" \
    sh -c "$plant" sh "$out/.$cmd.json.tmp.@PID@" "$victim" "$viper" "${args[@]}"
  victim_intact "$cmd --json"
  regular_file "$out/$cmd.json" "$cmd --json"
done
# A link planted at the output's own name is replaced, never written through
# (not even into a device or FIFO it points to); a FIFO nobody reads is an
# error at once, never a hang.
ln -s "$victim" "$out/final.json"
expect_rc 0 "plan --json onto a planted link" "$viper" plan --log "$log" --strategy epoch --json "$out/final.json"
victim_intact "a link at the output's name"
regular_file "$out/final.json" "the link at the output's name is replaced"
mkfifo "$out/nobody.json"
EXPECT_TIMEOUT_S=20 expect_rc 1 "plan --json into a FIFO nobody reads returns" "$viper" plan --log "$log" --strategy epoch --json "$out/nobody.json"
# (/dev/fd/1, not /dev/stdout: a regression must not replace the machine's
# /dev/stdout, as main did when stdout was a regular file.)
expect_rc 0 "plan --json /dev/fd/1 into a regular file" "$viper" plan --log "$log" --strategy epoch --json /dev/fd/1
expect_in "$tmp/out" '"schema": "viper.plan/1"' "JSON on /dev/fd/1, after the table"
expect_in "$tmp/out" 'schedule:' "the table is kept beside the JSON"
umask_was="$(umask)"; umask 022
expect_rc 0 "plan --json under umask 022" "$viper" plan --log "$log" --strategy epoch --json "$out/mode.json"
umask "$umask_was"
[ "$(stat -c %a "$out/mode.json")" = 644 ] && passes=$((passes + 1)) || fail "a report's mode is 0666 & ~umask: $(stat -c %a "$out/mode.json")"

# ----------------------------------------------- item 6: model-dir --keep
# Legacy files (data checksum only) with an empty data section, whose XXH3-64
# is 2d06800538d394c2: verified versions of any number, made here.
legacy() {  # legacy <version> <path>
  "$py" - "$1" "$2" <<'PY'
import json, struct, sys
v, path = int(sys.argv[1]), sys.argv[2]
h = json.dumps({"__metadata__": {"viper.checksum": "2d06800538d394c2", "viper.version": str(v),
                                 "viper.iteration": str(10 * v)},
                "w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}).encode()
h += b" " * (-len(h) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h)
PY
}
keep="$tmp/keep"
mkdir "$keep"
for v in 0 1 2; do legacy "$v" "$keep/model-v$v.safetensors"; done
head -c 200 "$corpus/valid-v2-spec.safetensors" >"$keep/model-v3.safetensors"   # viper.version 3, truncated
cp "$corpus/valid-plain-pt.safetensors" "$keep/model-v5.safetensors"            # no Viper checksum
expect_rc 1 "model-dir --keep 1 with a truncated and an unchecksummed newer version" \
  "$viper" model-dir --dir "$keep" --keep 1 --json "$tmp/keep.json"
expect_in "$tmp/out" "served: version 2" "model-dir serves what a default consumer serves (v2)"
expect_not_in "$tmp/out" "removed: version 2" "--keep never removes the version a consumer would serve"
expect_in "$tmp/out" "removed: version 1" "--keep removes older valid versions"
expect_in "$tmp/keep.json" '"valid_versions": [' "model-dir JSON: valid_versions"
[ -f "$keep/model-v2.safetensors" ] && passes=$((passes + 1)) || fail "--keep 1 deleted the only version a default consumer accepts"
[ -f "$keep/model-v5.safetensors" ] && [ -f "$keep/model-v3.safetensors" ] && passes=$((passes + 1)) ||
  fail "--keep 1 removed a version newer than the served one: $(ls "$keep")"
[ ! -e "$keep/model-v0.safetensors" ] && passes=$((passes + 1)) || fail "--keep 1 kept v0: $(ls "$keep")"
expect_rc 1 "model-dir --accept-unverified" "$viper" model-dir --dir "$keep" --accept-unverified
expect_in "$tmp/out" "served: version 5" "--accept-unverified judges as a consumer that serves unchecksummed files"

# --------------------------------------- item 7: deletion through symlinks
elsewhere="$tmp/elsewhere"
tfs="$tmp/tfs"
mkdir -p "$elsewhere" "$tfs/3"
legacy 2 "$elsewhere/model.safetensors"
cp "$corpus/valid-v2-spec.safetensors" "$tfs/3/model.safetensors"   # viper.version 3
ln -s "$elsewhere" "$tfs/2"
expect_rc 1 "model-dir --layout tf-serving --keep 1 with DIR/2 -> elsewhere" \
  "$viper" model-dir --dir "$tfs" --layout tf-serving --keep 1
[ -f "$elsewhere/model.safetensors" ] && passes=$((passes + 1)) || fail "model-dir deleted a file outside the directory through DIR/2"
expect_in "$tmp/out" "symbolic link" "the linked version directory is listed as skipped"
expect_in "$tmp/out" "served: version 3" "tf-serving: the real version is served"
flat="$tmp/flatlink"
mkdir "$flat"
legacy 1 "$elsewhere/model-v1.safetensors"
ln -s "$elsewhere/model-v1.safetensors" "$flat/model-v1.safetensors"
legacy 4 "$flat/model-v4.safetensors"
expect_rc 1 "model-dir --keep 1 with a flat version that is a link" "$viper" model-dir --dir "$flat" --keep 1
[ -L "$flat/model-v1.safetensors" ] && [ -f "$elsewhere/model-v1.safetensors" ] && passes=$((passes + 1)) ||
  fail "model-dir removed a link or its target"

# ------------------------------ item 8: the read side: FIFOs, links, bytes
fifo="$tmp/fifo"
mkdir "$fifo"
legacy 3 "$fifo/model-v3.safetensors"
mkfifo "$fifo/model-v5.safetensors"
EXPECT_TIMEOUT_S=20 expect_rc 1 "model-dir with a FIFO named model-v5.safetensors returns" "$viper" model-dir --dir "$fifo"
expect_in "$tmp/out" "served: version 3" "the FIFO is skipped, the real version served"
expect_in "$tmp/out" "FIFO" "the FIFO is named as such"
EXPECT_TIMEOUT_S=20 expect_rc 1 "inspect on a FIFO returns" "$viper" inspect --file "$fifo/model-v5.safetensors"
mkdir -p "$tmp/tffifo/4"
mkfifo "$tmp/tffifo/4/model.safetensors"
EXPECT_TIMEOUT_S=20 expect_rc 1 "model-dir tf-serving with a FIFO as the model file returns" \
  "$viper" model-dir --dir "$tmp/tffifo" --layout tf-serving

leak="$tmp/leak"
mkdir "$leak"
legacy 1 "$leak/model-v1.safetensors"
ln -s "$victim" "$leak/model-v2.safetensors"
"$py" -c 'import struct,sys; b=b"{"+sys.argv[1].encode()*4; open(sys.argv[2],"wb").write(struct.pack("<Q",len(b))+b)' \
  "$secret" "$leak/model-v3.safetensors"   # a length prefix, then text that is not JSON
EXPECT_TIMEOUT_S=20 expect_rc 1 "model-dir with a link to a secret and a non-JSON header" "$viper" model-dir --dir "$leak" --json "$tmp/leak.json"
for f in "$tmp/out" "$tmp/err" "$tmp/leak.json"; do expect_not_in "$f" "TOPSECRET" "model-dir quotes no file bytes ($(basename "$f"))"; done
expect_rc 1 "inspect refuses a link" "$viper" inspect --file "$leak/model-v2.safetensors"
expect_in "$tmp/err" "symbolic link" "inspect says why"
expect_not_in "$tmp/err" "TOPSECRET" "inspect quotes no bytes of a link's target"
expect_rc 1 "inspect --follow-symlinks on a non-safetensors target" "$viper" inspect --file "$leak/model-v2.safetensors" --follow-symlinks
expect_not_in "$tmp/err" "TOPSECRET" "inspect quotes no bytes of a text file"
expect_rc 1 "inspect a non-JSON header" "$viper" inspect --file "$leak/model-v3.safetensors"
expect_not_in "$tmp/err" "TOPSECRET" "the JSON parser's 'last read' excerpt is not quoted"
ln -s "$corpus/valid-v2-spec.safetensors" "$tmp/spec-link.safetensors"
expect_rc 0 "inspect --follow-symlinks reads a link's target" "$viper" inspect --file "$tmp/spec-link.safetensors" --follow-symlinks

# ------------------------------------- item 12: "\0garbage" in the header
"$py" - "$corpus/valid-legacy-v4.safetensors" "$tmp/nul.safetensors" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = b[8:8 + n].rstrip(b" ") + b"\0garbage"
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
PY
expect_rc 1 "inspect refuses a header followed by \\0garbage" "$viper" inspect --file "$tmp/nul.safetensors"
expect_in "$tmp/err" "NUL byte" "the NUL byte is named"

finish "security files"
