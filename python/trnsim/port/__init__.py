"""`trnsim port-check`: a static checker for hard-coded CUDA in Python sources.

    from trnsim.port import scan_source, fix_source
    result = scan_source(open("train.py").read(), "train.py")
    for finding in result.findings:
        print(finding.location(), finding.code, finding.message, "->", finding.replacement)

One module per concern: rules (the rule table), scanner (ast), fixer (libcst rewrites),
formats (text, JSON, SARIF), targets (files, folders, installed packages), command (the CLI).
"""

from trnsim.port.findings import Finding
from trnsim.port.fixer import FixResult, fix_source
from trnsim.port.rules import RULES, Rule
from trnsim.port.scanner import ScanResult, scan_file, scan_source

__all__ = ["Finding", "FixResult", "RULES", "Rule", "ScanResult", "fix_source", "scan_file", "scan_source"]
