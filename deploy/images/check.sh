#!/usr/bin/env bash
# Checks the images deploy/images/build.sh made, without a container runtime: each image's
# root filesystem is mounted (buildah from + mount) and its entrypoint run there in a chroot as
# the image's own user:
#   - the image holds no file but its binaries, their libraries and loader, the CA bundle and
#     /etc/passwd and /etc/group (the list build.sh wrote), and no shell;
#   - it runs as a numeric non-root user, with the OCI labels set;
#   - every binary answers --version;
#   - the broker's and the console's dev mode answer /healthz and /readyz (200).
# Usage: deploy/images/check.sh [OUT_DIR]   (as root; OUT_DIR as given to build.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
out_dir=${1:-target/images}
read -r -a bflags <<< "${BUILDAH_FLAGS:---storage-driver vfs}"
bh() { buildah "${bflags[@]}" "$@"; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tag=${TAG:-$version}
prefix=${IMAGE_PREFIX:-localhost/}
failed=0
fail() { echo "FAIL $*"; failed=1; }
ok() { echo "ok   $*"; }

ctrs=()
pids=()
cleanup() {
    local p c
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for c in "${ctrs[@]}"; do bh umount "$c" >/dev/null 2>&1 || true; bh rm "$c" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

# Polls URL until it answers 200 (deadline 60 s).
answers() {
    local url=$1 deadline=$((SECONDS + 60))
    while [ $SECONDS -lt $deadline ]; do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$url")" = 200 ] && return 0
        sleep 0.2
    done
    return 1
}

# Starts a dev mode in the chroot; waits for the line naming URL_PATTERN (then a loopback URL)
# in its output.
# Sets $url (the first match) and $log.
start_dev() {
    local mnt=$1 user=$2 pattern=$3
    shift 3
    log=$(mktemp)
    chroot --userspec="$user" "$mnt" "$@" > "$log" 2>&1 &
    pids+=($!)
    local deadline=$((SECONDS + 60))
    url=
    while [ $SECONDS -lt $deadline ] && [ -z "$url" ]; do
        # The console prints `localhost` (its one URL, where passkeys work), the broker 127.0.0.1.
        url=$(grep -oE "$pattern *http://(127\.0\.0\.1|localhost):[0-9]+" "$log" | head -1 | grep -o 'http://.*' || true)
        kill -0 "${pids[-1]}" 2>/dev/null || break
        [ -n "$url" ] || sleep 0.2
    done
    [ -n "$url" ] || { cat "$log"; return 1; }
}

check_image() {
    local name=$1
    shift
    local image="$prefix$name:$tag" ctr mnt
    ctr=$(bh from -q "$image")
    ctrs+=("$ctr")
    mnt=$(bh mount "$ctr")

    # The files: exactly the list, and nothing else.
    local have want
    have=$(cd "$mnt" && find . -not -type d | sed 's|^\.||' | sort)
    want=$(sort -u "$out_dir/$name.files")
    if [ "$have" = "$want" ]; then
        ok "$name: holds only its $(echo "$want" | wc -l) files (binaries, libraries, loader, CA bundle, passwd, group)"
    else
        fail "$name: files differ from the list"; diff <(echo "$want") <(echo "$have") || true
    fi
    for sh in /bin/sh /bin/bash /usr/bin/sh /bin/busybox; do
        [ ! -e "$mnt$sh" ] || fail "$name: has a shell at $sh"
    done

    # The user: numeric, non-root, named in /etc/passwd.
    local user uid
    user=$(bh inspect --format '{{.OCIv1.Config.User}}' "$ctr")
    uid=${user%%:*}
    if [[ "$user" =~ ^[0-9]+:[0-9]+$ ]] && [ "$uid" != 0 ] && grep -q "^[^:]*:x:$uid:" "$mnt/etc/passwd"; then
        ok "$name: runs as $user"
    else
        fail "$name: user '$user' is not a numeric non-root user in /etc/passwd"
    fi
    local label
    for label in source revision version licenses; do
        [ -n "$(bh inspect --format "{{index .OCIv1.Config.Labels \"org.opencontainers.image.$label\"}}" "$ctr")" ] \
            || fail "$name: no org.opencontainers.image.$label label"
    done
    local sbom_sha
    sbom_sha=$(bh inspect --format '{{index .OCIv1.Config.Labels "dev.countersign.sbom.cyclonedx.sha256"}}' "$ctr")
    [ "$sbom_sha" = "$(sha256sum "$out_dir/$name.cdx.json" | cut -d' ' -f1)" ] \
        && python3 -c "import json,sys; b=json.load(open(sys.argv[1])); assert b['bomFormat']=='CycloneDX' and len(b['components'])>10" "$out_dir/$name.cdx.json" \
        && ok "$name: labels set; its SBOM ($out_dir/$name.cdx.json) is CycloneDX and matches the label" \
        || fail "$name: SBOM missing or not the one the label names"

    local bin
    for bin in "$@"; do
        local v
        if v=$(chroot --userspec="$user" "$mnt" "/usr/local/bin/$bin" --version 2>&1) && [ -n "$v" ]; then
            ok "$name: $bin --version: $(echo "$v" | head -1)"
        else
            fail "$name: $bin --version: $v"
        fi
    done

    # Dev mode: a state directory the image's user may write (in this throwaway container).
    install -d -o "$uid" -g "${user#*:}" -m 0700 "$mnt/dev-state"
    case "$name" in
        countersign-broker)
            if start_dev "$mnt" "$user" "at" /usr/local/bin/countersign-broker dev --dir /dev-state --port 0 \
                && answers "$url/healthz" && answers "$url/readyz"; then
                ok "$name: dev mode answers $url/healthz and /readyz"
            else
                fail "$name: dev mode: no /healthz or /readyz"; cat "$log"
            fi
            ;;
        countersign-console)
            local console broker
            if start_dev "$mnt" "$user" "console:" /usr/local/bin/countersign-console dev --dir /dev-state --broker-port 0 --console-port 0; then
                console=$url
                broker=$(grep -o 'broker: *http://127\.0\.0\.1:[0-9]*' "$log" | head -1 | grep -o 'http://.*')
                if answers "$console/healthz" && answers "$console/readyz" && answers "$broker/readyz"; then
                    ok "$name: dev mode answers $console/healthz and /readyz (broker $broker/readyz)"
                else
                    fail "$name: dev mode: no /healthz or /readyz"; cat "$log"
                fi
            else
                fail "$name: dev mode did not start"
            fi
            ;;
    esac
}

started=$SECONDS
check_image countersign-broker countersign-broker
check_image countersign-console countersign-console
check_image countersign-launcher countersign-launcher countersign
echo "image checks took $((SECONDS - started)) s"
[ "$failed" = 0 ] || { echo "an image check failed"; exit 1; }
