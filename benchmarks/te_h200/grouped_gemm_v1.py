"""On a cuBLAS older than 13.3, make TE JAX take its V1 grouped GEMM (multi-stream cuBLAS) instead of failing.

TE 2.20's V2 grouped GEMM (nvte_grouped_gemm, cuBLASLt grouped matmul) asserts cuBLAS >= 13.3 at run time,
but TE decides V2 is available from a workspace query that passes on older cuBLAS. TE already falls back
to V1 when that query raises a cuBLAS error; this makes the query raise when the loaded cuBLAS is older.
    python grouped_gemm_v1.py /tmp/te_site     (edits transformer_engine/jax/cpp_extensions/gemm.py there)
"""

import ctypes
import glob
import sys
from pathlib import Path

NEEDED = 130300
lib = next(g for d in sys.path if d for g in glob.glob(f"{d}/nvidia/cu13/lib/libcublasLt.so.13"))
version = ctypes.CDLL(lib).cublasLtGetVersion()
gemm = Path(sys.argv[1]) / "transformer_engine/jax/cpp_extensions/gemm.py"
src = gemm.read_text()
probe = "    get_grouped_gemm_setup_workspace_size(1)\n"
if version >= NEEDED:
    print(f"cuBLAS {version} ({lib}): TE JAX may use its V2 grouped GEMM")
    sys.exit(0)
if probe in src:
    raise_old = f"    raise RuntimeError('cuBLAS runtime {version} < {NEEDED}: no V2 grouped GEMM')\n"
    gemm.write_text(src.replace(probe, raise_old, 1))
elif "cuBLAS runtime" not in src:
    sys.exit("TE's V2 availability probe moved; update this script")
print(f"cuBLAS {version} ({lib}) < {NEEDED}: TE JAX uses its V1 (multi-stream) grouped GEMM")
