"""The external StableHLO conformance corpus through `loom interpret` (see corpus.py): fails on
any FAIL or ERROR outside RUN-DISABLED files and when the PASS counts drop below floors.json.
Skips, saying so, when ../shared/conformance/stablehlo is absent."""
import json
import os
import sys

import pytest
from loomtest import LOOM_BIN

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402


@pytest.fixture(scope="module")
def results():
    if not os.path.isdir(corpus.CORPUS):
        pytest.skip(f"StableHLO conformance corpus not present at {corpus.CORPUS}: skipped")
    if not os.path.exists(LOOM_BIN):
        pytest.fail(f"loom binary not found at {LOOM_BIN} (set LOOM_BIN or LOOM_BUILD_DIR)")
    cases = corpus.run(LOOM_BIN, timeout=900)
    return cases, corpus.summarize(cases)


def test_counts_and_floors(results, capsys):
    cases, summary = results
    with capsys.disabled():
        print("\nStableHLO conformance corpus:\n" + corpus.markdown(summary, cases))
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "floors.json")) as f:
        floors = json.load(f)
    assert summary["testdata"]["files"].get("PASS", 0) >= floors["testdata_files_pass"], summary["testdata"]
    assert summary["interpret"]["cases"].get("PASS", 0) >= floors["interpret_cases_pass"], summary["interpret"]
    assert summary["testdata-bc"]["files"].get("PASS", 0) >= floors["testdata_bc_files_pass"], summary["testdata-bc"]


def test_bytecode_matches_its_text_twin(results):
    """Every bytecode program ends exactly as its text twin: same status, and when both run, both
    pass (the IR itself is compared by tests/unit/test_bytecode.c)."""
    cases, _ = results
    by_file = {c["file"]: c for c in cases}
    bc = [c for c in cases if c["kind"] == "testdata-bc"]
    assert len(bc) >= 1000, f"only {len(bc)} bytecode files ran"
    odd = []
    for c in bc:
        twin = by_file.get(corpus.text_twin(c["file"]))
        if twin is None:
            odd.append(f"{c['file']}: no text twin ran")
        elif c["status"] != twin["status"]:
            odd.append(f"{os.path.basename(c['file'])}: {c['status']} ({c['message'][:200]}) but its text twin is "
                       f"{twin['status']} ({twin['message'][:200]})")
    assert not odd, f"{len(odd)} bytecode files differ from their text twins:\n" + "\n".join(odd[:20])


def expected_failures():
    out = {}
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected_failures.txt")) as f:
        for line in f:
            key = line.split("#", 1)[0].strip()
            if key:
                out[key] = line.split("#", 1)[1].strip() if "#" in line else ""
    return out


def case_key(c):
    return f"{os.path.relpath(c['file'], corpus.CORPUS)}:{c['line']}"


def test_no_failures(results):
    cases, _ = results
    known = expected_failures()
    bad = [c for c in cases if c["status"] in ("FAIL", "ERROR") and not c["disabled"] and case_key(c) not in known]
    msg = "\n".join(f"{c['status']} {case_key(c)}: {c['message'][:400]}" for c in bad)
    assert not bad, f"{len(bad)} failing cases:\n{msg}"


def test_expected_failures_still_fail(results):
    cases, _ = results
    status = {case_key(c): c["status"] for c in cases}
    fixed = [k for k in expected_failures() if status.get(k) not in ("FAIL", "ERROR")]
    assert not fixed, f"listed in expected_failures.txt but no longer failing (remove them): {fixed}"


def test_unsupported_has_reason(results):
    cases, _ = results
    silent = [c for c in cases if c["status"] == "UNSUPPORTED" and not c["message"].strip()]
    assert not silent, silent[:5]
