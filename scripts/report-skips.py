#!/usr/bin/env python3
"""Every skipped test of a CPU run, with its reason, for scripts/test.sh's summary: a skip must read
as a skip, not as a pass (issue 49). Reads JUnit XML: ctest's (--output-junit; a GoogleTest that
called GTEST_SKIP is a ctest test that did not run, its reason in its output) and pytest's
(--junitxml, written by the python_ctypes test: a skipped pytest test is inside a ctest test that
passed). Prints one line per skip, "LABEL: TEST: REASON"; nothing when nothing was skipped.

  python3 scripts/report-skips.py LABEL FILE.xml...
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

GTEST_SKIP = re.compile(r"^[^\n]*: Skipped\n(.*?)\n?\[  SKIPPED \]", re.S | re.M)


def one_line(text, limit=240):
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def skips(path):
    """(test, reason) for each skipped test case of one JUnit file."""
    root = ET.parse(path).getroot()
    out = []
    for case in root.iter("testcase"):
        skipped = case.find("skipped")
        status = case.get("status", "")
        if skipped is None and status not in ("notrun", "disabled"):
            continue
        name = case.get("name", "?")
        classname = case.get("classname", "")
        test = f"{classname}::{name}" if classname and classname != name else name
        reason = ""
        if skipped is not None:
            reason = skipped.get("message") or (skipped.text or "")
        system_out = case.findtext("system-out") or ""
        match = GTEST_SKIP.search(system_out)
        if match and match.group(1).strip():
            reason = match.group(1)  # GTEST_SKIP() << reason, as the test printed it
        elif not reason or reason.strip() in ("", "Skipped", "Test Skipped"):
            reason = reason or status or "skipped"
        out.append((test, one_line(reason.removeprefix("Skipped: "))))
    return out


def main(argv):
    if len(argv) < 1:
        sys.exit(__doc__)
    label, files = argv[0], argv[1:]
    for path in files:
        if not os.path.exists(path):
            print(f"{label}: {path}: no such JUnit file (did its tests run?)")
            continue
        for test, reason in skips(path):
            print(f"{label}: {test}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
