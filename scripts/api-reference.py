#!/usr/bin/env python3
"""Writes docs/api.md, the API reference, from the code itself (issue 47):

* the Python package: every public class and function of ``ncclpool``, ``ncclpool.errors``,
  ``ncclpool.torch`` (and its ``fsdp``, ``megatron``, ``copy_engine`` entry points) and
  ``ncclpool.sglang``, with its signature and docstring (``inspect``). The package is imported over
  tests/python/torch_stand_in.py's stand-in for torch, so neither torch nor a GPU nor a build of the
  library is needed (importing loads no library);
* the C ABI: include/ncclpool/ncclpool.h, section by section, with its comments;
* the C++ API: each public header of include/ncclpool/ with its documented declarations (private
  members and plain ``//`` comments left out).

  scripts/api-reference.py            writes docs/api.md
  scripts/api-reference.py --check    exits 1 when docs/api.md differs from what it would write (CI:
                                      tests/python/test_api_reference.py), naming the first difference
  scripts/api-reference.py --stdout   prints the page

A public name without a docstring is an error (exit 1): the reference would have nothing to say.
Standard library only.
"""
import argparse
import difflib
import importlib
import inspect
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join("docs", "api.md")

# (module, names): None takes the module's __all__; a list names the entry points of a module without one.
PYTHON_MODULES = [
    ("ncclpool", None),
    ("ncclpool.errors", ["Error", "InvalidArgument", "SizeTooLarge", "OutOfMemory", "DoubleFree", "ForeignPointer",
                         "InvalidPointer", "BackendError", "Unsupported", "InvariantViolation", "InvalidState",
                         "RegistrationError", "AgreementError", "InternalError", "LibraryNotFound"]),
    ("ncclpool.torch", None),
    ("ncclpool.torch.fsdp", None),
    ("ncclpool.torch.megatron", ["install", "uninstall"]),
    ("ncclpool.torch.copy_engine", ["all_gather_into_tensor"]),
    ("ncclpool.sglang", None),
]

MODULE_NOTES = {
    "ncclpool": "Any Python, no torch: pools, communicators, the simulator, features, reports "
                "([python.md](python.md#ncclpool-any-python-no-torch)).",
    "ncclpool.errors": "Every error is an `ncclpool.Error` named after the C status; `ValueError` / `MemoryError` "
                       "too where that is the Python meaning ([troubleshooting.md](troubleshooting.md)).",
    "ncclpool.torch": "The PyTorch layer: Megatron-Core's `nccl_allocator` API over ncclpool pools "
                      "([python.md](python.md#ncclpoolpytorch-megatron-cores-nccl_allocator-without-the-re-registration)).",
    "ncclpool.torch.fsdp": "FSDP2's all-gather and reduce-scatter buffers from a pool ([python.md](python.md#fsdp2)).",
    "ncclpool.torch.megatron": "Megatron's `nccl_allocator` replaced without editing Megatron "
                               "([python.md](python.md#megatron-drop-in-without-editing-megatron)).",
    "ncclpool.torch.copy_engine": "The copy-engine all-gather's entry point for your own all-gathers "
                                  "([python.md](python.md#copy-engine-all-gather-zero-sms)).",
    "ncclpool.sglang": "SGLang's `pynccl_allocator` over one ncclpool pool ([sglang.md](sglang.md)).",
}

C_HEADER = "include/ncclpool/ncclpool.h"
CXX_HEADERS = ["pool.hpp", "segment_source.hpp", "sim.hpp", "cuda.hpp", "limit_source.hpp", "loopback.hpp",
               "communicator.hpp", "nccl.hpp", "registration.hpp", "registry.hpp", "registered_pool.hpp",
               "auto_pool.hpp", "routes.hpp", "profile.hpp", "stats.hpp", "errors.hpp"]


class Missing(Exception):
    """A public name the reference cannot describe (no docstring, not found)."""


# ---- Python -------------------------------------------------------------------------------------

def import_package():
    """Imports the package over the torch stand-in (and never a real torch)."""
    sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "tests", "python")]
    import torch_stand_in
    sys.modules.update(torch_stand_in.make_modules())
    return {name: importlib.import_module(name) for name, _ in PYTHON_MODULES}


UNDOCUMENTED = []  # every public name found without a docstring (reported together)

# Docstrings of SGLang's own names that python/ncclpool/sglang.py mirrors without one: that file is at
# the 500-line limit of scripts/check-tree.py's `lines` check (move these into it when it is split).
SUPPLIED = {
    "ncclpool.sglang.set_graph_pool_id": "SGLang's set_graph_pool_id: records the CUDA graph pool id SGLang's "
                                         "graph runner captures into (the pool the\ncaptures' allocations go to).",
    "ncclpool.sglang.use_symmetric_memory": "SGLang's use_symmetric_memory: a SymmetricMemoryContext for "
                                            "`group_coordinator` (allocations inside come from\nthe shared pool, "
                                            "registered with the group), or a nullcontext when symmetric memory is "
                                            "off,\n`disabled` is True or the group has one rank.",
    "ncclpool.sglang.restore_symmetric_memory_context": "SGLang's restore_symmetric_memory_context: resumes the "
                                                        "context disable_symmetric_memory_context()\nreturned "
                                                        "(None: nothing). Raises InvalidArgument for anything else.",
}


def doc_of(obj, where):
    doc = inspect.getdoc(obj) or SUPPLIED.get(where)
    if not doc:
        UNDOCUMENTED.append(where)
        return "(no docstring)"
    return doc


def signature(obj, name):
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return f"{name}(...)"
    text = re.sub(r" at 0x[0-9a-f]+", "", text)  # a default's repr must not change from run to run
    return f"{name}{text}"


def anchor(title):
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")


def block(text):
    return ["```text", text, "```", ""]


def class_members(cls):
    """(name, kind, object) of the public members a class defines itself, in source order."""
    out = []
    for name, value in cls.__dict__.items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, property):
            out.append((name, "property", value))
        elif isinstance(value, (staticmethod, classmethod)):
            out.append((name, "method", value.__func__))
        elif inspect.isfunction(value) and name != "__init__":
            out.append((name, "method", value))
        elif hasattr(value, "__wrapped__") and inspect.isfunction(value.__wrapped__):  # contextmanager
            out.append((name, "method", value))
    return out


def python_class(module, name, cls, lines):
    qual = f"{module}.{name}"
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    title = f"class {qual}"
    lines += [f"### `{title}`", ""]
    init = cls.__dict__.get("__init__")
    head = signature(init, name).replace("(self, ", "(").replace("(self)", "()") if inspect.isfunction(init) else None
    if head:
        lines += ["```python", head, "```", ""]
    if bases:
        lines += [f"Derives from {', '.join(f'`{b}`' for b in bases)}.", ""]
    lines += block(doc_of(cls, qual))
    for member, kind, obj in class_members(cls):
        where = f"{qual}.{member}"
        if kind == "property":
            lines += [f"#### `{where}` (property)", ""]
            lines += block(doc_of(obj.fget, where))
        else:
            text = signature(obj, member).replace("(self, ", "(").replace("(self)", "()")
            lines += [f"#### `{qual}.{text}`", ""]
            lines += block(doc_of(obj, where))


def python_function(module, name, fn, lines):
    lines += [f"### `{module}.{signature(fn, name)}`", ""]
    lines += block(doc_of(fn, f"{module}.{name}"))


def python_reference(modules):
    lines, index = [], []
    for module_name, names in PYTHON_MODULES:
        module = modules[module_name]
        names = list(module.__all__) if names is None else names
        lines += [f"## `{module_name}`", "", MODULE_NOTES[module_name], ""]
        described = []
        for name in names:
            if not hasattr(module, name):
                raise Missing(f"{module_name}.{name} is named but not there")
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue  # ncclpool.errors: a section of its own
            if inspect.isclass(obj):
                python_class(module_name, name, obj, lines)
            elif callable(obj):
                python_function(module_name, name, obj, lines)
            else:  # a constant: its value
                lines += [f"### `{module_name}.{name}`", "", f"A constant: `{obj!r}`.", ""]
            described.append(name)
        index.append(f"* [`{module_name}`](#{anchor(module_name)}): " + ", ".join(f"`{n}`" for n in described))
    return index, lines


# ---- C and C++ ----------------------------------------------------------------------------------

def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def c_reference():
    """ncclpool.h section by section ("/* ---- Title ---- */"), its comments and declarations as written."""
    text = read(C_HEADER)
    body = text[text.index("extern \"C\" {"):text.rindex("#ifdef __cplusplus")]
    body = body.split("\n", 2)[2]  # past `extern "C" {` and its #endif
    sections = re.split(r"^/\* ---- (.+?) ----(?: \*/)?$", body, flags=re.M)
    intro = text[:text.index("*/") + 2]
    lines = ["## C ABI: `ncclpool.h`", "",
             f"Generated from [{C_HEADER}](../{C_HEADER}); every function returns `ncclpool_status_t` unless "
             "its declaration says otherwise, and `ncclpool_last_error()` holds the message of a failure "
             "([capi.md](capi.md) explains the conventions).", ""]
    lines += ["```c", intro, "```", ""]
    for i in range(1, len(sections), 2):
        title, code = sections[i].strip(), sections[i + 1]
        code = code.replace("NCCLPOOL_C_API ", "").strip("\n")
        lines += [f"### C: {title}", "", "```c", code.rstrip(), "```", ""]
    return lines


def cxx_declarations(text):
    """A public header's declarations with their /// comments: includes, #pragma, plain // comments and
    private/protected sections left out."""
    out, hidden_depth, depth = [], None, 0
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("#include", "#pragma", "/// @file")) or (stripped.startswith("//") and not stripped.startswith("///")):
            continue
        if hidden_depth is None and stripped in ("private:", "protected:"):
            hidden_depth = depth
        elif hidden_depth is not None and stripped == "public:" and depth == hidden_depth:
            hidden_depth = None
        opened, closed = line.count("{"), line.count("}")
        if hidden_depth is not None and depth + opened - closed < hidden_depth:  # the class ends
            hidden_depth = None
        if hidden_depth is None:
            out.append(line.rstrip())
        depth += opened - closed
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def cxx_reference():
    lines = ["## C++ API: `include/ncclpool/`", "",
             "The public headers, each with its documented declarations (`///` comments), in namespace "
             "`ncclpool`; link `ncclpool::ncclpool` (CMake). Errors are exceptions derived from "
             "`ncclpool::Error` (errors.hpp), each with an `ErrorCode` equal to the C status.", ""]
    for header in CXX_HEADERS:
        path = f"include/ncclpool/{header}"
        text = read(path)
        brief = re.search(r"/// @brief (.+)", text)
        if not brief:
            raise Missing(f"{path} has no /// @brief")
        lines += [f"### C++: `{header}`", "", f"{brief.group(1).strip()} ([{path}](../{path}))", ""]
        lines += ["```cpp", cxx_declarations(text[brief.end():]), "```", ""]
    return lines


# ---- the page -----------------------------------------------------------------------------------

def generate():
    modules = import_package()
    index, python_lines = python_reference(modules)
    head = [
        "# API reference",
        "",
        "<!-- Generated by scripts/api-reference.py from the docstrings and headers: do not edit by hand. "
        "tests/python/test_api_reference.py fails when this page differs from what the script writes. -->",
        "",
        "Every public class and function of the Python package (signature, then its docstring: parameters, "
        "return value, exceptions), then the C ABI and the public C++ headers. How to use them: "
        "[python.md](python.md), [capi.md](capi.md), [pool.md](pool.md); the environment variables: "
        "[environment.md](environment.md).",
        "",
        "**Python**",
        "",
        *index,
        "",
        "**C and C++:** [C ABI](#c-abi-ncclpoolh), [C++ headers](#c-api-includencclpool)",
        "",
    ]
    if UNDOCUMENTED:
        raise Missing("no docstring: " + ", ".join(UNDOCUMENTED))
    return "\n".join(head + python_lines + c_reference() + cxx_reference()).rstrip() + "\n"


def main(argv):
    parser = argparse.ArgumentParser(description="Writes docs/api.md from the docstrings and headers.")
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/api.md is not what would be written")
    parser.add_argument("--stdout", action="store_true", help="print the page instead of writing it")
    parser.add_argument("--output", default=os.path.join(ROOT, OUTPUT), help="the page (default: docs/api.md)")
    args = parser.parse_args(argv)
    try:
        page = generate()
    except Missing as e:
        sys.exit(f"api-reference: {e}")
    if args.stdout:
        sys.stdout.write(page)
        return 0
    if args.check:
        try:
            with open(args.output) as f:
                current = f.read()
        except OSError as e:
            print(f"api-reference: {args.output}: {e.strerror}: run scripts/api-reference.py", file=sys.stderr)
            return 1
        if current == page:
            return 0
        diff = list(difflib.unified_diff(current.splitlines(), page.splitlines(), "docs/api.md", "generated", lineterm="", n=1))
        print(f"api-reference: {args.output} is not what scripts/api-reference.py writes (run it); first difference:",
              file=sys.stderr)
        print("\n".join(diff[:12]), file=sys.stderr)
        return 1
    with open(args.output, "w") as f:
        f.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
