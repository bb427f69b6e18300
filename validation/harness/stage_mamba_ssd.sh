#!/bin/sh
# Stage the minimal mamba_ssm tree validation/harness/ssd_scan.py imports (--mamba-src DEST):
# only the files mamba_ssm/ops/triton/ssd_combined.py needs, read from a git repository of
# state-spaces/mamba (a bare mirror is enough) with `git show HEAD:path`; the package
# __init__.py files that would import the CUDA extensions are written empty. mamba_ssm is
# Apache-2.0; it is staged into a git-ignored folder (e.g. .devrun/mamba_src), never committed.
#
#   sh validation/harness/stage_mamba_ssd.sh /work/.mirror/state-spaces+mamba/repo .devrun/mamba_src
#
# DEST/MAMBA_COMMIT holds the commit (ssd_scan.py writes it to info.mamba_commit). Last, a static
# check (python3, ast only: no torch needed) that every mamba_ssm module the staged files import
# at module level was staged.
set -eu
if [ $# -ne 2 ]; then
    echo "usage: $0 MAMBA_GIT_DIR DEST" >&2
    exit 2
fi
SRC=$1
DEST=$2
REV=${MAMBA_REV:-HEAD}
COMMIT=$(git --git-dir="$SRC" rev-parse "$REV^{commit}")
# ssd_combined.py and its module-level imports (ssd_combined.py lines 14-50 at e9594ce):
FILES="mamba_ssm/ops/triton/ssd_combined.py
mamba_ssm/ops/triton/ssd_bmm.py
mamba_ssm/ops/triton/ssd_chunk_state.py
mamba_ssm/ops/triton/ssd_state_passing.py
mamba_ssm/ops/triton/ssd_chunk_scan.py
mamba_ssm/ops/triton/layernorm_gated.py
mamba_ssm/ops/triton/k_activations.py
mamba_ssm/ops/triton/softplus.py
mamba_ssm/utils/torch.py
mamba_ssm/utils/determinism.py"
# mamba_ssm/__init__.py imports selective_scan_interface (selective_scan_cuda) and the modules:
# written empty, as are the three subpackage __init__.py files (empty upstream too)
EMPTY="mamba_ssm/__init__.py
mamba_ssm/ops/__init__.py
mamba_ssm/ops/triton/__init__.py
mamba_ssm/utils/__init__.py"
rm -rf "$DEST/mamba_ssm"
for f in $FILES; do
    mkdir -p "$DEST/$(dirname "$f")"
    git --git-dir="$SRC" show "$COMMIT:$f" > "$DEST/$f"
done
for f in $EMPTY; do
    mkdir -p "$DEST/$(dirname "$f")"
    : > "$DEST/$f"
done
echo "$COMMIT" > "$DEST/MAMBA_COMMIT"
python3 - "$DEST" <<'PY'
import ast, os, sys
root = sys.argv[1]
missing = []
for dirpath, _, names in os.walk(os.path.join(root, "mamba_ssm")):
    for name in names:
        if not name.endswith(".py"):
            continue
        path = os.path.join(dirpath, name)
        tree = ast.parse(open(path).read(), path)
        for node in tree.body:      # module level only: imports inside functions are optional paths
            mods = []
            if isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            for m in mods:
                if m.split(".")[0] == "mamba_ssm":
                    target = os.path.join(root, *m.split("."))
                    if not (os.path.exists(target + ".py") or os.path.exists(os.path.join(target, "__init__.py"))):
                        missing.append(f"{os.path.relpath(path, root)} imports {m}")
if missing:
    sys.exit("not staged: " + "; ".join(missing))
print(f"staged mamba_ssm SSD ops at {open(os.path.join(root, 'MAMBA_COMMIT')).read().strip()} into {root}")
PY
