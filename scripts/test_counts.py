#!/usr/bin/env python3
"""Honest counts for the README's test command (scripts/test.sh).

  test_counts.py bazel LOG TESTLOGS   one Bazel `test --test_summary=short` log and its testlogs
                                      folder: a target that PASSED but whose every GoogleTest case
                                      was skipped counts as skipped, not passed
  test_counts.py pytest LOG           a pytest log run with -rs: passed, failed (failed + errors)
                                      and skipped, with the skip reasons

Prints, for each skipped group, a line "skipped: N ... : reason" and last a line
"counts: P F S" (passed, failed, skipped) that test.sh adds up.
"""
import collections
import os
import re
import sys
import xml.etree.ElementTree as ET


def reason_of(message):
    """The first line of a skip message that says why (GoogleTest puts file:line first)."""
    lines = [l.strip() for l in (message or "").splitlines() if l.strip()]
    lines = [l for l in lines if not re.match(r"^\S+:\d+$", l) and l != "Skipped"]
    text = lines[0] if lines else "no reason given"
    # One group per kind of reason: "no CUDA device: <driver text>" groups under its head.
    return text if len(text) <= 100 else text[:97] + "..."


def bazel(log_path, testlogs):
    passed = failed = skipped = 0
    groups = collections.defaultdict(list)
    for line in open(log_path, errors="replace"):
        m = re.match(r"^(//\S+)\s+(PASSED|FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|FLAKY)\b", line)
        if not m:
            continue
        target, status = m.groups()
        if status != "PASSED":
            failed += 1
            continue
        pkg, _, name = target[2:].partition(":")
        xml = os.path.join(testlogs, pkg, name, "test.xml")
        cases = []
        if os.path.exists(xml):
            try:
                cases = list(ET.parse(xml).getroot().iter("testcase"))
            except ET.ParseError:
                cases = []
        run = [c for c in cases if c.get("status", "run") == "run"]
        skips = [c for c in run if c.get("result") == "skipped"]
        if run and len(skips) == len(run):
            el = skips[0].find("skipped")
            msg = (el.text or el.get("message", "")) if el is not None else ""
            groups[reason_of(msg)].append(target)
            skipped += 1
        else:
            passed += 1
    for reason, targets in sorted(groups.items()):
        print(f"skipped: {len(targets)} Bazel targets, every case skipped ({reason}): "
              + ", ".join(targets))
    print(f"counts: {passed} {failed} {skipped}")


def pytest(log_path):
    text = open(log_path, errors="replace").read()
    groups = collections.Counter()
    for m in re.finditer(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$", text, re.M):
        groups[m.group(2).strip()[:100]] += int(m.group(1))
    tail = [l for l in text.splitlines() if re.search(r"\d+ (passed|failed|skipped|errors?)\b", l)]
    summary = tail[-1] if tail else ""
    get = lambda word: sum(int(n) for n in re.findall(r"(\d+) " + word + r"\b", summary))
    passed, failed, skipped = get("passed"), get("failed") + get("errors?"), get("skipped")
    for reason, n in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"skipped: {n} pytest tests ({reason})")
    print(f"counts: {passed} {failed} {skipped}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "bazel":
        bazel(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "pytest":
        pytest(sys.argv[2])
    else:
        sys.exit(__doc__)
