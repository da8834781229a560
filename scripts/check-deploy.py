"""Static checks of the deploy kit (deploy/, .dockerignore): the rules the kit promises, read off
its files, without a container runtime. Run by scripts/check-deploy.sh (which adds shellcheck,
`docker compose config`, systemd-analyze and the Litestream restore drill).

    python3 scripts/check-deploy.py ROOT        # needs PyYAML (Debian: python3-yaml)

Prints one line per check, `ok` or `FAIL`, and exits 1 if any failed.
"""

import posixpath
import re
import subprocess
import sys
import tomllib

import yaml

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'ok  ' if ok else 'FAIL'}  {name}" + (f": {detail}" if detail and not ok else ""))


def read(path):
    with open(posixpath.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def load_yaml(path):
    try:
        return yaml.safe_load(read(path))
    except (OSError, yaml.YAMLError) as e:
        check(f"{path} parses as YAML", False, str(e))
        sys.exit(1)


compose = load_yaml("deploy/compose.yaml")
sqlite = load_yaml("deploy/compose.sqlite.yaml")
litestream = load_yaml("deploy/litestream.yml")
check("deploy/compose.yaml, compose.sqlite.yaml and litestream.yml parse as YAML", True)
compose_files = {"deploy/compose.yaml": compose, "deploy/compose.sqlite.yaml": sqlite}

# --- The Dockerfile: its stages, their bases and the runtime stage's ENV. --------------------
dockerfile = read("deploy/Dockerfile")
stages = []  # (base, alias, [instruction lines])
for line in dockerfile.splitlines():
    s = line.strip()
    if not s or s.startswith("#"):
        continue
    m = re.match(r"(?i)FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$", s)
    if m:
        stages.append((m.group(1), (m.group(2) or "").lower(), []))
    elif stages:
        stages[-1][2].append(s)
aliases = {alias for _, alias, _ in stages if alias}


def stage_env(alias):
    """ENV of a stage, following FROM <earlier stage> chains."""
    env = {}
    for base, a, lines in stages:
        if a == alias:
            if base.lower() in aliases:
                env.update(stage_env(base.lower()))
            for line in lines:
                if line.upper().startswith("ENV "):
                    env.update(dict(re.findall(r"(\w+)=(\S+)", line[4:])))
    return env


def version_tuple(text):
    return tuple(int(x) for x in text.split("."))


EXACT_SEMVER = {"rust", "litestream/litestream"}  # images whose tags float unless X.Y.Z


def pinned(ref):
    """An image reference pinned to one release: a digest, or a tag naming an exact version."""
    if re.search(r"@sha256:[0-9a-f]{64}$", ref):
        return True, ""
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag:
        return False, "no tag (a bare name means :latest)"
    if tag == "latest" or not re.search(r"\d", tag):
        return False, f"floating tag :{tag}"
    if posixpath.basename(name) in EXACT_SEMVER or name in EXACT_SEMVER:
        if not re.search(r"\d+\.\d+\.\d+", tag):
            return False, f":{tag} is not an exact X.Y.Z release"
    elif not re.search(r"\d+\.\d+|\d{8}|\d{4}-\d{2}-\d{2}", tag):
        return False, f":{tag} names no exact version or date"
    return True, ""


for base, alias, _ in stages:
    if base.lower() in aliases:
        continue
    ok, why = pinned(base)
    check(f"Dockerfile FROM {base} is pinned", ok, why)
for path, doc in compose_files.items():
    for svc, spec in doc["services"].items():
        if "image" in spec:
            ok, why = pinned(spec["image"])
            check(f"{path}: {svc} image {spec['image']} is pinned", ok, why)
        else:
            check(f"{path}: {svc} has an image or a build", "build" in spec)

cargo = tomllib.loads(read("Cargo.toml"))
rust_version = cargo["workspace"]["package"]["rust-version"]
rust_tag = next((b for b, _, _ in stages if b.startswith("rust:")), "")
m = re.match(r"rust:(\d+\.\d+\.\d+)", rust_tag)
check(
    f"the build stage's Rust ({rust_tag}) is at least the workspace's rust-version {rust_version}",
    m and version_tuple(m.group(1)) >= version_tuple(rust_version),
)
setup = read("scripts/setup.sh")
ls_setup = re.search(r'^LITESTREAM_VERSION="([^"]+)"', setup, re.M)
ls_image = next((b for b, _, _ in stages if b.startswith("litestream/litestream:")), "")
check(
    "Dockerfile's Litestream image is the version the drill test runs (setup.sh LITESTREAM_VERSION)",
    ls_setup and ls_image == f"litestream/litestream:{ls_setup.group(1)}",
    f"{ls_image} vs {ls_setup and ls_setup.group(1)}",
)
check("the image's last stage (the default target) is the relay", stages and stages[-1][1] == "relay")
check(
    "the build compiles the relay alone, locked",
    "cargo build --release --locked -p simplysync-relay" in dockerfile,
)
runtime_lines = next((lines for _, a, lines in stages if a == "runtime"), [])
users = [line.split()[1] for line in runtime_lines if line.upper().startswith("USER ")]
check("the relay runs as its own user, not root", users and users[-1] not in ("root", "0"), str(users))
for src in re.findall(r"^COPY\s+(?!--from)(\S+)\s", dockerfile, re.M):
    if src != ".":
        check(f"Dockerfile COPY source {src} exists", posixpath.exists(posixpath.join(ROOT, src)))

# --- The relay's settings: every variable the kit gives the relay is one it reads. ------------
config_rs = read("relay/src/config.rs")
settings_block = config_rs.split("pub const SETTINGS", 1)[1].split("];", 1)[0]
settings = set(re.findall(r'\(\s*"([A-Z][A-Z0-9_]*)"\s*,', settings_block))
check("relay settings read from relay/src/config.rs", len(settings) > 20, f"{len(settings)} found")


def relay_setting(name):
    return name in settings or name.startswith("AWS_")


def env_file_keys(text):
    return [m.group(1) for m in re.finditer(r"^\s*([A-Za-z_][A-Za-z0-9_]*)=", text, re.M)]


given = {"deploy/relay.env.example": env_file_keys(read("deploy/relay.env.example"))}
given["deploy/Dockerfile (runtime ENV)"] = list(stage_env("runtime"))
unit = read("deploy/simplysync-relay.service")
unit_env = dict(re.findall(r"^Environment=(\w+)=(\S+)$", unit, re.M))
given["deploy/simplysync-relay.service"] = list(unit_env)
for path, doc in compose_files.items():
    for svc, spec in doc["services"].items():
        if spec.get("build", {}).get("target") == "relay":
            given[f"{path}: {svc}"] = list(spec.get("environment") or {})
for where, names in given.items():
    unknown = [n for n in names if not relay_setting(n)]
    check(f"{where} sets only relay settings", not unknown, f"not read by the relay: {unknown}")

# --- Passwords: never interpolated into a URL; the database password comes from a file. ------
url_password = re.compile(r"://[^/\s@]*:[^/\s@]*@")
for path, doc in compose_files.items():
    in_urls = [
        f"{svc}.{key}"
        for svc, spec in doc["services"].items()
        for key, value in (spec.get("environment") or {}).items()
        if url_password.search(str(value)) or re.search(r"://[^/\s@]*\$\{[^}]*\}[^/\s@]*@", str(value))
    ]
    check(f"{path}: no password (or interpolated secret) inside a URL", not in_urls, str(in_urls))
pg = compose["services"]["postgres"]
relay = compose["services"]["relay"]
pg_env, relay_env = pg.get("environment", {}), relay.get("environment", {})
check("postgres reads its password from a file (POSTGRES_PASSWORD_FILE)", "POSTGRES_PASSWORD_FILE" in pg_env and "POSTGRES_PASSWORD" not in pg_env)
check("the relay reads the database password from a file (DATABASE_PASSWORD_FILE)", "DATABASE_PASSWORD_FILE" in relay_env)
secret = posixpath.basename(str(relay_env.get("DATABASE_PASSWORD_FILE", "")))
check(
    "postgres and the relay mount the same password secret, defined from a file",
    secret
    and pg_env.get("POSTGRES_PASSWORD_FILE") == f"/run/secrets/{secret}"
    and secret in (pg.get("secrets") or [])
    and secret in (relay.get("secrets") or [])
    and "file" in compose.get("secrets", {}).get(secret, {}),
)
userinfo = re.match(r"[a-z]+://([^@/]*)@", str(relay_env.get("DATABASE_URL", "")))
check("DATABASE_URL carries no password", relay_env.get("DATABASE_URL") and not (userinfo and ":" in userinfo.group(1)))

# --- The bucket is created before the relay needs it. -----------------------------------------
blob_url = str(relay_env.get("BLOB_STORE_URL", ""))
blob_bucket = blob_url.removeprefix("s3://").split("/", 1)[0]
creators = [
    name
    for name, spec in compose["services"].items()
    if re.search(r"mc mb --ignore-existing \S+/" + re.escape(blob_bucket) + r"\b", str(spec.get("command", "")))
]
check(f"a one-shot service creates the chunk bucket {blob_bucket!r}", blob_bucket and creators, str(creators))
for c in creators:
    dep = (relay.get("depends_on") or {}).get(c, {})
    check(f"the relay waits for {c} to complete", dep.get("condition") == "service_completed_successfully")
    wait = (compose["services"][c].get("depends_on") or {}).get("objects", {})
    check(f"{c} waits for the object store to be healthy", wait.get("condition") == "service_healthy" and "healthcheck" in compose["services"]["objects"])

# --- HWM_PATH outside the database's directory and volume, everywhere. -------------------------
def under(path, directory):
    return path == directory or path.startswith(directory.rstrip("/") + "/")


image_env = stage_env("runtime")
for where, env in (("Dockerfile", image_env), ("systemd unit", unit_env)):
    db, hwm = env.get("DB_PATH", ""), env.get("HWM_PATH", "")
    check(
        f"{where}: HWM_PATH ({hwm}) is outside DB_PATH's directory",
        db and hwm and not under(hwm, posixpath.dirname(db)),
    )
hwm_dir = posixpath.dirname(image_env.get("HWM_PATH", "/nowhere"))
check(
    "the image creates the mark's directory for the relay's user",
    re.search(r"install -d -o simplysync -g simplysync -m 700 " + re.escape(hwm_dir) + r"\b", dockerfile),
)
state_dirs = re.search(r"^StateDirectory=(.*)$", unit, re.M)
state_dirs = state_dirs.group(1).split() if state_dirs else []
for name in ("DB_PATH", "HWM_PATH"):
    directory = posixpath.dirname(unit_env.get(name, "/nowhere"))
    check(f"systemd unit: {name}'s directory is a StateDirectory (created, writable)", directory.removeprefix("/var/lib/") in state_dirs and directory.startswith("/var/lib/"))


def mounts(spec):
    """{container path: source} of a service's volumes (short syntax)."""
    out = {}
    for v in spec.get("volumes") or []:
        parts = str(v).split(":")
        if len(parts) >= 2:
            out[parts[1]] = parts[0]
    return out


def mount_of(spec, path):
    """The source of the mount that holds path (the longest container path above it)."""
    best = None
    for target, source in mounts(spec).items():
        if under(path, target) and (best is None or len(target) > len(best[0])):
            best = (target, source)
    return best


s_services = sqlite["services"]
s_relay = s_services["relay"]
s_env = {**image_env, **(s_relay.get("environment") or {})}
db_mount, hwm_mount = mount_of(s_relay, s_env["DB_PATH"]), mount_of(s_relay, s_env["HWM_PATH"])
check("compose.sqlite.yaml: the database is on a named volume", db_mount and not db_mount[1].startswith("."), str(db_mount))
check(
    "compose.sqlite.yaml: HWM_PATH is on a volume of its own, not the database's",
    hwm_mount and db_mount and hwm_mount[1] != db_mount[1] and not under(hwm_mount[0], db_mount[0]),
    f"{hwm_mount} vs {db_mount}",
)
ls_svc = s_services["litestream"]
ls_env = ls_svc.get("environment") or {}
check("Litestream replicates the relay's DB_PATH", ls_env.get("DB_PATH") == s_env["DB_PATH"])
check(
    "Litestream sees the database's volume at the same path",
    db_mount and mount_of(ls_svc, s_env["DB_PATH"]) == db_mount,
)
check(
    "the mark's volume is in no backup: Litestream does not mount it",
    hwm_mount and hwm_mount[1] not in mounts(ls_svc).values(),
)
drill = s_services["drill"]
drill_hwm = mount_of(drill, str((drill.get("environment") or {}).get("LIVE_HWM_PATH", "")))
check(
    "the drill reads the live mark read-only, from the mark's volume",
    drill_hwm and drill_hwm[1] == hwm_mount[1] and any(str(v).endswith(":ro") and str(v).startswith(hwm_mount[1] + ":") for v in drill.get("volumes") or []),
)
check(
    "the relay starts after Litestream (and so stops before it: its last writes reach the replica)",
    (s_relay.get("depends_on") or {}).get("litestream", {}).get("condition") == "service_started",
)
bb = (ls_svc.get("depends_on") or {}).get("backup-bucket", {})
check("Litestream waits for the backup bucket's creation", bb.get("condition") == "service_completed_successfully")
check("the backup bucket's job creates a missing bucket", "mc mb" in str(s_services["backup-bucket"].get("command", "")))

# --- Litestream's config. ----------------------------------------------------------------------
dbs = litestream.get("dbs") or []
check("litestream.yml replicates one database, ${DB_PATH}", len(dbs) == 1 and dbs[0].get("path") == "${DB_PATH}")
replica = (dbs[0].get("replica") or {}) if dbs else {}
check("litestream.yml: one S3 replica", replica.get("type") == "s3" and "replicas" not in dbs[0])
check(
    "litestream.yml holds no credentials",
    not {"access-key-id", "secret-access-key"} & (set(replica) | set(litestream)),
)
expanded = set(re.findall(r"\$\{(\w+)\}", read("deploy/litestream.yml")))
check(
    "the litestream and drill services set every variable litestream.yml uses",
    expanded <= set(ls_env) and expanded <= set((drill.get("environment") or {})),
    str(expanded - set(ls_env)),
)

# --- .dockerignore: build output, node_modules and secrets out; what cargo needs in. -----------
ignore = [line.strip() for line in read(".dockerignore").splitlines() if line.strip() and not line.strip().startswith("#")]


def pattern_regex(p):
    p = p.lstrip("/").rstrip("/")
    out = ""
    i = 0
    while i < len(p):
        if p.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif p.startswith("**", i):
            out += ".*"
            i += 2
        elif p[i] == "*":
            out += "[^/]*"
            i += 1
        elif p[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(p[i])
            i += 1
    return re.compile(out + "$")


rules = [(not p.startswith("!"), pattern_regex(p.lstrip("!"))) for p in ignore]


def excluded(path):
    parts = path.split("/")
    ancestors = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    state = False
    for exclude, rx in rules:
        if any(rx.match(a) for a in ancestors):
            state = exclude
    return state


for path in ("target", "relay/target", "node_modules", "tests/browser-js/node_modules/x", ".git", "pkg", "test-results", "deploy/relay.env", "deploy/secrets/postgres-password", "data/relay.sqlite"):
    check(f".dockerignore excludes {path}", excluded(path))
members = cargo["workspace"]["members"]
tracked = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True, check=True).stdout.split()
needed = [
    f
    for f in tracked
    if f in ("Cargo.toml", "Cargo.lock", "deploy/restore-drill.sh")
    or f.startswith(".cargo/")
    or any(m != "." and f.startswith(m.rstrip("/") + "/") for m in members)
    or f.startswith("src/")
]
kept_out = [f for f in needed if excluded(f)]
check(f".dockerignore keeps the {len(needed)} files the build needs (workspace members, lock, .cargo)", needed and not kept_out, str(kept_out[:5]))

failed = results.count(False)
print(f"check-deploy.py: {len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
