#!/usr/bin/env bash
# Builds the npm package into pkg/: the wasm engine (release, size-tuned, wasm-opt from npm
# binaryen — never Debian's, which corrupts wasm-bindgen output), the JS facade, the worker,
# the types and the package manifest; then `npm pack`s it. Prints raw and gzip sizes.
#   bash scripts/build-pkg.sh            (expects scripts/setup.sh to have run)
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
WASM_OPT="${SIMPLYSYNC_TOOLS:-/opt/simplysync-tools}/node_modules/.bin/wasm-opt"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"

rm -rf pkg
wasm-pack build --profile wasm-release --target web --mode no-install --out-dir pkg --out-name simplysync --no-pack . -- --locked >&2
# Two -Oz passes: the second finds what the first's inlining exposed (-1.9 KB gzip, ~15 s), and
# --converge repeats them until nothing changes (-0.7 KB gzip, ~30 s more);
# producers and target-features sections are metadata no browser reads.
"$WASM_OPT" -Oz -Oz --converge --strip-producers --strip-target-features \
  --enable-bulk-memory --enable-reference-types --enable-nontrapping-float-to-int \
  --enable-sign-ext --enable-mutable-globals --enable-multivalue \
  pkg/simplysync_bg.wasm -o pkg/simplysync_bg.opt.wasm
mv pkg/simplysync_bg.opt.wasm pkg/simplysync_bg.wasm
rm -f pkg/.gitignore pkg/package.json pkg/README.md
cp js/*.d.ts pkg-template/README.md LICENSE pkg/
# The JS without comments and whitespace (esbuild, one file at a time, no bundling): names stay,
# so stack traces still read; the readable sources with their comments are js/ in the repo.
# The wasm-bindgen glue too. -14 KB gzip of the package (BENCHMARKS.md, round seventeen).
# The glue's local names are shortened as well (-717 bytes gzip): they are generated helpers
# (`passStringToWasm0`, `handleError`, …) that say nothing in a stack trace; what it exports,
# and the import names the wasm module looks up, are kept.
ESBUILD="${SIMPLYSYNC_TOOLS:-/opt/simplysync-tools}/node_modules/.bin/esbuild"
strip_js() { "$ESBUILD" "$1" --minify-whitespace --minify-syntax --format=esm --log-level=warning --outfile="$2" --allow-overwrite "${@:3}"; }
for f in js/*.js; do strip_js "$f" "pkg/$(basename "$f")"; done
# Tabs tell each other the package's version (hub.js).
grep -q "0.0.0-dev" pkg/hub.js || { echo "build-pkg.sh: hub.js lost its PACKAGE_VERSION placeholder" >&2; exit 1; }
sed -i "s/0\.0\.0-dev/$VERSION/" pkg/hub.js
# Its classes keep their names (an error's "expected instance of Identity", the console's view).
classes=$(sed -n 's/^export class \([A-Za-z0-9_$]*\).*/\1/p' pkg/simplysync.js)
if [ "$(echo "$classes" | grep -c .)" != "$(grep -c '^export class ' pkg/simplysync.d.ts)" ]; then
  echo "build-pkg.sh: the glue's classes ($classes) are not the ones its types declare" >&2
  exit 1
fi
for c in $classes; do
  echo "Object.defineProperty($c, 'name', { value: '$c' });" >> pkg/simplysync.js
done
strip_js pkg/simplysync.js pkg/simplysync.js --minify-identifiers
sed "s/\"version\": \"0.0.0\"/\"version\": \"$VERSION\"/" pkg-template/package.json > pkg/package.json

size() { printf '%-24s %9d bytes  %9d gzip\n' "$1" "$(wc -c < "pkg/$1")" "$(gzip -9 -c "pkg/$1" | wc -c)"; }
JS_FILES=$(cd js && ls *.js)
for f in simplysync_bg.wasm simplysync.js $JS_FILES; do size "$f" >&2; done
total_gz=$(cd pkg && cat simplysync_bg.wasm simplysync.js $JS_FILES | gzip -9 -c | wc -c)
echo "package (wasm + js), gzip -9 as one stream: $total_gz bytes" >&2
(cd pkg && npm pack --silent >&2)
echo "$ROOT/pkg/simplysync-$VERSION.tgz"
