"""What a WGSL module declares, read from its source: entry points, bindings, the uniform block's members,
block-size overrides. wgpu-py has no reflection API, and launches are checked against these."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ... import api
from ...errors import CompileError

_KERNEL_RE = re.compile(r"@compute\b[^;{]*?\bfn\s+([A-Za-z_]\w*)")
_BINDING_RE = re.compile(r"@group\(\s*0\s*\)\s*@binding\(\s*(\d+)\s*\)\s*var\s*<\s*(storage|uniform)\s*"
                         r"(?:,\s*(read_write|read))?\s*>\s*[A-Za-z_]\w*\s*:\s*([A-Za-z_]\w*)")
_STRUCT_RE = re.compile(r"\bstruct\s+([A-Za-z_]\w*)\s*\{([^}]*)\}")
_MEMBER_RE = re.compile(r"(?:@\w+(?:\([^)]*\))?\s*)*([A-Za-z_]\w*)\s*:\s*([A-Za-z_][\w<>, ]*?)\s*(?:,|$)")
_OVERRIDE_RE = re.compile(r"\boverride\s+(BLOCK_[XYZ])\b")
_FIXED_SIZE_RE = re.compile(r"@workgroup_size\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*(\d+)\s*)?\)")
_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)

#: WGSL scalar types a uniform member may have, as kernel parameters.
SCALARS = {"f32": api.Param("scalar", 4, "float"), "u32": api.Param("scalar", 4, "int"),
           "i32": api.Param("scalar", 4, "int"), "f64": api.Param("scalar", 8, "float"),
           "f16": api.Param("scalar", 2, "float")}


@dataclass(frozen=True)
class Interface:
    entry_points: tuple[str, ...]
    storage_access: tuple[str, ...]  #: "read" or "read_write" per storage binding 0..k-1
    scalars: tuple[api.Param, ...]  #: the uniform block's members, in order
    has_uniform: bool
    overrides: frozenset[str]
    fixed_block: api.Dim3 | None  #: a literal @workgroup_size, when the block cannot be chosen at launch

    @property
    def params(self) -> tuple[api.Param, ...]:
        return (api.Param("buffer"),) * len(self.storage_access) + self.scalars


def reflect(source: str) -> Interface:
    code = _COMMENT_RE.sub("", source)
    structs = {name: body for name, body in _STRUCT_RE.findall(code)}
    bindings = sorted((int(b), kind, access or "read", type_name) for b, kind, access, type_name in _BINDING_RE.findall(code))
    storage = tuple(access for _, kind, access, _ in bindings if kind == "storage")
    uniforms = [type_name for _, kind, _, type_name in bindings if kind == "uniform"]
    if len(uniforms) > 1:
        raise CompileError("Device.compile", "wgsl", "a kernel takes its scalars in one uniform block; this module declares "
                           f"{len(uniforms)}")
    scalars: list[api.Param] = []
    for type_name in uniforms:
        body = structs.get(type_name)
        if body is None:
            raise CompileError("Device.compile", "wgsl", f"the uniform block's type {type_name!r} is not a struct of scalars")
        for member, member_type in _MEMBER_RE.findall(body.strip()):
            if member_type.strip() not in SCALARS:
                raise CompileError("Device.compile", "wgsl", f"uniform member {member}: {member_type} is not a scalar "
                                   f"ironaccel passes ({', '.join(SCALARS)})")
            scalars.append(SCALARS[member_type.strip()])
    overrides = frozenset(_OVERRIDE_RE.findall(code))
    fixed = _FIXED_SIZE_RE.search(code)
    fixed_block = tuple(int(v or 1) for v in fixed.groups()) if fixed and not overrides else None
    return Interface(tuple(_KERNEL_RE.findall(code)), storage, tuple(scalars), bool(uniforms), overrides,
                     fixed_block)  # type: ignore[arg-type]
