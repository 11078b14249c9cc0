#!/usr/bin/env bash
# Builds the image's audio-only ffmpeg (docker/Dockerfile, stage `ffmpeg`;
# docs/decisions/deployment.md "An audio-only ffmpeg"): Debian's ffmpeg
# binary and libav* libraries, the audio codec libraries they link, and, for
# every other library they link (video codecs, X11, GPU, fonts, network
# protocols, subtitles: about 170 MB), a stub of the same name exporting the
# same symbols. ffmpeg links them all at start (BIND_NOW), so they must exist.
# Each stub function returns 0, which is what the calls that do happen expect
# of a library that is not there: when libavcodec first lists its codecs it
# asks the video encoders what they support (aom_codec_version, x265_api_get,
# vpx_codec_get_caps: 0, nothing). The service's decodes (-vn -sn -dn, audio demuxers only,
# shared/audio/ffmpeg.ts) call nothing else of them: the check below decodes
# every container and codec it reads, files with video too. Libraries the base
# stage already has are left out (they are there at run time).
#
#   bash ffmpeg-audio.sh PRESENT_LIST OUT_DIR
#
# PRESENT_LIST: the base stage's /usr/lib/x86_64-linux-gnu, one name a line.
# Needs binutils (as, ld, readelf) and Debian's ffmpeg installed. Then checks
# the result: a clip in every container and codec the service reads (and
# files with video beside the audio) decodes to the same PCM through the
# audio-only ffmpeg as through Debian's, with the service's arguments.
set -euo pipefail
present=$1
out=$2
libdir=/usr/lib/x86_64-linux-gnu
mkdir -p "$out/usr/local/bin" "$out$libdir"
cp /usr/bin/ffmpeg "$out/usr/local/bin/ffmpeg"

# Real libraries among those ffmpeg's own link: ffmpeg's own, the audio codecs
# and resampler; dav1d (libavcodec prefers it to its own AV1 decoder, and
# reading a file's streams opens a decoder for its video too, even under -vn);
# gme and openmpt (every input is probed by every demuxer, theirs included).
# What a kept library links is kept too.
own='^lib(av(codec|format|filter|device|util)|sw(resample|scale)|postproc)\.so'
keep='^lib(opus|vorbis|vorbisenc|ogg|mp3lame|gsm|speex|shine|twolame|soxr|dav1d|gme|openmpt|z|lzma|bz2|m|c|gcc_s|stdc\+\+)\.so'

stub() {
  local soname=$1 real=$2 dir
  dir=$(mktemp -d)
  # Defined dynamic symbols (default versions only: what the linked libraries were built against).
  readelf --dyn-syms -W "$real" | awk '
    $7 != "UND" && $7 != "ABS" && ($5 == "GLOBAL" || $5 == "WEAK") && (index($8, "@") == 0 || index($8, "@@") > 0) {
      name = $8; ver = ""
      if (index(name, "@@")) { ver = substr(name, index(name, "@@") + 2); name = substr(name, 1, index(name, "@@") - 1) }
      # Not _init or _fini: ld makes _init the constructor (DT_INIT), which would trap at load.
      if (name ~ /^[A-Za-z_][A-Za-z0-9_.]*$/ && name !~ /^(_init|_fini|_edata|_end|__bss_start)$/) print $4, $3, name, ver
    }' | sort -u -k3,3 >"$dir/syms"
  {
    echo '.text'
    awk '$1 != "OBJECT" && $1 != "TLS" { printf ".globl %s\n.type %s,@function\n%s:\n xor %%eax,%%eax\n ret\n", $3, $3, $3 }' "$dir/syms"
    echo '.data'
    awk '$1 == "OBJECT" { n = $2 + 0; if (n < 1) n = 8; printf ".globl %s\n.type %s,@object\n.size %s,%d\n%s:\n .skip %d\n", $3, $3, $3, n, $3, n }' "$dir/syms"
    echo '.section .tbss,"awT",@nobits'
    awk '$1 == "TLS" { n = $2 + 0; if (n < 1) n = 8; printf ".globl %s\n.type %s,@tls_object\n.size %s,%d\n%s:\n .skip %d\n", $3, $3, $3, n, $3, n }' "$dir/syms"
  } >"$dir/stub.s"
  local script=()
  if awk '$4 != "" { found = 1 } END { exit !found }' "$dir/syms"; then
    # The same version nodes, so that references like vaInitialize@VA_API_0.32.0 resolve.
    awk '$4 != "" { v[$4] = v[$4] "  " $3 ";\n" } END { for (k in v) printf "%s {\n global:\n%s};\n", k, v[k] }' \
      "$dir/syms" >"$dir/versions"
    script=(--version-script "$dir/versions")
  fi
  as -o "$dir/stub.o" "$dir/stub.s"
  ld -shared -soname "$soname" "${script[@]}" -o "$out$libdir/$soname" "$dir/stub.o"
  rm -rf "$dir"
}

declare -A seen=()
queue=(/usr/bin/ffmpeg)
kept=0 stubbed=0
while ((${#queue[@]})); do
  file=${queue[0]}
  queue=("${queue[@]:1}")
  ours=0
  [[ $file == /usr/bin/ffmpeg || $(basename "$file") =~ $own ]] && ours=1
  for soname in $(readelf -d "$file" | awk '/NEEDED/ { gsub(/[][]/, "", $5); print $5 }'); do
    [[ -n ${seen[$soname]:-} ]] && continue
    seen[$soname]=1
    grep -qxF "$soname" "$present" && continue
    real=$(readlink -f "$libdir/$soname")
    if ((!ours)) || [[ $soname =~ $own || $soname =~ $keep ]]; then
      cp -L "$libdir/$soname" "$out$libdir/$soname"
      queue+=("$real")
      kept=$((kept + 1))
    else
      stub "$soname" "$real"
      stubbed=$((stubbed + 1))
    fi
  done
done
echo "ffmpeg-audio: $kept libraries kept, $stubbed stubbed, $(du -sm "$out" | cut -f1) MB"

samples=$(mktemp -d)
tone=(-f lavfi -i sine=frequency=440:duration=2:sample_rate=44100)
video=(-f lavfi -i testsrc=duration=2:size=160x120:rate=10)
encode() {
  local file=$1
  shift
  ffmpeg -hide_banner -loglevel error -y "$@" "$samples/$file"
}
encode a.wav "${tone[@]}"
encode a.w64 "${tone[@]}"
encode a.mp3 "${tone[@]}" -c:a libmp3lame
encode a.flac "${tone[@]}"
encode vorbis.ogg "${tone[@]}" -c:a libvorbis
encode opus.ogg "${tone[@]}" -c:a libopus -ar 48000
encode aac.m4a "${tone[@]}" -c:a aac
encode alac.m4a "${tone[@]}" -c:a alac
encode fragmented.mp4 "${tone[@]}" -c:a aac -movflags frag_keyframe+empty_moov
encode opus.webm "${tone[@]}" -c:a libopus -ar 48000
encode flac.mkv "${tone[@]}" -c:a flac
encode mp2.mkv "${tone[@]}" -c:a mp2
encode a.aac "${tone[@]}" -c:a aac -f adts
encode a.aiff "${tone[@]}"
encode a.caf "${tone[@]}" -c:a pcm_s16be
encode a.wma "${tone[@]}" -c:a wmav2
encode a.au "${tone[@]}"
encode a.ac3 "${tone[@]}" -c:a ac3
encode a.eac3 "${tone[@]}" -c:a eac3
encode a.wv "${tone[@]}" -c:a wavpack
encode mulaw.wav "${tone[@]}" -c:a pcm_mulaw
encode h264.mp4 "${video[@]}" "${tone[@]}" -c:v libx264 -c:a aac
encode hevc.mp4 "${video[@]}" "${tone[@]}" -c:v libx265 -x265-params log-level=error -c:a aac
encode vp8.webm "${video[@]}" "${tone[@]}" -c:v libvpx -c:a libvorbis
encode vp9.webm "${video[@]}" "${tone[@]}" -c:v libvpx-vp9 -c:a libopus
encode av1.mkv "${video[@]}" "${tone[@]}" -c:v libaom-av1 -cpu-used 8 -c:a libopus
encode theora.ogg "${video[@]}" "${tone[@]}" -c:v libtheora -c:a libvorbis
encode wmv.asf "${video[@]}" "${tone[@]}" -c:v wmv2 -c:a wmav2
# shared/audio/index.ts's arguments (FFMPEG_INPUT_FORMATS of shared/audio/ffmpeg.ts).
formats=wav,w64,mp3,flac,ogg,mov,matroska,aac,aiff,caf,amr,asf,au,ac3,eac3,wv
pcm() {
  "$@" -hide_banner -nostats -loglevel error -protocol_whitelist pipe -format_whitelist "$formats" -i pipe:0 \
    -vn -sn -dn -ac 1 -ar 16000 -acodec pcm_s16le -f s16le -y pipe:1 2>/dev/null | md5sum
}
for file in "$samples"/*; do
  full=$(pcm ffmpeg <"$file")
  slim=$(pcm env LD_LIBRARY_PATH="$out$libdir" "$out/usr/local/bin/ffmpeg" <"$file")
  [[ $full == "$slim" && $full != "$(md5sum </dev/null)" ]] || {
    echo "ffmpeg-audio: $(basename "$file") decodes differently" >&2
    exit 1
  }
done
echo "ffmpeg-audio: $(ls "$samples" | wc -l) files decode alike"
rm -rf "$samples"
