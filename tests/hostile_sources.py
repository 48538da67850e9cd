"""Kernel sources that attack a compiler front end, shared by the backends' tests."""


def macro_bomb(version: str) -> str:
    """GLSL whose macros expand to 2**40 tokens: a front end runs for hours (issue 31 finding 8)."""
    defines = "\n".join(f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, 41))
    return f"{version}\n#define A0 x+\n{defines}\nvoid main() {{ int x = 0; x = A40 1; }}\n"
