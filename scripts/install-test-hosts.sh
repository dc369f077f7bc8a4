#!/usr/bin/env bash
# Install what the multi-host tests (tests/netns_hosts.py) need: openssh-server (sshd),
# openssh-client (ssh, ssh-keygen) and iproute2 (ip). Idempotent: with everything present it
# changes nothing. Installing needs root and apt-get (Debian/Ubuntu); runs without a terminal.
# Prints one line on success; on failure, a clear message (and apt's output) on stderr.
set -euo pipefail

me=install-test-hosts
has() { command -v "$1" >/dev/null 2>&1; }
# sshd lives in sbin, which a non-root PATH often lacks.
has_sshd() { PATH="$PATH:/usr/sbin:/sbin:/usr/local/sbin" has sshd; }

missing=()
has_sshd || missing+=(openssh-server)
{ has ssh && has ssh-keygen; } || missing+=(openssh-client)
has ip || missing+=(iproute2)

if [ ${#missing[@]} -eq 0 ]; then
  echo "$me: sshd, ssh, ssh-keygen and ip are present; nothing to install"
  exit 0
fi

if [ "${EUID:-$(id -u)}" -ne 0 ]; then
  echo "$me: missing ${missing[*]}; installing them needs root (run this script as root, e.g. with sudo)" >&2
  exit 1
fi
if ! has apt-get; then
  echo "$me: missing ${missing[*]} and apt-get is not available; install them with this system's package manager" >&2
  exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt_install() {
  apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" \
    </dev/null >>"$log" 2>&1
}
apt_update() { apt-get update -q -o DPkg::Lock::Timeout=300 </dev/null >>"$log" 2>&1; }

# 'apt-get update' only when needed: no package lists yet, or the install fails on stale ones.
if ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
  apt_update || { cat "$log" >&2; echo "$me: apt-get update failed" >&2; exit 1; }
  apt_install || { cat "$log" >&2; echo "$me: apt-get install ${missing[*]} failed" >&2; exit 1; }
elif ! apt_install; then
  { apt_update && apt_install; } \
    || { cat "$log" >&2; echo "$me: apt-get install ${missing[*]} failed" >&2; exit 1; }
fi

# Check the result rather than trusting apt's exit status.
still=()
has_sshd || still+=(sshd)
has ssh || still+=(ssh)
has ssh-keygen || still+=(ssh-keygen)
has ip || still+=(ip)
if [ ${#still[@]} -ne 0 ]; then
  cat "$log" >&2
  echo "$me: installed ${missing[*]} but still cannot find: ${still[*]}" >&2
  exit 1
fi
echo "$me: installed ${missing[*]}"
