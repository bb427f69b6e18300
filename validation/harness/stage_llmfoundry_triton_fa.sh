#!/bin/sh
# Stage llm-foundry's Triton FlashAttention (llmfoundry/models/layers/flash_attn_triton.py, the
# kernel MPT's attn_impl "triton" ran; flash-attention v1.0.5's flash_attn_triton.py adapted to the
# triton-pre-mlir fork) for validation/harness/triton_attention.py, ported to today's Triton:
#
#   sh validation/harness/stage_llmfoundry_triton_fa.sh /work/.mirror/mosaicml+llm-foundry/repo .devrun/llmf_triton
#
# Read with `git show` from the last llm-foundry commit that has the file (REV, default
# 4c99952d0^: the parent of "Remove triton (#1062)"). The port changes the API only, never the
# algorithm, tiles, warps or stages:
#   import triton_pre_mlir [as triton / .language as tl]  ->  import triton / triton.language
#   tl.dot(a, b, trans_b=True)                            ->  tl.dot(a, tl.trans(b))
#   tl.dot(a, b, trans_a=True)                            ->  tl.dot(tl.trans(a), b)
# (triton-pre-mlir's tl.dot took transpose flags; today's takes transposed operands). llm-foundry is
# Apache-2.0; the file is staged into a git-ignored folder, never committed. DEST/LLMF_COMMIT holds
# the commit; a final check parses the ported file and refuses a leftover trans_a/trans_b.
set -eu
if [ $# -ne 2 ]; then
    echo "usage: $0 LLMFOUNDRY_GIT_DIR DEST" >&2
    exit 2
fi
SRC=$1
DEST=$2
REV=${LLMF_REV:-4c99952d0^}
COMMIT=$(git --git-dir="$SRC" rev-parse "$REV^{commit}")
mkdir -p "$DEST"
git --git-dir="$SRC" show "$COMMIT:llmfoundry/models/layers/flash_attn_triton.py" > "$DEST/flash_attn_triton_orig.py"
echo "$COMMIT" > "$DEST/LLMF_COMMIT"
python3 - "$DEST" <<'PY'
import ast, re, sys, os
dest = sys.argv[1]
src = open(os.path.join(dest, "flash_attn_triton_orig.py")).read()
out = src.replace("import triton_pre_mlir as triton", "import triton")
out = out.replace("import triton_pre_mlir.language as tl", "import triton.language as tl")
out, nb = re.subn(r"tl\.dot\(([^,()]+(?:\([^()]*\))?[^,()]*), ([\w.]+), trans_b=True\)", r"tl.dot(\1, tl.trans(\2))", out)
out, na = re.subn(r"tl\.dot\(([^,()]+(?:\([^()]*\))?[^,()]*), ([\w.]+), trans_a=True\)", r"tl.dot(tl.trans(\1), \2)", out)
if "trans_a" in out or "trans_b" in out or "triton_pre_mlir" in out.replace('"""', "").split("import triton\n", 1)[-1]:
    sys.exit("port incomplete: a transpose flag or triton_pre_mlir import is left")
ast.parse(out)
open(os.path.join(dest, "flash_attn_triton.py"), "w").write(out)
print(f"staged llm-foundry flash_attn_triton.py at {open(os.path.join(dest, 'LLMF_COMMIT')).read().strip()} "
      f"into {dest} ({nb} trans_b, {na} trans_a dots ported)")
PY
