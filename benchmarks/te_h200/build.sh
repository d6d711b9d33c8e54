#!/bin/bash
# Build TransformerEngine for JAX for a GPU machine that has jax (CUDA 13) but no network, on a machine
# that has network but no GPU, and pack it into parts small enough to copy over one per command.
#   bash benchmarks/te_h200/build.sh [OUT_DIR]            (default .te; needs g++, xz, python3.12 headers)
#   PACK=gmm bash benchmarks/te_h200/build.sh .te_gmm     (grouped GEMM only, one small part)
# transformer_engine_jax is a source package whose setup.py asks a GPU jax for the CUDA version, so its
# pybind11 extension is compiled here directly, against headers taken from the pinned wheels below.
# The pack is for one GPU architecture (KEEP_ARCH, default 90 = H100/H200).
# PACK=full (default): everything TE's MoE block needs, NCCL EP and NCCL 2.30.7 included.
# PACK=gmm: what moe=te_gmm needs (TE's grouped GEMM and FP8 quantization): no NCCL EP, no libnccl_ep.so and no
# NCCL of its own (TE's core library uses only ncclGetVersion, ncclCommCount and ncclGetErrorString, which the
# machine's NCCL 2.28.9 has), the extension compiled without -DNVTE_WITH_NCCL_EP.
# Result: OUT_DIR/te_site.tar.xz.partNN + OUT_DIR/manifest (sha256 of the whole archive, part count).
set -euo pipefail
OUT_DIR=$(realpath -m "${1:-.te}")
PACK=${PACK:-full}
PART_MB=${PART_MB:-58}
CACHE=${MOEKIT_CACHE:-$HOME/.cache/moekit}/te-2.20.2
TE=2.20.2
# The sdist's sha256 on PyPI (checked against the index's digest too).
SDIST_SHA256=b5d65e6f747de90d98fe9041322b532481e8de2b21b303a7e6f1365c665201ca
PY=${PY:-$(ls -d "$HOME"/.pyenv/versions/3.12.* 2>/dev/null | tail -1)/bin/python3.12}
case $PACK in
  # Runtime pieces (go to the GPU machine) and the NCCL whose headers (and, full: library) the extension uses.
  # NCCL_IN: where the NCCL wheel is unpacked (the site folder when NCCL goes along).
  full) NCCL=2.30.7; NCCL_IN=site; EP_FLAGS=(-DNVTE_WITH_NCCL_EP) ;;
  gmm)  NCCL=2.28.9; NCCL_IN=nccl; EP_FLAGS=() ;;
  *) echo "PACK=$PACK: choose full or gmm" >&2; exit 2 ;;
esac
RUNTIME="transformer-engine-cu13==$TE transformer-engine==$TE nvidia-nccl-cu13==$NCCL"
# Headers matching the H200 machine: jaxlib 0.11.2 (XLA FFI), CUDA 13.0, cuDNN 9.19.
HEADERS="jaxlib==0.11.2 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88
  nvidia-nvtx==13.0.85   nvidia-cublas==13.0.2.14 nvidia-cudnn-cu13==9.19.1.2 nvidia-cudnn-frontend==1.32.0 pybind11==3.1.0"
step() { echo "[te-build $(date +%H:%M:%S)] $*"; }

[ -x "$PY" ] || { echo "need Python 3.12 headers: set PY=/path/to/python3.12" >&2; exit 2; }
command -v g++ >/dev/null && command -v xz >/dev/null || { echo "need g++ and xz (apt-get install g++ xz-utils)" >&2; exit 2; }
mkdir -p "$CACHE/whl" "$OUT_DIR"
step "downloading wheels into $CACHE/whl (once)"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_18_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform any \
  -d "$CACHE/whl" $RUNTIME $HEADERS
SDIST=$CACHE/transformer_engine_jax-$TE.tar.gz
if [ ! -f "$SDIST" ]; then
  # Straight from the index's JSON API: `pip download` of this sdist runs its metadata step, which fails without
  # a GPU jax, and pip then deletes the file it had fetched.
  step "downloading the transformer_engine_jax $TE sdist"
  python3 - "$SDIST" "$TE" "$SDIST_SHA256" "${PYPI_JSON:-https://pypi.org/pypi}" <<'PYEOF' || exit 1
import hashlib, json, os, sys, urllib.parse, urllib.request
dest, version, pinned, base = sys.argv[1:]
index = f"{base}/transformer-engine-jax/json"
files = json.load(urllib.request.urlopen(index, timeout=60))["releases"].get(version, [])
sdist = next((f for f in files if f["packagetype"] == "sdist"), None)
if sdist is None:
    sys.exit(f"{index} lists no sdist of transformer_engine_jax {version}")
url = urllib.parse.urljoin(index, sdist["url"])
data = urllib.request.urlopen(url, timeout=300).read()
got = hashlib.sha256(data).hexdigest()
if got != pinned or got != sdist["digests"]["sha256"]:
    sys.exit(f"{url}: sha256 {got}, expected {pinned} (pinned) and {sdist['digests']['sha256']} (index)")
with open(dest + ".part", "wb") as f:
    f.write(data)
os.replace(dest + ".part", dest)
print(f"  {url} ({len(data)} bytes, sha256 ok)")
PYEOF
fi

W=$CACHE/work; rm -rf "$W"; mkdir -p "$W/inc" "$W/site" "$W/obj"
step "unpacking headers"
for spec in $HEADERS; do
  name=${spec%%==*}; f=$(ls "$CACHE"/whl/"${name//-/_}"-*.whl | head -1)
  unzip -q -o "$f" -d "$W/inc/$name" '*include/*'
done
tar xzf "$SDIST" -C "$W"; SRC=$W/transformer_engine_jax-$TE
NCCL_WHL=$(ls "$CACHE"/whl/nvidia_nccl_cu13-"$NCCL"-*.whl); NCCL_DIR=$W/$NCCL_IN/nvidia/nccl
unzip -q -o "$NCCL_WHL" -d "$W/$NCCL_IN"
INCS=(
  -I"$SRC/common_headers" -I"$SRC/common_headers/common" -I"$SRC/common_headers/common/include" -I"$SRC/csrc"
  -I"$W/inc/nvidia-cuda-runtime/nvidia/cu13/include" -I"$W/inc/nvidia-cuda-crt/nvidia/cu13/include"
  -I"$W/inc/nvidia-cuda-cccl/nvidia/cu13/include" -I"$W/inc/nvidia-cuda-nvrtc/nvidia/cu13/include"
  -I"$W/inc/nvidia-nvtx/nvidia/cu13/include"   -I"$W/inc/nvidia-cublas/nvidia/cu13/include"
  -I"$W/inc/nvidia-cudnn-cu13/nvidia/cudnn/include" -I"$W/inc/nvidia-cudnn-frontend/include"
  -I"$W/inc/jaxlib/jaxlib/include" -I"$W/inc/pybind11/pybind11/include" -I"$NCCL_DIR/include"
  -I"$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
)
# The flags TE's own build passes (build_tools/jax.py); PACK=full also turns NCCL EP on.
FLAGS=(-O3 -g0 -fPIC -fvisibility=hidden -std=c++17 "${EP_FLAGS[@]}")
step "compiling $(ls "$SRC"/csrc/extensions/*.cpp | wc -l) sources on $(nproc) cores"
export W; printf '%s\n' "$SRC"/csrc/extensions/*.cpp | \
  xargs -P "$(nproc)" -I{} sh -c 'g++ "$@" -c {} -o "$W/obj/$(basename {} .cpp).o" || exit 255' _ "${FLAGS[@]}" "${INCS[@]}"
EXT=transformer_engine_jax$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
g++ -shared -o "$W/site/$EXT" "$W"/obj/*.o "$NCCL_DIR/lib/libnccl.so.2"
step "built $EXT ($(du -h "$W/site/$EXT" | cut -f1))"

step "assembling the site folder and packing it"
for name in transformer_engine_cu13 transformer_engine; do
  unzip -q -o "$(ls "$CACHE"/whl/${name}-$TE-*.whl)" -d "$W/site"
done
rm -rf "$W/site/transformer_engine/pytorch"        # the JAX path only
if [ "$PACK" = gmm ]; then  # the machine's own NCCL serves TE's core library; no NCCL EP
  rm -rf "$W/site/transformer_engine/wheel_lib/libnccl_ep.so" "$W/site/transformer_engine/wheel_lib/nccl_ep"
  LIBS=("$W/site/transformer_engine/wheel_lib/"*.so)
else
  LIBS=("$W/site/transformer_engine/wheel_lib/"*.so "$W/site/nvidia/nccl/lib/libnccl.so.2")
fi
# Keep one GPU architecture's device code (sm_90: H100/H200) and no debug info: ~450 MB -> ~75 MB packed.
"$PY" "$(dirname "$0")/keep_arch.py" --arch "${KEEP_ARCH:-90}" "${LIBS[@]}"
[ "$PACK" = gmm ] || strip --strip-debug "$W/site/nvidia/nccl/lib/libnccl.so.2"
rm -f "$OUT_DIR"/te_site.tar.xz.part*
tar -C "$W/site" -cf - . | xz -T0 -6 | split -b "${PART_MB}M" -d -a 2 - "$OUT_DIR/te_site.tar.xz.part"
parts=$(ls "$OUT_DIR"/te_site.tar.xz.part* | wc -l)
sum=$(cat "$OUT_DIR"/te_site.tar.xz.part* | sha256sum | cut -d' ' -f1)
printf 'parts=%s\nsha256=%s\nte=%s\npack=%s\nnccl=%s\n' "$parts" "$sum" "$TE" "$PACK" "$(basename "$NCCL_WHL")" > "$OUT_DIR/manifest"
step "done: $parts parts of <= ${PART_MB} MiB in $OUT_DIR"; cat "$OUT_DIR/manifest"
