"""Reading what a SPIR-V module's compute entry points expect of a launch (its buffers, its push-constant
block, a fixed block size), so that a launch that does not match is an InvalidArgument and not a driver crash.

A small reader of the binary format itself (no SPIR-V library is a dependency): it walks the instruction
stream once and collects the few declarations that describe the kernel interface.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...api import Dim3, Param
from ...errors import CompileError

@dataclass(frozen=True)
class KernelInterface:
    """What a SPIR-V entry point expects of a launch, read from the module so a mismatch is an error, not a crash."""

    buffers: int  # storage buffers bound at set 0, bindings 0..buffers-1
    scalar_bytes: int  # size of the push-constant block (0 when it has none)
    fixed_block: Dim3 | None  # the block size when it is not specialization constants 0, 1, 2
    params: tuple[Param, ...] = ()  # the storage buffers in binding order, then the push-constant members by offset


#: The fewest operands of each instruction the reader looks into (more may follow): a shorter one is malformed.
_MIN_OPERANDS = {15: 3, 16: 2, 21: 2, 22: 2, 23: 3, 30: 1, 32: 3, 43: 3, 44: 2, 50: 3, 51: 2, 59: 3, 71: 2, 72: 3}
_LOCAL_SIZE, _OFFSET = 17, 35  # the ExecutionMode and the member Decoration the reader wants


#: The most buffer parameters a kernel may have (its highest binding + 1): far above any device's storage buffers
#: per stage that a launch could fill (KERNEL-86 refuses more than the device binds), and it keeps a binding number
#: such as 0xFFFFFFFF (a flipped word) from making the reader build four billion parameters.
MAX_BUFFER_PARAMS = 1 << 16


def _malformed(detail: str) -> CompileError:
    return CompileError("Device.compile", "spirv", f"malformed SPIR-V: {detail}")


def _literal_string(words: np.ndarray, at: int) -> tuple[str, int]:
    """The nul-terminated UTF-8 literal starting at word ``at``, and how many words it takes."""
    raw = words[at:].tobytes()
    end = raw.find(0)
    if end < 0:
        raise _malformed(f"the string at word {at} has no terminating nul")
    try:
        return raw[:end].decode("utf-8"), end // 4 + 1
    except UnicodeDecodeError:
        raise _malformed(f"the string at word {at} is not UTF-8") from None


def _spirv_words(code: bytes) -> np.ndarray:
    words = np.frombuffer(code, dtype="<u4") if len(code) % 4 == 0 else np.empty(0, "<u4")
    if len(words) >= 5 and words[0] == 0x03022307:
        words = words.byteswap()
    if len(words) < 5 or words[0] != 0x07230203:
        raise CompileError("Device.compile", "spirv", "not a SPIR-V module (bad magic number, or not a whole number of 32-bit words)")
    return words


def spirv_interfaces(code: bytes) -> dict[str, KernelInterface]:
    """The GLCompute entry points of a SPIR-V module, in order, with what each expects of a launch."""
    words = _spirv_words(code)
    per_entry_interface = int(words[1]) >= 0x00010400  # SPIR-V 1.4+ lists every global an entry point uses
    entries: dict[str, tuple[int, list[int]]] = {}
    local_size: dict[int, Dim3] = {}
    decorations: dict[int, dict[int, int]] = {}
    offsets: dict[tuple[int, int], int] = {}
    variables: dict[int, tuple[int, int]] = {}  # id -> (storage class, pointer type)
    pointers: dict[int, int] = {}  # pointer type -> pointee
    structs: dict[int, list[int]] = {}
    sizes: dict[int, int] = {}  # scalar and vector types -> bytes
    scalar_kinds: dict[int, str] = {}  # scalar types -> "int" / "float"
    scalars_of: dict[int, int] = {}  # OpConstant / OpSpecConstant id -> its (first word of) value
    composites: dict[int, list[int]] = {}  # OpConstantComposite / OpSpecConstantComposite id -> constituents
    i = 5
    while i < len(words):
        count, opcode = int(words[i]) >> 16, int(words[i]) & 0xFFFF
        if count == 0 or i + count > len(words):
            raise CompileError("Device.compile", "spirv", f"malformed SPIR-V: instruction at word {i} has length {count}")
        op = [int(w) for w in words[i + 1 : i + count]]
        if len(op) < _MIN_OPERANDS.get(opcode, 0):
            raise _malformed(f"instruction {opcode} at word {i} has {len(op)} operand(s)")
        if opcode == 15 and op[0] == 5:  # OpEntryPoint GLCompute %id "name" %interface...
            name, name_words = _literal_string(words[: i + count], i + 3)
            entries[name] = (op[1], op[2 + name_words :])
        elif opcode == 16 and op[1] == _LOCAL_SIZE:  # OpExecutionMode %id LocalSize x y z
            if len(op) < 5:
                raise _malformed(f"LocalSize at word {i} has {len(op) - 2} of its 3 sizes")
            local_size[op[0]] = (op[2], op[3], op[4])
        elif opcode == 71 and len(op) >= 3:  # OpDecorate %id decoration literal
            decorations.setdefault(op[0], {})[op[1]] = op[2]
        elif opcode == 71 and op[1] in (2, 3):  # Block, BufferBlock
            decorations.setdefault(op[0], {})[op[1]] = 1
        elif opcode == 72 and op[2] == _OFFSET:  # OpMemberDecorate %struct member Offset n
            if len(op) < 4:
                raise _malformed(f"the member Offset at word {i} has no value")
            offsets[(op[0], op[1])] = op[3]
        elif opcode == 59:  # OpVariable %type %id storage-class
            variables[op[1]] = (op[2], op[0])
        elif opcode == 32:  # OpTypePointer %id storage-class %type
            pointers[op[0]] = op[2]
        elif opcode == 30:  # OpTypeStruct %id members...
            structs[op[0]] = op[1:]
        elif opcode in (21, 22):  # OpTypeInt / OpTypeFloat %id width
            sizes[op[0]] = op[1] // 8
            scalar_kinds[op[0]] = "int" if opcode == 21 else "float"
        elif opcode == 23 and op[1] in sizes:  # OpTypeVector %id %component count
            sizes[op[0]] = sizes[op[1]] * op[2]
        elif opcode in (43, 50):  # OpConstant / OpSpecConstant %type %id value
            scalars_of[op[1]] = op[2]
        elif opcode in (44, 51):  # OpConstantComposite / OpSpecConstantComposite %type %id constituents...
            composites[op[1]] = op[2:]
        i += count
    # BuiltIn WorkgroupSize: an object so decorated is the block size of every entry point, over any LocalSize
    workgroup = next((composites[t] for t, d in decorations.items() if d.get(11) == 25 and t in composites), None)

    def fixed_block(name: str, function: int) -> Dim3 | None:
        """The block size the entry point is compiled for, None when a launch chooses it (SpecId 0, 1, 2)."""
        if workgroup is None:
            if function not in local_size:
                raise CompileError("Device.compile", "spirv", f"entry point {name!r} declares no block size: no "
                                   "LocalSize execution mode and no WorkgroupSize object (LocalSizeId is not supported)")
            return local_size[function]
        if [decorations.get(c, {}).get(1) for c in workgroup] == [0, 1, 2]:
            return None
        size = tuple(scalars_of.get(c) for c in workgroup)
        if len(size) != 3 or None in size:
            raise _malformed("the WorkgroupSize object is not a composite of three constants")
        return size  # type: ignore[return-value]  # three ints, checked

    def interface(name: str, function: int, globals_: list[int]) -> KernelInterface:
        chosen = globals_ if per_entry_interface else list(variables)
        bindings, scalar_bytes, scalars = set(), 0, []
        for var in chosen:
            storage, pointer = variables.get(var, (None, None))
            block = pointers.get(pointer)
            if storage == 12 or (storage == 2 and 3 in decorations.get(block, {})):  # StorageBuffer / BufferBlock
                if decorations.get(var, {}).get(34, 0) == 0:
                    bindings.add(decorations.get(var, {}).get(33, 0))
            elif storage == 9 and block in structs:  # PushConstant
                members = sorted(enumerate(structs[block]), key=lambda m: offsets.get((block, m[0]), 0))
                ends = [offsets.get((block, m), 0) + sizes.get(t, 0) for m, t in members]
                scalar_bytes = max(ends, default=0)
                scalars = [Param("scalar", sizes.get(t, 0), scalar_kinds.get(t, "")) for _, t in members]
        buffers = max(bindings, default=-1) + 1
        if buffers > MAX_BUFFER_PARAMS:
            raise _malformed(f"entry point {name!r} has a storage buffer at binding {buffers - 1}: buffers are "
                             f"bound by position, and more than {MAX_BUFFER_PARAMS} buffer parameters is none a "
                             "launch could pass")
        return KernelInterface(buffers, scalar_bytes, fixed_block(name, function), (*[Param("buffer")] * buffers, *scalars))

    return {name: interface(name, function, globals_) for name, (function, globals_) in entries.items()}


def spirv_entry_points(code: bytes) -> list[str]:
    """Names of the GLCompute entry points of a SPIR-V module, in order; CompileError when it is not one."""
    return list(spirv_interfaces(code))
