"""`trnsim port-check --fix`: the mechanical rewrites, on libcst's concrete syntax tree.

Comments, blank lines, quotes and layout are kept: only the nodes a finding names are replaced,
located by the positions the scanner reported. Two targets:
  generic (default)  device-generic code that runs on any accelerator: torch.accelerator,
                     torch.get_device_module(), torch.accelerator.current_accelerator()
  neuron             the literal "neuron" for device strings and the process-group backend
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import MetadataWrapper, PositionProvider

from trnsim.port.findings import Finding, Fix, Span

TARGETS = ("generic", "neuron")


@dataclass
class FixResult:
    source: str          # the rewritten file (the input when nothing applied)
    applied: int         # findings rewritten
    skipped: list[Finding]   # fixable findings whose node could not be rewritten


class _Spelling:
    """The expressions a rewrite inserts, for one file and target."""

    def __init__(self, torch: str, target: str) -> None:
        if target not in TARGETS:
            raise ValueError(f"unknown --to target {target!r} (expected one of {', '.join(TARGETS)})")
        self.torch, self.target = torch, target

    def device_type(self) -> str:
        if self.target == "neuron":
            return '"neuron"'
        return f"{self.torch}.accelerator.current_accelerator().type"

    def device(self) -> str:
        if self.target == "neuron":
            return '"neuron"'
        return f"{self.torch}.accelerator.current_accelerator()"

    def backend(self) -> str:
        if self.target == "neuron":
            return '"neuron"'
        return (f"{self.torch}.distributed.get_default_backend_for_device("
                f"{self.torch}.accelerator.current_accelerator())")

    def template(self, text: str) -> cst.BaseExpression:
        return cst.parse_expression(text.format(torch=self.torch, device_type=self.device_type()))


_KINDS = {
    "expr": (cst.Attribute, cst.Name),
    "call": (cst.Call,),
    "dot_cuda": (cst.Call,),
    "device_string": (cst.SimpleString, cst.FormattedString),
    "nccl_string": (cst.SimpleString,),
}


class _Rewriter(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, fixes: dict[Span, list[Fix]], spelling: _Spelling) -> None:
        super().__init__()
        self.fixes, self.spell = fixes, spelling
        self.applied: set[tuple[Span, str]] = set()

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):  # type: ignore[override]
        pending = self.fixes.get(self._span(original))
        if not pending:
            return updated
        for fix in pending:
            if isinstance(updated, _KINDS[fix.kind]) and (fix.span, fix.kind) not in self.applied:
                replaced = getattr(self, f"_{fix.kind}")(updated, fix)
                if replaced is not None:
                    self.applied.add((fix.span, fix.kind))
                    return replaced
        return updated

    def _span(self, node: cst.CSTNode) -> Span | None:
        try:
            r = self.get_metadata(PositionProvider, node)
        except KeyError:
            return None
        return Span(r.start.line, r.start.column, r.end.line, r.end.column)

    # ---- the rewrites

    def _expr(self, node: cst.BaseExpression, fix: Fix) -> cst.BaseExpression:
        return self.spell.template(fix.template).with_changes(lpar=node.lpar, rpar=node.rpar)

    def _call(self, node: cst.Call, fix: Fix) -> cst.Call:
        device_type = cst.parse_expression(self.spell.device_type())
        args = list(node.args)
        if fix.device_arg == "positional":
            args.insert(0, cst.Arg(device_type))
        else:
            at = sum(1 for a in args if a.keyword is None and not a.star)
            args.insert(at, _keyword(fix.device_arg, device_type))
        given = {a.keyword.value for a in args if a.keyword is not None}
        args += [_keyword(name, self.spell.template(value)) for name, value in fix.defaults if name not in given]
        return node.with_changes(func=self.spell.template(fix.template), args=_commas(args))

    def _dot_cuda(self, node: cst.Call, fix: Fix) -> cst.Call | None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return None
        device_args = [a for a in node.args if a.keyword is None or a.keyword.value == "device"]
        rest = [a for a in node.args if a not in device_args]
        if device_args:   # .cuda(i) -> .to(i): an index means the current accelerator's device i
            device = device_args[0].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
        else:
            device = cst.Arg(cst.parse_expression(self.spell.device()))
        return node.with_changes(func=func.with_changes(attr=cst.Name("to")), args=_commas([device, *rest]))

    def _device_string(self, node: cst.SimpleString | cst.FormattedString, fix: Fix) -> cst.BaseExpression | None:
        if isinstance(node, cst.FormattedString):
            first = node.parts[0] if node.parts else None
            if not isinstance(first, cst.FormattedStringText) or not first.value.startswith("cuda"):
                return None
            rest = first.value[len("cuda"):]
            if self.spell.target == "neuron":
                head = [cst.FormattedStringText("neuron" + rest)]
            else:
                head = [cst.FormattedStringExpression(cst.parse_expression(self.spell.device_type()))]
                head += [cst.FormattedStringText(rest)] if rest else []
            return node.with_changes(parts=[*head, *node.parts[1:]])
        value = node.evaluated_value
        if not isinstance(value, str) or not value.startswith("cuda"):
            return None
        rest = value[len("cuda"):]
        prefix = node.prefix
        quote = node.quote
        if self.spell.target == "neuron":
            return node.with_changes(value=f"{prefix}{quote}neuron{rest}{quote}")
        device_type = cst.parse_expression(self.spell.device_type())
        if not rest:
            return device_type.with_changes(lpar=node.lpar, rpar=node.rpar)
        text = f"f{quote}{{{self.spell.device_type()}}}{rest}{quote}"
        return cst.parse_expression(text).with_changes(lpar=node.lpar, rpar=node.rpar)

    def _nccl_string(self, node: cst.SimpleString, fix: Fix) -> cst.BaseExpression | None:
        if node.evaluated_value != "nccl":
            return None
        if self.spell.target == "neuron":
            return node.with_changes(value=f"{node.prefix}{node.quote}neuron{node.quote}")
        return cst.parse_expression(self.spell.backend()).with_changes(lpar=node.lpar, rpar=node.rpar)


def _keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return cst.Arg(value, keyword=cst.Name(name), equal=equal)


def _commas(args: list[cst.Arg]) -> list[cst.Arg]:
    """Commas between arguments, keeping each original comma's spacing; none after the last unless
    the call had one (a trailing comma before a closing bracket on its own line)."""
    out = []
    for i, arg in enumerate(args):
        last = i == len(args) - 1
        if isinstance(arg.comma, cst.Comma):
            out.append(arg)
        elif last:
            out.append(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        else:
            out.append(arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
    return out


def fix_source(source: str, findings: list[Finding], torch_alias: str | None, target: str = "generic") -> FixResult:
    """Applies every fixable finding of one file; the result parses (else nothing is applied)."""
    fixable = [f for f in findings if f.fix is not None]
    if not fixable:
        return FixResult(source, 0, [])
    fixes: dict[Span, list[Fix]] = {}
    for finding in fixable:
        fixes.setdefault(finding.fix.span, []).append(finding.fix)
    spelling = _Spelling(torch_alias or "torch", target)
    rewriter = _Rewriter(fixes, spelling)
    module = MetadataWrapper(cst.parse_module(source)).visit(rewriter)
    if rewriter.applied and torch_alias is None and "torch" in _inserted_names(fixable, target):
        context = CodemodContext()
        AddImportsVisitor.add_needed_import(context, "torch")
        module = AddImportsVisitor(context).transform_module(module)
    new = module.code
    skipped = [f for f in fixable if (f.fix.span, f.fix.kind) not in rewriter.applied]
    if new != source:
        ast.parse(new)   # a rewrite that does not parse is a bug: raise rather than write it
    return FixResult(new, len(fixable) - len(skipped), skipped)


def _inserted_names(fixable: list[Finding], target: str) -> set[str]:
    """Whether the rewrites refer to the torch module (the neuron target's strings do not)."""
    for finding in fixable:
        kind = finding.fix.kind
        if kind in ("expr", "call") or (target == "generic" and kind in ("device_string", "nccl_string", "dot_cuda")):
            return {"torch"}
    return set()
