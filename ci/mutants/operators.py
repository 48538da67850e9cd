"""Mutants derived from the code by operator, with no hand-picking (issue 23): every place an operator applies
in a file is a mutant; the engine (``generated.py``) samples among those the suite executes.

Python is read with the standard library's ``ast`` (exact node positions; the mutant is a text span of the
file replaced, so the rest of the file keeps its formatting and comments). C is read as tokens (comments,
strings and preprocessor lines skipped; function bodies found by their braces), the same operators at the
token level; a C mutant that does not compile is discarded by the engine, never counted.

Why not mutmut or cosmic-ray: both drive the test runner themselves (mutmut 3 through trampolines in its own
copy of the package, run by pytest in-process; cosmic-ray through its session database and its own runner),
while a mutant here must be certified by ``ironaccel certify`` on a target in a copy of the tree, with the tests
that execute its line; neither mutates C; and their operator sets lack dropped calls by name, early returns
and swapped arguments. What is left to reuse is the operator walk, which ``ast``'s node positions make short.

Operators (the same names for both languages):
  cmp-flip      ``<``<->``<=``, ``>``<->``>=``, ``==``<->``!=`` (Python also ``is``/``is not``, ``in``/``not in``)
  arith         ``+``<->``-``, ``*``<->``//`` (C ``/``), ``/``->``*``, ``<<``<->``>>``, ``&``<->``|`` (and their
                augmented assignments; C ``++``<->``--``)
  const         an integer n -> n+1 and n-1; a float x -> 2x and x/2; ``True``<->``False``
  drop-call     a call made as a statement, to a function whose name says it waits, flushes, checks, marks,
                releases, raises or syncs (``DROPPED_CALLS``), removed; Python ``raise`` statements too
  negate        the condition of an ``if``/``while`` (and Python's conditional expression) inverted
  early-return  a function returns at its first statement (Python: functions that return no value;
                C: ``void`` functions, and ``return 0;`` for those returning an integer status)
  swap-args     two neighbouring positional arguments of a call exchanged (not of ``COMMUTATIVE`` functions)
Type annotations are not mutated (with ``from __future__ import annotations`` they never run).
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

#: A called function's name matching this is one whose call may be dropped (``drop-call``).
DROPPED_CALLS = re.compile(r"wait|flush|check|mark|release|raise|sync", re.IGNORECASE)
#: Functions whose arguments commute: swapping them is always an equivalent mutant, so ``swap-args`` skips them.
COMMUTATIVE = {"min", "max", "MIN", "MAX"}


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str  # relative to the repository root
    line: int
    function: str  # enclosing function ("" at module level)
    operator: str
    start: int  # the replaced span, as character offsets in the file's text
    end: int
    old: str
    new: str
    toplevel: bool = False  # run at import (module or class body), not when a function is called

    def apply(self, text: str) -> str:
        if text[self.start:self.end] != self.old:
            raise ValueError(f"{self.id}: {self.file} changed since the mutant was derived")
        return text[:self.start] + self.new + text[self.end:]

    @property
    def change(self) -> str:
        """The change in one short line (for reports)."""
        def short(s: str) -> str:
            s = " ".join(s.split())
            return s if len(s) <= 60 else s[:57] + "..."
        return f"`{short(self.old)}` -> `{short(self.new)}`" if self.old else f"insert `{short(self.new)}`"


class _Collector:
    """Candidate edits of one file, turned into mutants with ids stable while the code around them is."""

    def __init__(self, file: str, text: str):
        self.file, self.text = file, text
        self.lines = text.splitlines(keepends=True)
        self.line_start = [0]
        for ln in self.lines:
            self.line_start.append(self.line_start[-1] + len(ln))
        # (start, end, new) -> (operator, function, toplevel)
        self.edits: dict[tuple[int, int, str], tuple[str, str, bool]] = {}

    def add(self, operator: str, function: str, start: int, end: int, new: str, toplevel: bool = False) -> None:
        if self.text[start:end] != new:
            self.edits.setdefault((start, end, new), (operator, function, toplevel))

    def line_of(self, offset: int) -> int:
        lo, hi = 0, len(self.line_start) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_start[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def mutants(self) -> list[Mutant]:
        out: list[Mutant] = []
        seen: dict[str, int] = {}
        for (start, end, new), (operator, function, toplevel) in sorted(self.edits.items()):
            line = self.line_of(start)
            old = self.text[start:end]
            context = self.lines[line - 1].strip()
            key = "|".join((self.file, function, operator, context, old, new))
            n = seen[key] = seen.get(key, -1) + 1
            digest = hashlib.sha1(f"{key}|{n}".encode()).hexdigest()[:8]
            name = self.file.removeprefix("ironaccel/").removeprefix("plugins/ironaccel-opencl/")
            out.append(Mutant(f"{name}:{function or '-'}:{operator}:{digest}", self.file, line, function, operator,
                              start, end, old, new, toplevel))
        return out


# -- Python ---------------------------------------------------------------------------------------------

_CMP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
        ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is"),
        ast.In: ("in", "not in"), ast.NotIn: ("not in", "in")}
_ARITH = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"), ast.FloorDiv: ("//", "*"),
          ast.Div: ("/", "*"), ast.LShift: ("<<", ">>"), ast.RShift: (">>", "<<"), ast.BitAnd: ("&", "|"),
          ast.BitOr: ("|", "&")}
_OP_CHARS = "<>=!*/+-&|%^@"


def _op_pattern(token: str) -> re.Pattern[str]:
    if token[0].isalpha():
        return re.compile(r"(?<!\w)" + r"\s+".join(token.split()) + r"(?!\w)")
    return re.compile(f"(?<![{re.escape(_OP_CHARS)}]){re.escape(token)}(?![{re.escape(_OP_CHARS)}])")


class _PythonVisitor(ast.NodeVisitor):
    def __init__(self, c: _Collector):
        self.c, self.scope, self.depth = c, [], 0  # depth: functions we are inside

    def add(self, operator: str, start: int, end: int, new: str) -> None:
        self.c.add(operator, self.function, start, end, new, self.depth == 0)

    def pos(self, line: int, col: int) -> int:
        """ast's (line, UTF-8 byte column) as a character offset."""
        text = self.c.lines[line - 1]
        return self.c.line_start[line - 1] + len(text.encode()[:col].decode(errors="ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.pos(node.lineno, node.col_offset), self.pos(node.end_lineno, node.end_col_offset)

    @property
    def function(self) -> str:
        return ".".join(self.scope)

    def op_between(self, operator: str, left: ast.AST, right: ast.AST, token: str, new: str) -> None:
        start, end = self.span(left)[1], self.span(right)[0]
        gap = self.c.text[start:end]
        found = list(_op_pattern(token).finditer(gap))
        if len(found) == 1:
            self.add(operator, start + found[0].start(), start + found[0].end(), new)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
        returns_value = any(isinstance(n, ast.Return) and n.value is not None or isinstance(n, (ast.Yield, ast.YieldFrom))
                            for n in _own_nodes(node))
        if body and not returns_value and not (len(body) == 1 and isinstance(body[0], (ast.Pass, ast.Expr))
                                               and _is_trivial(body[0])):
            at = self.span(body[0])[0]
            indent = " " * body[0].col_offset
            self.c.add("early-return", self.function, at, at, "return\n" + indent)
        for n in node.decorator_list:
            self.visit(n)
        self.depth += 1
        self.generic_visit_body(node)
        self.depth -= 1
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def generic_visit_body(self, node: ast.AST) -> None:
        for stmt in node.body:  # type: ignore[attr-defined]
            self.visit(stmt)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit_body(node)
        self.scope.pop()

    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            token, new = _CMP[type(op)]
            self.op_between("cmp-flip", left, right, token, new)
            left = right
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) in _ARITH and not _is_text(node.left) and not _is_text(node.right):
            token, new = _ARITH[type(node.op)]
            self.op_between("arith", node.left, node.right, token, new)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if type(node.op) in _ARITH and not _is_text(node.value):
            token, new = _ARITH[type(node.op)]
            self.op_between("arith", node.target, node.value, token + "=", new + "=")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        start, end = self.span(node)
        v = node.value
        if isinstance(v, bool):
            self.add("const", start, end, repr(not v))
        elif isinstance(v, int):
            for n in (v + 1, v - 1):
                self.add("const", start, end, str(n) if n >= 0 else f"({n})")
        elif isinstance(v, float):
            for x in (v * 2, v / 2):
                self.add("const", start, end, repr(x))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        pass  # text, not logic

    def visit_Expr(self, node: ast.Expr) -> None:
        call = node.value
        if isinstance(call, ast.Call) and DROPPED_CALLS.search(_callee(call)):
            self.add("drop-call", *self.span(node), "pass")
        if not _is_docstring(node):
            self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        self.add("drop-call", *self.span(node), "pass")
        self.generic_visit(node)

    def negate(self, test: ast.expr) -> None:
        start, end = self.span(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.add("negate", start, end, "(" + self.c.text[slice(*self.span(test.operand))] + ")")
        else:
            self.add("negate", start, end, "not (" + self.c.text[start:end] + ")")

    def visit_If(self, node: ast.If | ast.While | ast.IfExp) -> None:
        self.negate(node.test)
        self.generic_visit(node)

    visit_While = visit_IfExp = visit_If

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        for child in (node.target, node.value):  # not the annotation: a type, never run as code here
            if child is not None:
                self.visit(child)

    def visit_Call(self, node: ast.Call) -> None:
        args = node.args if _callee(node) not in COMMUTATIVE else []
        for a, b in zip(args, args[1:]):
            if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
                continue
            (sa, ea), (sb, eb) = self.span(a), self.span(b)
            ta, tb = self.c.text[sa:ea], self.c.text[sb:eb]
            if ta != tb:
                self.add("swap-args", sa, eb, tb + self.c.text[ea:sb] + ta)
        self.generic_visit(node)


def _own_nodes(fn: ast.AST):
    """The nodes of a function's body, not of the functions and classes nested in it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _is_trivial(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Pass) or isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def python_mutants(file: str, text: str) -> list[Mutant]:
    c = _Collector(file, text)
    _PythonVisitor(c).visit(ast.parse(text))
    return c.mutants()


# -- C --------------------------------------------------------------------------------------------------

_C_TOKEN = re.compile(r"""
   (?P<skip>//[^\n]*|/\*.*?\*/|^[ \t]*\#(?:\\\n|[^\n])*|\s+)
 | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
 | (?P<number>(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[uUlLfF]*)
 | (?P<ident>[A-Za-z_]\w*)
 | (?P<op>->|\+\+|--|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|\.\.\.|[{}()\[\];,.<>=!~?:+\-*/%&|^])
""", re.S | re.M | re.X)
_C_KEYWORDS = {"return", "case", "sizeof", "if", "while", "for", "do", "else", "switch", "goto", "break", "continue",
               "static", "const", "volatile", "struct", "union", "enum", "typedef", "extern", "inline", "default"}
_C_CMP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
_C_ARITH = {"+": "-", "-": "+", "*": "/", "/": "*", "<<": ">>", ">>": "<<", "&": "|", "|": "&", "+=": "-=",
            "-=": "+=", "*=": "/=", "/=": "*=", "++": "--", "--": "++"}


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    start: int
    end: int


def c_tokens(text: str) -> list[_Tok]:
    toks = []
    for m in _C_TOKEN.finditer(text):
        if m.lastgroup != "skip":
            toks.append(_Tok(m.lastgroup, m.group(), m.start(), m.end()))
    return toks


def _matching(toks: list[_Tok]) -> dict[int, int]:
    """Index of each bracket -> index of its partner."""
    pairs, stack = {}, []
    for i, t in enumerate(toks):
        if t.text in "([{":
            stack.append(i)
        elif t.text in ")]}" and stack:
            j = stack.pop()
            pairs[i], pairs[j] = j, i
    return pairs


@dataclass(frozen=True)
class CFunction:
    name: str
    body: tuple[int, int]  # token indexes of its braces
    returns: str  # "void", "int" (an integer status) or "pointer"


def c_functions(toks: list[_Tok], pairs: dict[int, int] | None = None) -> list[CFunction]:
    pairs = pairs if pairs is not None else _matching(toks)
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        if t.text == "{":
            close = pairs.get(i, len(toks) - 1)
            if i > 0 and toks[i - 1].text == ")" and (i - 1) in pairs and pairs[i - 1] > 0:
                name_at = pairs[i - 1] - 1
                if toks[name_at].kind == "ident" and toks[name_at].text not in _C_KEYWORDS:
                    before = toks[name_at - 1].text if name_at > 0 else ""
                    returns = "void" if before == "void" else "pointer" if before == "*" else "int"
                    out.append(CFunction(toks[name_at].text, (i, close), returns))
            i = close + 1
        else:
            i += 1
    return out


def _is_operand_end(t: _Tok) -> bool:
    return t.kind in ("number", "string") or t.kind == "ident" and t.text not in _C_KEYWORDS or t.text in (")", "]")


def c_mutants(file: str, text: str) -> list[Mutant]:
    c = _Collector(file, text)
    toks = c_tokens(text)
    pairs = _matching(toks)
    for fn in c_functions(toks, pairs):
        lo, hi = fn.body
        add = lambda op, s, e, new: c.add(op, fn.name, s, e, new)  # noqa: E731
        first = toks[lo + 1] if lo + 1 < hi else None
        if first is not None:
            ret = {"void": "return; ", "int": "return 0; "}.get(fn.returns)
            if ret:
                add("early-return", first.start, first.start, ret)
        for i in range(lo + 1, hi):
            t, prev = toks[i], toks[i - 1]
            if t.text == "*" and prev.kind == "ident" and (toks[i + 1].text in (")", "*") or (
                    toks[i - 2].text in (";", "{", "}") and toks[i + 1].kind == "ident")):
                continue  # a declaration or a cast (``Stream *s``, ``(Foo *)``), not a product
            if t.text in _C_CMP:
                add("cmp-flip", t.start, t.end, _C_CMP[t.text])
            elif t.text in _C_ARITH:
                binary = t.text in ("++", "--") or t.text.endswith("=") or _is_operand_end(prev)
                if binary:
                    add("arith", t.start, t.end, _C_ARITH[t.text])
            elif t.kind == "number" and re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*", t.text):
                digits = re.match(r"0[xX][0-9a-fA-F]+|\d+", t.text).group()
                suffix = t.text[len(digits):]
                v = int(digits, 0)
                for n in (v + 1, v - 1):
                    if n >= 0:
                        add("const", t.start, t.end, str(n) + suffix)
            elif t.kind == "ident" and t.text in ("true", "false"):
                add("const", t.start, t.end, "false" if t.text == "true" else "true")
            elif t.kind == "ident" and toks[i + 1].text == "(" and (i + 1) in pairs:
                close = pairs[i + 1]
                if (t.text in ("if", "while") and close > i + 2):
                    inner = text[toks[i + 2].start:toks[close - 1].end]
                    add("negate", toks[i + 2].start, toks[close - 1].end, f"!({inner})")
                elif t.text not in _C_KEYWORDS:
                    if (DROPPED_CALLS.search(t.text) and prev.text in (";", "{", "}", ")", "else")
                            and close + 1 < len(toks) and toks[close + 1].text == ";"):
                        add("drop-call", t.start, toks[close].end, "(void)0")
                    args = _c_args(toks, pairs, i + 1, close) if t.text not in COMMUTATIVE else []
                    for (a0, a1), (b0, b1) in zip(args, args[1:]):
                        ta, tb = text[toks[a0].start:toks[a1].end], text[toks[b0].start:toks[b1].end]
                        if ta != tb:
                            add("swap-args", toks[a0].start, toks[b1].end, tb + text[toks[a1].end:toks[b0].start] + ta)
    return c.mutants()


def _c_args(toks: list[_Tok], pairs: dict[int, int], open_: int, close: int) -> list[tuple[int, int]]:
    """The (first, last) token indexes of each argument of the call whose parentheses are at open_/close."""
    args, start, i = [], open_ + 1, open_ + 1
    while i < close:
        if toks[i].text in "([{" and i in pairs:
            i = pairs[i] + 1
            continue
        if toks[i].text == ",":
            args.append((start, i - 1))
            start = i + 1
        i += 1
    if start < close:
        args.append((start, close - 1))
    return [a for a in args if a[0] <= a[1]]


def mutants_of(file: str, text: str) -> list[Mutant]:
    """C for ``.c`` files and the ``.inc`` parts a ``.c`` file includes; Python otherwise."""
    return c_mutants(file, text) if file.endswith((".c", ".inc")) else python_mutants(file, text)
