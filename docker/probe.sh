#!/bin/bash
# probe PORT PATH: exits 0 when http://127.0.0.1:PORT/PATH answers 2xx within
# 2 s, 1 otherwise. The compose healthchecks run it (installed in the image as
# /usr/local/bin/probe): bash opens the socket itself, so a probe costs a few
# milliseconds, where `node -e "fetch(...)"` started a Node process per probe
# (seconds on a busy host: over compose's 3 s timeout). Kubernetes probes use
# httpGet and need none of this.
port=$1 path=${2:-/}
exec 3<> "/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$path" >&3 || exit 1
IFS=' ' read -r -t 2 _ status _ <&3 || exit 1
[[ $status == 2[0-9][0-9] ]]
