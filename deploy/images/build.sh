#!/usr/bin/env bash
# Builds Countersign's container images with buildah (no daemon), from `scratch`:
#
#   countersign-broker    /usr/local/bin/countersign-broker
#   countersign-console   /usr/local/bin/countersign-console
#   countersign-launcher  /usr/local/bin/countersign-launcher and /usr/local/bin/countersign
#
# Each holds its binaries, exactly the shared libraries they link (ldd) and the dynamic loader,
# the CA certificates, and /etc/passwd and /etc/group naming the non-root user 65532: no shell,
# no package manager, nothing else. OCI labels name the source, revision, version and licence;
# a CycloneDX SBOM per image (from Cargo.lock, plus the Debian packages the libraries come
# from) is written beside it, and its SHA-256 is a label of the image.
#
# Usage: deploy/images/build.sh BIN_DIR [OUT_DIR]
#   BIN_DIR  the cargo profile's output directory: target/release for the images we ship,
#            target/debug in CI (the binaries its test build already made).
#   OUT_DIR  where the SBOMs and the images' file lists go (default: target/images).
# Environment: TAG (default: the workspace version), IMAGE_PREFIX (default: localhost/),
#   BUILDAH_FLAGS (default: --storage-driver vfs, which works as root without fuse).
# Push the result with e.g. `buildah push localhost/countersign-broker:0.1.0 docker://...`.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin_dir=${1:?usage: deploy/images/build.sh BIN_DIR [OUT_DIR]}
out_dir=${2:-target/images}
mkdir -p "$out_dir"
read -r -a bflags <<< "${BUILDAH_FLAGS:---storage-driver vfs}"
bh() { buildah "${bflags[@]}" "$@"; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tag=${TAG:-$version}
prefix=${IMAGE_PREFIX:-localhost/}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
source_url=${SOURCE_URL:-https://github.com/countersign/countersign}
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
user=65532
certs=/etc/ssl/certs/ca-certificates.crt
[ -f "$certs" ] || { echo "no CA bundle at $certs (apt-get install ca-certificates)" >&2; exit 1; }

# The files an image holds for these binaries: the binaries, each library ldd resolves (by the
# path ldd names, which is where the loader looks), the loader by its PT_INTERP path, the CA
# bundle and the user's passwd and group lines. One path a line, sorted.
files_for() {
    local b
    for b in "$@"; do
        echo "/usr/local/bin/$(basename "$b")"
        ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
    done
    echo "$certs"
    echo /etc/passwd
    echo /etc/group
}

build_image() {
    local name=$1 description=$2
    shift 2
    local bins=() b
    for b in "$@"; do
        [ -x "$bin_dir/$b" ] || { echo "missing $bin_dir/$b (build it first)" >&2; exit 1; }
        bins+=("$bin_dir/$b")
    done
    local root
    root=$(mktemp -d)
    # The root filesystem, staged: binaries under /usr/local/bin, libraries at their paths
    # (copied through symlinks, so each is the file the loader opens).
    install -d -m 0755 "$root/usr/local/bin" "$root/etc/ssl/certs"
    for b in "${bins[@]}"; do
        install -m 0755 "$b" "$root/usr/local/bin/"
    done
    local f
    while read -r f; do
        case "$f" in
            /usr/local/bin/*|/etc/passwd|/etc/group) ;;
            *) install -D -m 0755 "$(readlink -f "$f")" "$root$f" ;;
        esac
    done < <(files_for "${bins[@]}" | sort -u)
    chmod 0644 "$root$certs"
    printf 'root:x:0:0:root:/nonexistent:/sbin/nologin\ncountersign:x:%s:%s:countersign:/nonexistent:/sbin/nologin\n' "$user" "$user" > "$root/etc/passwd"
    printf 'root:x:0:\ncountersign:x:%s:\n' "$user" > "$root/etc/group"
    chmod 0644 "$root/etc/passwd" "$root/etc/group"
    files_for "${bins[@]}" | sort -u > "$out_dir/$name.files"

    # The SBOM: the binaries' crates from Cargo.lock (cargo metadata, resolved for this
    # platform) and the Debian packages of the libraries.
    local crates=()
    for b in "$@"; do crates+=(--bin "$b"); done
    python3 deploy/images/sbom.py --image "$prefix$name:$tag" --version "$version" \
        --revision "$revision" "${crates[@]}" --libs "$out_dir/$name.files" \
        > "$out_dir/$name.cdx.json"
    local sbom_sha
    sbom_sha=$(sha256sum "$out_dir/$name.cdx.json" | cut -d' ' -f1)

    local ctr
    ctr=$(bh from scratch)
    bh copy "$ctr" "$root/" / >/dev/null
    rm -rf "$root"
    bh config \
        --user "$user:$user" \
        --workingdir / \
        --entrypoint "[\"/usr/local/bin/$1\"]" \
        --cmd '["--help"]' \
        --env SSL_CERT_FILE="$certs" \
        --label org.opencontainers.image.title="$name" \
        --label org.opencontainers.image.description="$description" \
        --label org.opencontainers.image.source="$source_url" \
        --label org.opencontainers.image.revision="$revision" \
        --label org.opencontainers.image.version="$version" \
        --label org.opencontainers.image.licenses=Apache-2.0 \
        --label org.opencontainers.image.created="$created" \
        --label dev.countersign.sbom.cyclonedx.sha256="$sbom_sha" \
        "$ctr"
    # A rebuild replaces the image of that tag (vfs keeps a full copy of each image).
    bh rmi "$prefix$name:$tag" >/dev/null 2>&1 || true
    bh commit -q --rm "$ctr" "$prefix$name:$tag" > "$out_dir/$name.id"
    echo "$prefix$name:$tag  $(wc -l < "$out_dir/$name.files") files  sbom $out_dir/$name.cdx.json"
}

build_image countersign-broker "The Countersign secrets broker" countersign-broker
build_image countersign-console "The Countersign approval console" countersign-console
build_image countersign-launcher "The Countersign launcher helper and CLI" countersign-launcher countersign
