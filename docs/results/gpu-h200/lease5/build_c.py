"""Builds hetserve's compiled modules from the C files Cython made on the development
machine (carried as ``.whl/csrc.tar.xz``), one compiler process per module in parallel:
``setup.py``'s ``build_ext`` compiles one module after another. Run in the tree's root:
``python3 build_c.py TREE`` (writes each ``.so`` beside its source under TREE/src)."""

import concurrent.futures as cf
import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

tree = Path(sys.argv[1])
setup_text = (tree / "setup.py").read_text()
modules = re.findall(r'\(\s*"(hetserve[\w.]+)",\s*"(src/[\w/]+)\.pyx?"', setup_text)
cv = sysconfig.get_config_var
cmd = cv("CC").split() + cv("CFLAGS").split() + cv("CCSHARED").split()
cmd += ["-I" + sysconfig.get_paths()["include"], "-shared"]


def build(name: str, stem: str) -> tuple[str, int, float, str]:
    t0 = time.monotonic()
    out = tree / "src" / (name.replace(".", "/") + cv("EXT_SUFFIX"))
    p = subprocess.run([*cmd, str(tree / f"{stem}.c"), "-o", str(out)], capture_output=True, text=True)
    return name, p.returncode, time.monotonic() - t0, p.stderr[-2000:]


with cf.ThreadPoolExecutor(len(modules)) as pool:
    for name, rc, s, err in pool.map(lambda m: build(*m), modules):
        print(f"{name}: rc={rc} in {s:.0f} s", flush=True)
        if rc:
            print(err)
print(len(modules), "modules")
