"""Every check of tests/tool/run.sh can fail (issue 49): for each check, a copy of the script with that
one check's expectation changed (the text a grep looks for, the exit status expect_rc wants, a count,
the usage a usage_of call names) must fail. The copy stops right after the changed line, so a check
that cannot fail shows as a copy that reaches the stop; a check this machine does not reach (inside
an `if` on a GPU, say) is counted apart.

    python3 tests/tool/mutants.py RUN_SH TOOL DATA [--jobs N]

Exit 0 when every changed check that ran made its copy fail; 1 (naming each survivor) otherwise.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

STOP = "MUTANT_REACHED_THE_STOP"
GREP = re.compile(r"""(\bgrep -q[EF]?(?: --)? )(["'])""")
RC = re.compile(r"^(expect_rc )(\d+)( )")
COUNT = re.compile(r"""(\]?" = )(\d+)( \] \|\|)""")
USAGE = re.compile(r"""(\busage_of ")""")


def mutations(lines):
    """(line index, mutated line, what) for each check outside function bodies."""
    out = []
    in_function = False
    heredoc = None  # the word that ends the here-document being skipped
    seen_rc = set()  # exit statuses whose expect_rc was changed already
    for i, line in enumerate(lines):
        stripped = line.strip()
        if heredoc is not None:
            heredoc = None if stripped == heredoc else heredoc
            continue
        if m := re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line):
            heredoc = m.group(1)
        if re.match(r"^[A-Za-z_]+\(\) \{\s*(#.*)?$", stripped):
            in_function = True
            continue
        if in_function:
            in_function = stripped != "}"
            continue
        if not stripped or stripped.startswith("#") or re.match(r"^[A-Za-z_]+\(\) \{.*\}\s*$", stripped) or line.rstrip().endswith("\\"):
            continue
        if stripped.startswith(("if ", "elif ")):
            continue
        m = GREP.search(line)
        # An absence check (grep ... && fail) cannot be made to fail by changing its text: left out.
        if m and not re.search(r"grep -q[^|]*&& fail", line):
            out.append((i, line[:m.end()] + "XQZ" + line[m.end():], "the text of its first grep"))
        m = RC.search(stripped)
        # expect_rc fails by itself on any other status: proven once per status it is given (CI time:
        # each copy runs the script up to its line).
        if m and m.group(2) not in seen_rc:
            seen_rc.add(m.group(2))
            out.append((i, line.replace(m.group(0), f"{m.group(1)}{int(m.group(2)) + 1}{m.group(3)}", 1), "the exit status it expects"))
        m = COUNT.search(line)
        if m:
            out.append((i, line[:m.start(2)] + str(int(m.group(2)) + 1) + line[m.end(2):], "the count it expects"))
        m = USAGE.search(line)
        if m:
            out.append((i, line[:m.end()] + "XQZ" + line[m.end():], "the usage it names"))
    return out


def run_mutant(lines, index, mutated, tool, data, workdir):
    copy = lines[:index] + [mutated, f'echo {STOP}; exit 0'] + lines[index + 1:]
    path = os.path.join(workdir, f"mutant-{index}-{abs(hash(mutated))}.sh")
    with open(path, "w") as f:
        f.write("\n".join(copy) + "\n")
    run = subprocess.run(["bash", path, tool, data], capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        return "killed"
    return "survived" if STOP in run.stdout else "not reached"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("run_sh")
    parser.add_argument("tool")
    parser.add_argument("data")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    lines = open(args.run_sh).read().split("\n")
    found = mutations(lines)
    results = {}
    with tempfile.TemporaryDirectory() as workdir, concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_mutant, lines, i, m, args.tool, args.data, workdir): (i, what) for i, m, what in found}
        for future, (i, what) in futures.items():
            results[(i, what)] = future.result()
    survivors = [(i, what) for (i, what), r in sorted(results.items()) if r == "survived"]
    counts = {r: sum(1 for v in results.values() if v == r) for r in ("killed", "survived", "not reached")}
    print(f"tool_cli mutants: {len(found)} checks changed one at a time: {counts['killed']} failed as they must, "
          f"{counts['not reached']} not reached on this machine, {counts['survived']} passed anyway")
    for i, what in survivors:
        print(f"  {args.run_sh}:{i + 1}: the check still passed with {what} changed: {lines[i].strip()}")
    if len(found) < 50:
        print(f"  only {len(found)} checks found: has run.sh's form changed?")
        return 1
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
