"""The scanner of `trnsim port-check`: Python's own parser (ast), import-aware.

Names are resolved through the file's imports (`import torch as th`, `from torch import cuda`,
`from torch.cuda.amp import autocast`), so `th.cuda.synchronize()` and `autocast()` are found and
`numba.cuda.jit` is not. Strings are looked at only where they are device strings (device
arguments, device comparisons, assignments to a *device* name); comments never.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field

from trnsim.port import rules as R
from trnsim.port.findings import Finding, Fix, Span

_IGNORE = re.compile(r"port-check:\s*ignore(?:\[([A-Za-z0-9_, ]+)\])?")
_ALL = frozenset({"*"})


@dataclass
class ScanResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    torch_alias: str | None = None     # a name the file binds to the torch module
    source: str = ""


def _bindings(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted module path, from every import in the file."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    names.setdefault(root, root)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _ignores(source: str) -> dict[int, frozenset[str]]:
    """Line -> codes silenced there by `# port-check: ignore` or `# port-check: ignore[CU101,CU202]`."""
    out: dict[int, frozenset[str]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT and (m := _IGNORE.search(tok.string)):
                codes = frozenset(c.strip() for c in m.group(1).split(",")) if m.group(1) else _ALL
                out[tok.start[0]] = codes
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


def _mentions_device(expr: ast.AST) -> bool:
    for node in ast.walk(expr):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name is not None and ("device" in name.lower() or name in ("dev", "type")):
            return True
    return False


def _string(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str, source: str, tree: ast.AST) -> None:
        self.path, self.lines = path, source.splitlines()
        self.names = _bindings(tree)
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.guarded = 0
        self.findings: list[Finding] = []

    # ---- positions

    def _col(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def span(self, node: ast.AST) -> Span:
        return Span(node.lineno, self._col(node.lineno, node.col_offset),
                    node.end_lineno, self._col(node.end_lineno, node.end_col_offset))

    def report(self, node: ast.AST, code: str, message: str, replacement: str, fix: Fix | None = None,
               at: Span | None = None, severity: str = "", compat: str = "") -> None:
        s = at or self.span(node)
        self.findings.append(Finding(self.path, s.line, s.col + 1, s.end_line, s.end_col + 1, code, message,
                                     replacement, severity=severity, compat=compat, fix=fix))

    # ---- names

    def qual(self, node: ast.AST) -> str | None:
        """Dotted name of a Name/Attribute chain rooted at an imported module, else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.names:
            return None
        return ".".join([self.names[node.id], *reversed(parts)])

    def _called(self, node: ast.AST) -> ast.Call | None:
        parent = self.parents.get(node)
        return parent if isinstance(parent, ast.Call) and parent.func is node else None

    # ---- torch.cuda.*, backend flags, build queries

    def _cuda_reference(self, node: ast.AST, qual: str) -> None:
        """Reports a torch.cuda reference once, at its longest known member (torch.cuda.amp.autocast,
        not torch.cuda.amp)."""
        chain = []
        n, q = node, qual
        while True:
            chain.append((n, q))
            if not isinstance(n, ast.Attribute) or q == "torch.cuda":
                break
            n, q = n.value, q.rsplit(".", 1)[0]
        members = [(n, q[len("torch.cuda."):]) for n, q in chain if q.startswith("torch.cuda.")]
        if not members:
            target, path = node, ""
        else:
            known = [(n, p) for n, p in members if R.known_member(p)]
            target, path = known[0] if known else members[-1]
        tq = f"torch.cuda.{path}" if path else "torch.cuda"
        entry = R.member(path)
        fix = None
        call = self._called(target)
        if entry.fix == "expr":
            fix = Fix("expr", self.span(target), entry.template)
        elif (entry.fix == "call" and call is not None and not _has_star(call)
              and not (entry.keywords_only and call.args)):
            fix = Fix("call", self.span(call), entry.template, entry.device_arg, entry.defaults)
        elif entry.fix == "call" and entry.device_arg != "positional":
            fix = Fix("expr", self.span(target), f"{entry.template}({entry.device_arg}={{device_type}})")
        shown = tq + ("()" if call is not None else "")
        what = R.rule(entry.code).summary
        message = f"{shown}: {what}" if path else "torch.cuda used as a module: CUDA's device module"
        self.report(target, entry.code, message, entry.replacement, fix, compat=entry.compat or "")

    def _qualified_reference(self, node: ast.AST, qual: str) -> bool:
        if qual == "torch.cuda" or qual.startswith("torch.cuda."):
            self._cuda_reference(node, qual)
        elif qual.startswith("torch.backends.cudnn"):
            self.report(node, "CU301", f"{qual}: {R.rule('CU301').summary}", R.rule("CU301").help)
        elif qual.startswith("torch.backends.cuda.is_built") or qual == "torch.version.cuda":
            self.report(node, "CU120", f"{qual}: {R.rule('CU120').summary}", R.rule("CU120").help)
        elif qual.startswith("torch.backends.cuda"):
            self.report(node, "CU302", f"{qual}: {R.rule('CU302').summary}", R.rule("CU302").help)
        elif qual in R.CUDA_EXTENSION:
            self.report(node, "CU401", f"{qual}: {R.rule('CU401').summary}", R.rule("CU401").help)
        else:
            return False
        return True

    def visit_Attribute(self, node: ast.Attribute) -> None:
        qual = self.qual(node)
        if qual is not None and self._qualified_reference(node, qual):
            return
        if node.attr == "is_cuda":
            end = self.span(node)
            at = Span(end.end_line, end.end_col - len("is_cuda"), end.end_line, end.end_col)
            self.report(node, "CU203", ".is_cuda: False for neuron tensors", R.rule("CU203").help, at=at)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        qual = self.names.get(node.id)
        if qual is not None and qual != node.id:
            self._qualified_reference(node, qual)

    # ---- device strings

    def _device_literals(self, expr: ast.AST, code: str, context: str) -> None:
        if (s := _string(expr)) is not None:
            if R.CUDA_DEVICE.fullmatch(s):
                fixable = code == "CU202" and R.CUDA_FIXABLE.fullmatch(s)
                fix = Fix("device_string", self.span(expr)) if fixable else None
                self.report(expr, code, f'"{s}" {context}', _device_replacement(code), fix)
        elif isinstance(expr, ast.JoinedStr) and expr.values and (s := _string(expr.values[0])) is not None:
            if s.startswith("cuda:") or (s == "cuda" and len(expr.values) == 1):
                fix = Fix("device_string", self.span(expr)) if code == "CU202" else None
                self.report(expr, code, f'f"{s}..." {context}', _device_replacement(code), fix)
        elif isinstance(expr, ast.IfExp):
            self._device_literals(expr.body, code, context)
            self._device_literals(expr.orelse, code, context)
        elif isinstance(expr, ast.BoolOp):
            for value in expr.values:
                self._device_literals(value, code, context)
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
            self._device_literals(expr.left, code, context)
        elif (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format"
              and _string(expr.func.value) is not None):
            self._device_literals(expr.func.value, code, context)

    def _nccl_literals(self, expr: ast.AST) -> None:
        if (s := _string(expr)) is not None and R.NCCL.fullmatch(s):
            fix = Fix("nccl_string", self.span(expr)) if s == "nccl" else None
            self.report(expr, "CU303", f'"{s}": {R.rule("CU303").summary}', R.rule("CU303").help, fix)
        elif isinstance(expr, ast.IfExp):
            self._nccl_literals(expr.body)
            self._nccl_literals(expr.orelse)

    def _named_value(self, name: str, value: ast.AST) -> None:
        lowered = name.lower()
        if "device" in lowered:
            self._device_literals(value, "CU202", f"assigned to {name}: a CUDA device")
        elif "backend" in lowered:
            self._nccl_literals(value)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        qual = self.qual(func)
        method = func.attr if isinstance(func, ast.Attribute) else None
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if method == "cuda" and self.qual(func.value) != "torch":
            end = self.span(func)
            at = Span(end.end_line, end.end_col - len("cuda"), end.end_line, end.end_col)
            # .cuda(device, non_blocking) has no .to() spelling with the same positions
            fix = None if _has_star(node) or len(node.args) > 1 else Fix("dot_cuda", self.span(node))
            self.report(node, "CU201", ".cuda(): moves to a CUDA device", R.rule("CU201").help, fix, at=at)
        for kw in node.keywords:
            if kw.arg in R.DEVICE_KEYWORDS:
                self._device_literals(kw.value, "CU202", f"passed as {kw.arg}=: a CUDA device")
            elif kw.arg in R.PIN_MEMORY_KEYWORDS:
                self._device_literals(kw.value, "CU204", f"passed as {kw.arg}=: pins for a CUDA device")
            elif kw.arg in R.BACKEND_KEYWORDS:
                self._nccl_literals(kw.value)
            elif kw.arg == "default" and node.args and "device" in (_string(node.args[0]) or ""):
                self._device_literals(kw.value, "CU202", f"default of {_string(node.args[0])}: a CUDA device")
        if node.args and (qual in R.DEVICE_POSITIONAL or method in R.DEVICE_METHODS):
            self._device_literals(node.args[0], "CU202", f"passed to {qual or '.' + method}(): a CUDA device")
        if node.args and method == "pin_memory":
            self._device_literals(node.args[0], "CU204", "passed to .pin_memory(): pins for a CUDA device")
        if node.args and called in R.BACKEND_CALLS:
            self._nccl_literals(node.args[0])
        if method == "startswith" and node.args and _mentions_device(func.value):
            if (s := _string(node.args[0])) is not None and s.startswith("cuda"):
                self.report(node.args[0], "CU203", f'startswith("{s}"): a CUDA device test', R.rule("CU203").help)
        if qual in R.CPP_EXTENSION_LOADERS and _loads_cuda(node):
            self.report(func, "CU401", f"{qual}() with CUDA sources: {R.rule('CU401').summary}", R.rule("CU401").help)
        if qual == "torch.compile":
            for kw in node.keywords:
                s = _string(kw.value)
                if (kw.arg == "mode" and s in R.COMPILE_MODES) or (kw.arg == "backend" and s in R.COMPILE_BACKENDS):
                    self.report(kw.value, "CU404", f'torch.compile({kw.arg}="{s}"): {R.rule("CU404").summary}',
                                R.rule("CU404").help)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            for this, other in ((left, right), (right, left)):
                if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                    candidates = [this]
                elif isinstance(op, (ast.In, ast.NotIn)) and this is right and isinstance(this, (ast.Tuple, ast.List,
                                                                                                  ast.Set)):
                    candidates = list(this.elts)
                elif isinstance(op, (ast.In, ast.NotIn)) and this is left:
                    candidates = [this]
                else:
                    continue
                for literal in candidates:
                    s = _string(literal)
                    if s is not None and R.CUDA_DEVICE.fullmatch(s) and _mentions_device(other):
                        self.report(literal, "CU203", f'compared with "{s}": a CUDA device test',
                                    R.rule("CU203").help)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) \
                else None
            if name:
                self._named_value(name, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        target = node.target
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None
        if name and node.value is not None:
            self._named_value(name, node.value)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values):
            if (name := _string(key) if key is not None else None) and name.isidentifier():
                self._named_value(name, value)
        self.generic_visit(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        positional = args.posonlyargs + args.args
        for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
            self._named_value(arg.arg, default)
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            if default is not None:
                self._named_value(arg.arg, default)
        for decorator in node.decorator_list:
            qual = self.qual(decorator.func if isinstance(decorator, ast.Call) else decorator)
            if qual in R.TRITON_DECORATORS:
                self.report(decorator, "CU402", f"@{qual} kernel {node.name}: {R.rule('CU402').summary}",
                            R.rule("CU402").help)
        self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    # ---- imports of CUDA-only packages

    def _package(self, node: ast.AST, module: str) -> None:
        for package, replacement in R.CUDA_PACKAGES.items():
            if module == package or module.startswith(package + "."):
                guarded = self.guarded > 0
                message = f"import {module}: {R.rule('CU403').summary}" + (" (optional here: the import is guarded)"
                                                                             if guarded else "")
                self.report(node, "CU403", message, replacement, severity="note" if guarded else "")
                return

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._package(alias, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return
        before = len(self.findings)
        self._package(node, node.module)
        if len(self.findings) == before:
            for alias in node.names:
                self._package(alias, f"{node.module}.{alias.name}")

    def visit_Try(self, node: ast.Try) -> None:
        guards = any(_catches_import_error(h) for h in node.handlers)
        self.guarded += guards
        for stmt in node.body:
            self.visit(stmt)
        self.guarded -= guards
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    visit_TryStar = visit_Try

    def visit_If(self, node: ast.If) -> None:
        guards = _availability_test(node.test)
        self.visit(node.test)
        self.guarded += guards
        for stmt in node.body:
            self.visit(stmt)
        self.guarded -= guards
        for stmt in node.orelse:
            self.visit(stmt)


def _has_star(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords)


def _device_replacement(code: str) -> str:
    if code == "CU204":
        return R.rule("CU204").help
    return 'torch.accelerator.current_accelerator() (a device) or its .type (a string), or "neuron"'


def _loads_cuda(call: ast.Call) -> bool:
    for kw in call.keywords:
        if kw.arg == "cuda_sources" or (kw.arg == "with_cuda" and isinstance(kw.value, ast.Constant)
                                        and kw.value.value is True):
            return True
    for node in ast.walk(call):
        s = _string(node)
        if s is not None and s.endswith((".cu", ".cuh")):
            return True
    return False


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else "" for t in types}
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _availability_test(test: ast.AST) -> bool:
    """`if is_flash_attn_available():`, `if TYPE_CHECKING:`, `if find_spec("apex")`: an optional import."""
    for node in ast.walk(test):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if name == "TYPE_CHECKING" or name == "find_spec" or ("available" in name and name.startswith("is_")):
            return True
    return False


def scan_source(source: str, path: str = "<string>", select: list[str] | None = None,
                ignore: list[str] | None = None) -> ScanResult:
    result = ScanResult(path, source=source)
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None) or 1
        col = getattr(error, "offset", None) or 1
        msg = getattr(error, "msg", str(error))
        result.findings.append(Finding(path, line, col, line, col + 1, "CU000", f"could not parse: {msg}",
                                       R.rule("CU000").help))
        return result
    scanner = _Scanner(path, source, tree)
    scanner.visit(tree)
    result.torch_alias = next((name for name, module in scanner.names.items() if module == "torch"), None)
    silenced = _ignores(source)
    result.findings = sorted(
        (f for f in scanner.findings
         if R.selected(f.code, select, ignore)
         and not (f.line in silenced and (silenced[f.line] is _ALL or f.code in silenced[f.line]))),
        key=lambda f: (f.line, f.col, f.code))
    return result


def read_source(path: str) -> str:
    """The file's text in its declared encoding (PEP 263), UTF-8 by default."""
    with open(path, "rb") as handle:
        data = handle.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding, errors="replace")


def scan_file(path: str, display: str | None = None, select: list[str] | None = None,
              ignore: list[str] | None = None) -> ScanResult:
    return scan_source(read_source(path), display or path, select, ignore)
