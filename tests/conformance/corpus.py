"""Runs the external StableHLO conformance corpus (../shared/conformance/stablehlo: the reference
interpreter's tests in interpret/ and JAX-generated programs in testdata/) through
`loom interpret --json` and counts PASS / FAIL / UNSUPPORTED / ERROR per file and per case.

Used by test_conformance.py, and on its own to print the table of docs/conformance.md:
    python3 tests/conformance/corpus.py [--loom build/bin/loom] [--markdown] [--reasons]
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys

SOURCE_DIR = os.environ.get("LOOM_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.normpath(os.path.join(SOURCE_DIR, "..", "shared", "conformance", "stablehlo"))
STATUSES = ("PASS", "FAIL", "UNSUPPORTED", "ERROR")


KINDS = ("testdata", "testdata-bc", "interpret")
_BC_VERSION = re.compile(r"\.\d+\.\d+\.\d+\.mlirbc$")


def corpus_files():
    """(kind, path) for every corpus file: kind 'testdata', 'interpret', or 'testdata-bc' (the
    testdata programs as MLIR bytecode, NAME.<stablehlo version>.mlirbc)."""
    out = []
    for kind in KINDS:
        root = os.path.join(CORPUS, kind)
        for dirpath, _, names in os.walk(root):
            for n in sorted(names):
                if n.endswith(".mlirbc" if kind == "testdata-bc" else ".mlir"):
                    out.append((kind, os.path.join(dirpath, n)))
    out.sort()
    return out


def text_twin(path):
    """testdata/NAME.mlir for testdata-bc/NAME.<version>.mlirbc."""
    return os.path.join(CORPUS, "testdata", _BC_VERSION.sub(".mlir", os.path.basename(path)))


def run_disabled(path):
    if path.endswith(".mlirbc"):  # a bytecode file is disabled when its text twin is
        path = text_twin(path)
        if not os.path.exists(path):
            return False
    with open(path, errors="replace") as f:
        head = f.read(4096)
    return "RUN-DISABLED" in head


def _parse_json_lines(text):
    """Case objects of a --json run, and whether the run got to its summary (it did not when the
    process died, whatever its exit status: sanitizers exit with 1 like a failed check)."""
    cases, complete = [], False
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:  # the last line of a crashed run
            continue
        if "summary" in obj:
            complete = True
        else:
            cases.append(obj)
    return cases, complete


def _run_chunk(loom, paths, timeout):
    p = subprocess.run([loom, "interpret", "--json", *paths], capture_output=True, text=True, timeout=timeout)
    cases, complete = _parse_json_lines(p.stdout)
    if complete and p.returncode in (0, 1):
        return cases
    # loom died (a crash or a sanitizer report): run the files one by one to name the culprit
    cases = []
    for path in paths:
        q = subprocess.run([loom, "interpret", "--json", path], capture_output=True, text=True, timeout=timeout)
        got, complete = _parse_json_lines(q.stdout)
        if not complete or q.returncode not in (0, 1):
            tail = " | ".join(q.stderr.strip().splitlines()[-4:])[:800]
            got.append({"file": path, "line": 0, "function": "", "status": "ERROR",
                        "message": f"loom interpret died (exit status {q.returncode}): {tail}"})
        cases.extend(got)
    return cases


def run(loom, jobs=None, timeout=600):
    """Runs every corpus file; returns a list of case dicts with 'kind' and 'disabled' added."""
    files = corpus_files()
    kinds = {path: kind for kind, path in files}
    paths = [p for _, p in files]
    jobs = jobs or max(2, os.cpu_count() or 2)
    chunks = [paths[i::jobs] for i in range(jobs)]
    cases = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        for part in ex.map(lambda c: _run_chunk(loom, c, timeout), [c for c in chunks if c]):
            cases.extend(part)
    disabled = {p: run_disabled(p) for p in paths}
    for c in cases:
        c["kind"] = kinds.get(c["file"], "?")
        c["disabled"] = disabled.get(c["file"], False)
    return cases


def summarize(cases):
    """Counts per kind: cases by status, and testdata files by status (a file passes when all its
    cases pass; otherwise it takes its worst status). RUN-DISABLED files are counted apart."""
    order = {"PASS": 0, "UNSUPPORTED": 1, "ERROR": 2, "FAIL": 3}
    out = {}
    for kind in KINDS:
        ks = [c for c in cases if c["kind"] == kind and not c["disabled"]]
        dis = [c for c in cases if c["kind"] == kind and c["disabled"]]
        per_file = {}
        for c in ks:
            s = per_file.get(c["file"], "PASS")
            per_file[c["file"]] = max(s, c["status"], key=lambda x: order[x])
        out[kind] = {
            "cases": dict(collections.Counter(c["status"] for c in ks)),
            "files": dict(collections.Counter(per_file.values())),
            "disabled": dict(collections.Counter(c["status"] for c in dis)),
        }
    return out


def reason(msg):
    """A short reason for grouping UNSUPPORTED messages: the op or type named."""
    m = re.search(r"op '([^']+)'", msg) or re.search(r"element type '([^']+)'", msg)
    if m:
        return m.group(0)
    m = re.search(r"(custom_call target '[^']+')", msg)
    if m:
        return m.group(1)
    msg = re.sub(r"^[^ ]+:\d+:\d+: ", "", msg)
    msg = re.sub(r" at [^ ]+:\d+:\d+", "", msg)
    return msg[:100]


def markdown(summary, cases):
    lines = ["| corpus | unit | total | PASS | UNSUPPORTED | FAIL | ERROR | PASS % |", "|---|---|---|---|---|---|---|---|"]
    for kind in KINDS:
        for unit in ("files", "cases"):
            c = summary[kind][unit]
            total = sum(c.values())
            pct = 100.0 * c.get("PASS", 0) / total if total else 0.0
            lines.append(f"| {kind}/ | {unit} | {total} | {c.get('PASS', 0)} | {c.get('UNSUPPORTED', 0)} | "
                         f"{c.get('FAIL', 0)} | {c.get('ERROR', 0)} | {pct:.1f} |")
    lines.append("")
    for kind in KINDS:
        d = summary[kind]["disabled"]
        if d:
            lines.append(f"RUN-DISABLED {kind} cases (counted apart): " + ", ".join(f"{k} {v}" for k, v in sorted(d.items())))
    return "\n".join(lines)


def reasons_table(cases):
    cnt = collections.Counter(reason(c["message"]) for c in cases if c["status"] == "UNSUPPORTED")
    lines = ["| UNSUPPORTED reason | cases |", "|---|---|"]
    for r, n in cnt.most_common():
        lines.append(f"| {r} | {n} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loom", default=os.environ.get("LOOM_BIN") or os.path.join(SOURCE_DIR, "build", "bin", "loom"))
    ap.add_argument("--markdown", action="store_true", help="print the counts as a markdown table")
    ap.add_argument("--reasons", action="store_true", help="also print UNSUPPORTED reasons and non-passing cases")
    ap.add_argument("--jobs", type=int, default=None)
    a = ap.parse_args()
    if not os.path.isdir(CORPUS):
        print(f"corpus not found at {CORPUS}", file=sys.stderr)
        return 2
    cases = run(a.loom, a.jobs)
    s = summarize(cases)
    if a.markdown:
        print(markdown(s, cases))
    else:
        print(json.dumps(s, indent=2, sort_keys=True))
    if a.reasons:
        print()
        print(reasons_table(cases))
        print()
        for c in cases:
            if c["status"] in ("FAIL", "ERROR"):
                print(f"{c['status']} {os.path.relpath(c['file'], CORPUS)}:{c['line']}: {c['message'][:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
