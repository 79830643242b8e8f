"""A load_inline CUDA source cut in two, so that a kernel edit rebuilds in seconds.

Nearly all of a stock ``load_inline`` build is torch's headers parsed three times by nvcc
(cudafe++, cicc and the host compiler), about a minute a build. Here the same text becomes:

- a device unit: kernels, ``__device__`` functions, types and macros, without torch's headers,
  compiled by nvcc (it also emits each kernel's host stub, the function a launch calls);
- a host unit: the host functions with torch's real headers, compiled by the C++ compiler
  (which can use a precompiled header) with each kernel reduced to a declaration of its stub
  and each ``k<<<g, b, s, st>>>(args)`` written the way nvcc lowers it:
  ``(__cudaPushCallConfiguration(g, b, s, st) ? (void)0 : k(args))``.

Both keep the source's line count, so ``#line`` directives still point at the Python file.

Template kernels: the host unit declares each as a template of its stub and calls ``k<T>(args)``;
which ``k<T>`` it needs is known once it is compiled (its undefined symbols), and the device unit
then instantiates exactly those (``instantiations``), compiled with weak stubs so the host unit's
calls link to them. A ``__constant__`` or ``__device__`` variable the host code uses (a table filled
by ``cudaMemcpyToSymbol``) is, in the host unit, a reference to the variable's host shadow, which
the device unit hands out through an accessor beside the variable.

Anything this cannot cut faithfully (a device variable it cannot declare again, a ``__managed__``
variable used by host code, a module defined in the CUDA source) is refused with a reason; the
caller then runs the stock build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kforge_mcp.targets.source_map import top_level_commas

TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](torch/|ATen/|c10/|pybind11/|THC/|Python\.h)')
# headers only nvcc can read: the host unit leaves them out (torch's c10/cuda/ and ATen/cuda/ stay)
DEVICE_ONLY_INCLUDE = re.compile(
    r'^\s*#\s*include\s*[<"](mma\.h|cooperative_groups|cuda_pipeline|cuda_awbarrier|sm_\d+_intrinsics|cub/|cute/'
    r"|cutlass/|cuda/)"
)
DEVICE_NAMESPACES = re.compile(r"\b(nvcuda|cooperative_groups|cute|cutlass|cub)\b")
TORCH_NAMES = re.compile(r"\b(torch|at|c10|py|pybind11)\s*::|\bTORCH_|\bAT_|\bC10_|\bnamespace\s+(torch|at|c10)\b")


# where a function runs, as written or through c10's macros for it
DEVICE_MARK = re.compile(r"\b(__device__|C10_DEVICE|C10_HOST_DEVICE)\b")
HOST_MARK = re.compile(r"\b(__host__|C10_HOST|C10_HOST_DEVICE)\b")


class CannotSplit(Exception):
    """The source uses something the split build does not reproduce faithfully."""


@dataclass
class Item:
    kind: str  # pp, kernel, device_fn, both_fn, host_fn, type, statement, open, close
    start: int
    end: int  # exclusive character offsets
    header: str = ""


def _skip_literal(code: str, i: int) -> int:
    q, j = code[i], i + 1
    while j < len(code) and code[j] != q and code[j] != "\n":
        j += 2 if code[j] == "\\" else 1
    return j + 1


def _skip_comment(code: str, i: int) -> int | None:
    if code.startswith("//", i):
        j = code.find("\n", i)
        return len(code) if j < 0 else j
    if code.startswith("/*", i):
        j = code.find("*/", i + 2)
        return len(code) if j < 0 else j + 2
    return None


def _match_brace(code: str, i: int) -> int:
    """Offset just past the ``}`` matching the ``{`` at ``i``."""
    depth = 0
    while i < len(code):
        skip = _skip_comment(code, i)
        if skip is not None:
            i = skip
            continue
        c = code[i]
        if c in "\"'":
            i = _skip_literal(code, i)
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise CannotSplit("unbalanced braces")


def _kind(header: str) -> str:
    h = " ".join(header.split())
    if re.match(r"^(typedef\s+)?(template\s*<.*>\s*)?(struct|class|union|enum)\b", h) and "(" not in h.split("{")[0]:
        return "type"
    if "=" in h.split("(")[0] or not re.search(r"\)\s*(const\s*)?(noexcept\s*)?(->[^{]*)?$", h):
        return "statement"  # an initializer (a table, a lambda), not a function body
    if "__global__" in h:
        return "kernel"
    if DEVICE_MARK.search(h):
        return "both_fn" if HOST_MARK.search(h) else "device_fn"
    return "host_fn"


def scan(code: str) -> list[Item]:
    """Namespace-scope items of a CUDA source, in order, with their character spans."""
    items: list[Item] = []
    i, n, start = 0, len(code), None
    depth = 0  # open namespaces / extern "C" blocks
    while i < n:
        skip = _skip_comment(code, i)
        if skip is not None:
            i = skip
            continue
        c = code[i]
        if start is None:
            if c.isspace():
                i += 1
                continue
            if c == "#":
                j = i
                while True:
                    j = code.find("\n", j)
                    if j < 0 or code[j - 1] != "\\":
                        break
                    j += 1
                j = n if j < 0 else j
                items.append(Item("pp", i, j))
                i = j
                continue
            if c == "}" and depth:
                items.append(Item("close", i, i + 1))
                depth -= 1
                i += 1
                continue
            start = i
        if c in "\"'":
            i = _skip_literal(code, i)
            continue
        if c == ";":
            items.append(Item("statement", start, i + 1, code[start:i]))
            start, i = None, i + 1
            continue
        if c == "{":
            header = code[start:i].strip()
            if re.search(r"\bnamespace\b[^;()]*$", header) or re.fullmatch(r'extern\s*"C"', header):
                items.append(Item("open", start, i + 1, header))
                depth += 1
                start, i = None, i + 1
                continue
            end = _match_brace(code, i)
            kind = _kind(header)
            if kind in ("type", "statement"):  # runs on to its ';'
                j = end
                while j < n and code[j] != ";":
                    if code[j] == "{":
                        j = _match_brace(code, j)
                        continue
                    j += 1
                end = min(j + 1, n)
            items.append(Item(kind, start, end, header))
            start, i = None, end
            continue
        i += 1
    if start is not None and code[start:].strip():
        raise CannotSplit("the source ends inside a declaration")
    return items


def _blank(text: str) -> str:
    return "\n" * text.count("\n")


def _rest(head: str, text: str) -> str:
    """The newlines that keep the line count when ``head`` stands for ``text``."""
    return "\n" * (text.count("\n") - head.count("\n"))


def _stub_declaration(header: str) -> str:
    """``__global__ void __launch_bounds__(256) k(float* x)`` -> ``void k(float* x);`` (the stub nvcc emits)."""
    h = re.sub(r"\b__launch_bounds__\s*\([^)]*\)|\b__maxnreg__\s*\([^)]*\)|\b__cluster_dims__\s*\([^)]*\)", "", header)
    h = re.sub(r"\b(__global__|static|inline|__forceinline__|__noinline__)\b", "", h)
    return h + ";"


LAUNCH = re.compile(r"<<<")


def _callee_start(code: str, at: int) -> int:
    """Where the launched kernel's name starts: ``k``, ``ns::k`` or ``k<scalar_t, 4>``."""
    j = at
    while j > 0 and code[j - 1].isspace():
        j -= 1
    if j > 0 and code[j - 1] == ">":  # template arguments: back to their '<'
        depth = 0
        while j > 0:
            j -= 1
            depth += {">": 1, "<": -1}.get(code[j], 0)
            if depth == 0:
                break
        while j > 0 and code[j - 1].isspace():
            j -= 1
    name_end = j
    while j > 0 and (code[j - 1].isalnum() or code[j - 1] in "_:"):
        j -= 1
    if j == name_end:
        raise CannotSplit("a launch whose kernel is not a name")
    return j


def _balanced_until(code: str, i: int, stop: str) -> int:
    """Offset of ``stop`` at bracket depth 0 from ``i``."""
    depth = 0
    while i < len(code):
        if code.startswith(stop, i) and depth == 0:
            return i
        c = code[i]
        if c in "\"'":
            i = _skip_literal(code, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                break
        i += 1
    raise CannotSplit(f"no '{stop}' closing a kernel launch")


def lower_launches(code: str) -> str:
    """Each ``k<<<cfg>>>(args)`` as nvcc lowers it: push the configuration, then call k's stub."""
    out, pos = [], 0
    for m in LAUNCH.finditer(code):
        if m.start() < pos:
            continue
        callee = _callee_start(code, m.start())
        cfg_end = _balanced_until(code, m.end(), ">>>")
        j = cfg_end + 3
        while j < len(code) and code[j].isspace():
            j += 1
        if j >= len(code) or code[j] != "(":
            raise CannotSplit("a kernel launch without arguments in parentheses")
        args_end = _balanced_until(code, j + 1, ")")
        name = code[callee : m.start()].rstrip()
        cfg = code[m.end() : cfg_end]
        args = code[j + 1 : args_end]
        out.append(code[pos:callee])
        out.append(f"(__cudaPushCallConfiguration({cfg}) ? (void)0 : {name}({args}))")
        pos = args_end + 1
    out.append(code[pos:])
    return "".join(out)


# what AT_DISPATCH_* hands ``scalar_t`` (ATen/Dispatch.h); the _AND variants add the ScalarTypes they name
DISPATCH_TYPES = {
    "AT_DISPATCH_FLOATING_TYPES": ("float", "double"),
    "AT_DISPATCH_FLOATING_TYPES_AND_HALF": ("float", "double", "at::Half"),
    "AT_DISPATCH_FLOATING_TYPES_AND": ("float", "double"),
    "AT_DISPATCH_FLOATING_TYPES_AND2": ("float", "double"),
    "AT_DISPATCH_FLOATING_TYPES_AND3": ("float", "double"),
    "AT_DISPATCH_REDUCED_FLOATING_TYPES": ("at::Half", "at::BFloat16"),
}
DISPATCH = re.compile(r"\b(AT_DISPATCH_\w+)\s*\(([^\"]*)\"")  # the macro and its arguments before the name string
NAMED_SCALAR = re.compile(r"\b(?:ScalarType::|k)(Half|BFloat16|Float|Double)\b")
SCALAR = {"Half": "at::Half", "BFloat16": "at::BFloat16", "Float": "float", "Double": "double"}
# the type a kernel computes a dispatched type in (ATen's opmath_type and CUDA acc_type agree on these)
OPMATH = {"float": "float", "double": "double", "at::Half": "float", "at::BFloat16": "float"}
OPMATH_ALIAS = re.compile(
    r"\busing\s+(\w+)\s*=\s*(?:at::)?(?:opmath_type\s*<\s*scalar_t\s*>|acc_type\s*<\s*scalar_t\s*,\s*true\s*>)\s*;"
)
# a template argument that means the same in the device unit as in the host unit
PLAIN_ARGUMENT = re.compile(
    r"-?\d+[uUlL]*|true|false|float|double|int|long|unsigned|bool|u?int(8|16|32|64)_t|(at|c10)::(Half|BFloat16)"
)


@dataclass
class Split:
    host: str
    device: str
    kernels: list[str]
    templates: list[str] = field(default_factory=list)  # the kernels that are templates

    def template_calls(self, host_symbols: list[str]) -> list[str]:
        """The template kernels the host object calls, among its undefined symbols as ``nm -C`` writes them
        (``void k<float>(float const*, float*, int)``)."""
        wanted = re.compile(r"^void (?:\w+::)*(?:" + "|".join(map(re.escape, self.templates)) + r")<.*\)$")
        return [s for s in host_symbols if self.templates and wanted.match(s)]

    def instantiations(self, host_symbols: list[str]) -> list[str]:
        """The explicit instantiations the device unit needs for those calls."""
        return [f"template __global__ {s};" for s in self.template_calls(host_symbols)]

    def likely_instantiations(self) -> list[str] | None:
        """The template kernels the host unit launches, read from its text, so the device unit can compile
        them before the host object says which it needs: each launch's template arguments are literals and
        plain types, or ``scalar_t`` under the AT_DISPATCH_* macros the source uses and its opmath alias.
        None where a launch names anything else (a type of the candidate's own, another alias) or a macro
        this does not know: the host object decides then. Each is instantiated by taking its address, which
        needs no signature."""
        if not self.templates:
            return None
        dispatched: list[str] = []
        for macro, args in DISPATCH.findall(self.host):
            if macro not in DISPATCH_TYPES:
                return None
            extra = [SCALAR[t] for t in NAMED_SCALAR.findall(args)]  # an _AND variant's ScalarTypes
            dispatched += [t for t in (*DISPATCH_TYPES[macro], *extra) if t not in dispatched]
        opmath = set(OPMATH_ALIAS.findall(self.host))  # using acc_t = at::opmath_type<scalar_t>;
        launches = re.compile(r"\b(" + "|".join(map(re.escape, self.templates)) + r")\s*<")
        found: list[str] = []
        for m in launches.finditer(self.host):
            try:
                end = _balanced_until(self.host, m.end(), ">")
            except CannotSplit:
                return None
            if not re.match(r"\s*\(", self.host[end + 1 :]):
                continue  # not a call: the stub's own declaration, a pointer taken
            args = [a.strip() for a, _ in top_level_commas(self.host[m.end() : end])]
            if not args or not all(
                PLAIN_ARGUMENT.fullmatch(a) or (dispatched and (a == "scalar_t" or a in opmath)) for a in args
            ):
                return None
            # each dispatched type binds scalar_t (and its opmath alias) in every argument at once
            for t in dispatched if any(not PLAIN_ARGUMENT.fullmatch(a) for a in args) else [""]:
                bound = [t if a == "scalar_t" else OPMATH[t] if a in opmath else a for a in args]
                if (k := f"{m.group(1)}<{', '.join(bound)}>") not in found:
                    found.append(k)
        return [
            f"static void* const kforge_likely_{i} __attribute__((used)) = reinterpret_cast<void*>(&{k});"
            for i, k in enumerate(found)
        ] or None


def _device_variable(text: str) -> tuple[str, str, str] | None:
    """``static __constant__ float table[4] = {...};`` -> ("float", "table", "[4]"); None when it is
    not one plain declarator."""
    decl = re.sub(r"\b(static|extern|__constant__|__device__)\b", " ", text).strip().rstrip(";")
    decl = re.split(r"=|\{", decl, maxsplit=1)[0].strip()
    m = re.fullmatch(r"(?P<type>[\w:<>\s\*&]+?)\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)", decl)
    if m is None or not m["type"].strip() or "," in m["type"]:
        return None
    return " ".join(m["type"].split()), m["name"], "".join(m["dims"].split())


def split(code: str) -> Split:
    """The host and device units of one CUDA source (see the module docstring)."""
    if "PYBIND11_MODULE" in code or "TORCH_LIBRARY" in code:
        raise CannotSplit("the CUDA source defines its own module")
    items = scan(code)
    host, device, kernels, templates = [], [], [], []
    device_vars: dict[str, tuple[int, str]] = {}  # name -> (its part, its declaration)
    for it in items:
        text = code[it.start : it.end]
        if it.kind == "pp":
            include = re.match(r"\s*#\s*include", text)
            keep_host = not include or not DEVICE_ONLY_INCLUDE.search(text)
            host.append(text if keep_host else _blank(text))
            device.append(_blank(text) if TORCH_INCLUDE.match(text) else text)
        elif it.kind == "kernel":
            names = [x for x in re.findall(r"(\w+)\s*\(", it.header) if not x.startswith("__")]
            kernels.append(names[-1] if names else "?")
            if re.search(r"\btemplate\b", it.header):
                templates.append(kernels[-1])
            host.append(_stub_declaration(it.header) + _rest(it.header, text))
            device.append(re.sub(r"\bstatic\b", "", text, count=1) if text.lstrip().startswith("static") else text)
        elif it.kind == "device_fn":
            host.append(_blank(text))
            device.append(text)
        elif it.kind == "both_fn":
            host.append(text)
            device.append(text)
        elif it.kind == "host_fn":
            host.append(text)
            device.append(_blank(text))
        elif it.kind in ("open", "close"):
            host.append(text)
            device.append(text)
        else:  # type or statement
            if (
                re.search(r"\b(__constant__|__device__|__shared__|__managed__)\b", text)
                and "(" not in text.split("=")[0]
            ):
                for name in re.findall(r"(\w+)\s*(?:\[|=|;|\{)", text)[:1]:
                    device_vars[name] = (len(host), text)
                host.append(_blank(text))
                device.append(text)
                continue
            if "__global__" in text:  # a kernel's forward declaration
                decl = text.rstrip().rstrip(";")
                host.append(_stub_declaration(decl) + _rest(decl, text))
                device.append(text)
                continue
            alias = re.match(r"\s*(using\s+namespace|namespace\s+\w+\s*=)", text)
            host.append(_blank(text) if alias and DEVICE_NAMESPACES.search(text) else text)
            device.append(_blank(text) if TORCH_NAMES.search(text) else text)
    host_text = "".join(_join(code, items, host))
    for n, (var, (part, text)) in enumerate(device_vars.items()):
        if not re.search(rf"\b{re.escape(var)}\b", host_text):
            continue
        parsed = _device_variable(text)
        if "__managed__" in text or parsed is None:
            raise CannotSplit(f"host code uses the device variable '{var}'")
        kind, name, dims = parsed
        accessor = f"kforge_symbol_{n}_{name}"
        head = f'extern "C" void* {accessor}(); static {kind} (&{name}){dims} = *static_cast<{kind} (*){dims}>({accessor}());'
        host[part] = head + _blank(text)
        device[part] = text + f' extern "C" void* {accessor}() {{ return (void*)&{name}; }}'
    if device_vars:
        host_text = "".join(_join(code, items, host))
    if not kernels:
        raise CannotSplit("no kernel in the CUDA source")
    return Split(lower_launches(host_text), "".join(_join(code, items, device)), kernels, templates)


def _join(code: str, items: list[Item], parts: list[str]):
    """The parts in the source's order, with what lies between items (space, comments) kept."""
    pos = 0
    for it, part in zip(items, parts):
        yield code[pos : it.start]
        yield part
        pos = it.end
    yield code[pos:]
