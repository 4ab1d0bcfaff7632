#!/usr/bin/env bash
# CLI checks of model files: `viper inspect` and `viper model-dir` on the
# seed corpus (fuzz/corpus/safetensors: files the codec wrote, a legacy file,
# plain safetensors files and one file of each hostile class). Every hostile
# file is a clear exit 1 with a short message naming it, never a crash;
# plain files are valid but visibly unverified.
set -u
viper="$1"
src="$2"
corpus="$src/fuzz/corpus/safetensors"
. "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# ---------------------------------------------------------------- inspect
expect_rc 0 "inspect a format-2 file" "$viper" inspect --file "$corpus/valid-v2-spec.safetensors" --json "$tmp/spec.json"
expect_in "$tmp/out" "verified, data+header" "inspect says both checksums were verified"
expect_in "$tmp/out" "8-byte length prefix, header 288, data 9" "inspect prints the specification's header size N"
expect_in "$tmp/spec.json" '"header_bytes": 288' "inspect JSON: header_bytes is N"
expect_in "$tmp/spec.json" '"data_offset": 296' "inspect JSON: data_offset is 8 + N"
expect_in "$tmp/spec.json" '"kind": "data+header"' "inspect JSON: checksum kind"
expect_in "$tmp/spec.json" '"status": "verified"' "inspect JSON: checksum status"

expect_rc 0 "inspect a legacy file" "$viper" inspect --file "$corpus/valid-legacy-v4.safetensors"
expect_in "$tmp/out" "data only (legacy" "inspect says a legacy file verifies its data only"

expect_rc 0 "inspect a plain safetensors file" "$viper" inspect --file "$corpus/valid-plain-pt.safetensors" --json "$tmp/plain.json"
expect_in "$tmp/out" "checksum      unverified" "inspect says a plain file is unverified"
expect_in "$tmp/plain.json" '"status": "unverified"' "inspect JSON: unverified"
expect_rc 1 "inspect --require-checksum refuses a plain file" \
  "$viper" inspect --file "$corpus/valid-plain-pt.safetensors" --require-checksum
expect_in "$tmp/err" "unverified" "the refusal says why"

# --no-verify skips hashing the data, never the header checksum.
expect_rc 0 "inspect --no-verify on a flipped data bit" "$viper" inspect --file "$corpus/bad-data-bit-flip.safetensors" --no-verify
expect_in "$tmp/out" "data not verified: --no-verify; header checksum verified" "--no-verify says what was skipped"
expect_rc 1 "inspect --no-verify on an edited header" "$viper" inspect --file "$corpus/bad-header-transposed.safetensors" --no-verify

# Every hostile file: exit 1 (not a signal), a short message naming the file.
hostile=0
for f in "$corpus"/bad-*.safetensors; do
  name="$(basename "$f")"
  hostile=$((hostile + 1))
  expect_rc 1 "inspect $name" "$viper" inspect --file "$f"
  expect_in "$tmp/err" "$name" "inspect $name names the file"
  size=$(wc -c <"$tmp/err")
  if [ "$size" -gt 1000 ]; then echo "FAIL: inspect $name: a $size-byte message"; fails=$((fails + 1)); else passes=$((passes + 1)); fi
done
if [ "$hostile" -lt 20 ]; then echo "FAIL: only $hostile hostile files in $corpus"; fails=$((fails + 1)); fi
expect_rc 1 "inspect a damaged checksum key" "$viper" inspect --file "$corpus/bad-checksum-key-case.safetensors"
expect_in "$tmp/err" "'Viper.checksum' is not a key Viper writes" "a damaged key is not 'absent'"
expect_rc 1 "inspect deep nesting" "$viper" inspect --file "$corpus/bad-nested-extra-field.safetensors"
expect_in "$tmp/err" "nests deeper than 64 levels" "deep nesting is named"

# -------------------------------------------------------------- model-dir
flat="$tmp/flat"
mkdir "$flat"
cp "$corpus/valid-v2-spec.safetensors" "$flat/model-v3.safetensors"   # viper.version 3
cp "$corpus/valid-plain-pt.safetensors" "$flat/model-v4.safetensors"  # another writer's file
touch "$flat/.model-v9.safetensors.tmp-1-0"                            # a temporary: ignored
# By default versions are judged as a default consumer (pfs_require_checksum)
# judges them: the plain file is refused, version 3 served.
expect_rc 1 "model-dir refuses an unverified plain file as a default consumer" "$viper" model-dir --dir "$flat"
expect_in "$tmp/out" "served: version 3" "model-dir serves what a default consumer serves"
expect_in "$tmp/out" "refused by a default consumer" "model-dir says why the plain file is refused"
expect_rc 1 "model-dir --require-checksum (the default)" "$viper" model-dir --dir "$flat" --require-checksum
expect_in "$tmp/out" "served: version 3" "--require-checksum serves the newest verified version"
expect_rc 0 "model-dir --accept-unverified serves an unverified plain file" "$viper" model-dir --dir "$flat" --accept-unverified --json "$tmp/dir.json"
expect_in "$tmp/out" "verified (data+header)" "model-dir lists the verified version"
expect_in "$tmp/out" "unverified (no Viper checksum)" "model-dir lists the unverified version"
expect_in "$tmp/out" "served: version 4" "model-dir serves the newest valid version"
expect_in "$tmp/out" "UNVERIFIED" "the served version's status is visible"
expect_in "$tmp/dir.json" '"served_verified": false' "model-dir JSON: served_verified"
expect_rc 2 "model-dir --require-checksum --accept-unverified" "$viper" model-dir --dir "$flat" --require-checksum --accept-unverified

cp "$corpus/bad-nested-600k.safetensors" "$flat/model-v5.safetensors"
cp "$corpus/bad-header-iteration.safetensors" "$flat/model-v6.safetensors"
expect_rc 1 "model-dir with hostile versions" "$viper" model-dir --dir "$flat" --accept-unverified
expect_in "$tmp/out" "header must be a JSON object" "model-dir gives the nested file's reason"
expect_in "$tmp/out" "header checksum mismatch" "model-dir gives the edited header's reason"
expect_in "$tmp/out" "served: version 4" "hostile versions are skipped"

expect_rc 1 "model-dir --keep 1" "$viper" model-dir --dir "$flat" --keep 1 --accept-unverified
expect_in "$tmp/out" "removed: version 3" "--keep removes old versions"
expect_not_in "$tmp/out" "removed: version 4" "--keep never removes the served version"
if [ -e "$flat/model-v3.safetensors" ] || [ ! -e "$flat/model-v4.safetensors" ] || [ ! -e "$flat/model-v6.safetensors" ]; then
  echo "FAIL: --keep 1 left the wrong files: $(ls "$flat")"; fails=$((fails + 1)); else passes=$((passes + 1)); fi

tfs="$tmp/tfs"
mkdir -p "$tfs/3" "$tfs/7" "$tfs/8" "$tfs/.9.tmp-1-0"
cp "$corpus/valid-v2-spec.safetensors" "$tfs/3/model.safetensors"
cp "$corpus/valid-v2-table.safetensors" "$tfs/7/model.safetensors"  # viper.version 7
cp "$corpus/valid-plain-pt.safetensors" "$tfs/.9.tmp-1-0/model.safetensors"
expect_rc 0 "model-dir --layout tf-serving" "$viper" model-dir --dir "$tfs" --layout tf-serving
expect_in "$tmp/out" "served: version 7 ($tfs/7/model.safetensors)" "tf-serving layout: <dir>/<version>/model.safetensors"
expect_not_in "$tmp/out" "version 8" "an empty version directory is not a version"
expect_not_in "$tmp/out" "version 9" "a hidden temporary directory is not a version"

expect_rc 2 "model-dir --layout bogus" "$viper" model-dir --dir "$tfs" --layout bogus
expect_in "$tmp/err" "--layout: expected flat or tf-serving" "the bad layout is named"
expect_rc 2 "model-dir --keep -1" "$viper" model-dir --dir "$tfs" --keep -1

finish "model files"
