"""The package's layers read one way: no import circles, and every import points down.

    dxgemm (gemm, epilogues, BACKENDS)  ->  _gemm (validate, bind)  ->  policy (pure rules)
                                                                   ->  runtime (calls, rungs, pipeline, splitk, warmup, tuned)
    runtime  ->  kernels/ (handwritten rungs), pipelines/ (cuBLASDx kernels), epilogues/
    runtime.env, runtime.device, runtime.launch, runtime.memo: the base both kernel packages may use

Imports inside functions count: a lazy import still ties two modules together for a reader.
The graph is read from the source (``ast``), so this runs anywhere, without a GPU.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "dxgemm"
RUNTIME_BASE = {"dxgemm.runtime.env", "dxgemm.runtime.device", "dxgemm.runtime.launch", "dxgemm.runtime.memo"}
TOOLS = {"dxgemm.__main__", "dxgemm.bench", "dxgemm.autotune", "dxgemm.testing", "dxgemm.pipelines.__main__"}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _targets(module: str, node: ast.AST) -> set[str]:
    """The dxgemm modules an import statement of ``module`` names (the longest existing prefix)."""
    base = module.split(".")
    if MODULES[module].name != "__init__.py":
        base = base[:-1]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            target = ".".join(base[:len(base) - (node.level - 1)] + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
    else:
        names = [a.name for a in node.names]
    out = set()
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module and name.startswith("dxgemm.") or name == "dxgemm" and module != "dxgemm":
            out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(module, node)
        graph[module] = edges - {module}
    return graph


GRAPH = _graph()


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read():
    """The reader finds the edges it must (a broken reader would pass every rule below)."""
    assert "dxgemm.policy" in GRAPH["dxgemm._gemm"]
    assert "dxgemm.runtime.launch" in GRAPH["dxgemm.runtime.rungs"]
    assert "dxgemm.kernels._device" in GRAPH["dxgemm.kernels.warptile"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles():
    assert _circles(GRAPH) == []


def _imports_of(prefix: str) -> list[tuple[str, str]]:
    return [(m, t) for m in sorted(GRAPH) if m == prefix or m.startswith(prefix + ".") for t in sorted(GRAPH[m])]


def test_kernels_are_the_ground_floor():
    bad = [(m, t) for m, t in _imports_of("dxgemm.kernels") if not t.startswith("dxgemm.kernels")]
    assert bad == []


def test_epilogues_sit_on_the_kernels_device_helpers_only():
    allowed = ("dxgemm.kernels", "dxgemm.epilogues", "dxgemm._arrays", "dxgemm.testing")
    bad = [(m, t) for m, t in _imports_of("dxgemm.epilogues") if not t.startswith(allowed)]
    assert bad == []


def test_runtime_base_imports_only_the_ground_floor():
    bad = [(m, t) for m in sorted(RUNTIME_BASE) for t in sorted(GRAPH[m])
           if not (t.startswith("dxgemm.kernels") or t in RUNTIME_BASE or t == "dxgemm.gpus")]
    assert bad == []


def test_the_gpu_records_import_nothing_of_dxgemm():
    """``dxgemm.gpus`` (DeviceInfo and the GPUs' published figures) is data beside the ground
    floor: the policy and the runtime base both read it."""
    assert "dxgemm.gpus" in GRAPH["dxgemm.policy"]
    assert [t for t in GRAPH["dxgemm.gpus"] if t.startswith("dxgemm")] == []


def test_pipelines_import_no_layer_above_them():
    bad = [(m, t) for m, t in _imports_of("dxgemm.pipelines") if m != "dxgemm.pipelines.__main__"
           and (t in ("dxgemm", "dxgemm._gemm", "dxgemm.policy") or t in TOOLS
                or (t.startswith("dxgemm.runtime") and t not in RUNTIME_BASE))]
    assert bad == []


def test_the_handwritten_path_uses_no_private_piece_of_the_pipeline_package():
    """Rungs are loaded, packed and launched by the runtime, not by ``pipelines._launch``/``_build``."""
    private = [t for t in GRAPH if t.startswith("dxgemm.pipelines.") and t.rpartition(".")[2].startswith("_")]
    for module in ("dxgemm.runtime.rungs", "dxgemm.runtime.launch", "dxgemm.runtime.calls", "dxgemm._gemm"):
        assert GRAPH[module].isdisjoint(private), (module, sorted(GRAPH[module] & set(private)))


def test_policy_is_pure():
    """The rules import no runtime and read no environment: the runtime asks the device and passes it in."""
    bad = [t for t in GRAPH["dxgemm.policy"]
           if t.startswith("dxgemm.runtime") or t in ("dxgemm", "dxgemm._gemm") or t in TOOLS]
    assert bad == []
    source = MODULES["dxgemm.policy"].read_text(encoding="utf-8")
    assert "os.environ" not in source and "getenv" not in source and "import os" not in source


def test_runtime_does_not_reach_up():
    bad = [(m, t) for m, t in _imports_of("dxgemm.runtime") if t in ("dxgemm", "dxgemm._gemm") or t in TOOLS]
    assert bad == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "dxgemm.runtime.env"))
def test_the_environment_is_read_at_one_edge(module):
    """``dxgemm.runtime.env`` reads every variable dxgemm takes (its docstring lists them); nothing else
    reads one.  Passing the environment on to a child process is not reading it."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if node.func.attr == "getenv" or (node.func.attr == "get" and isinstance(owner, ast.Attribute)
                                              and owner.attr == "environ"):
                reads.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and \
                node.value.attr == "environ" and isinstance(node.ctx, ast.Load):
            reads.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(isinstance(c, ast.Attribute) and c.attr == "environ"
                                                   for c in node.comparators):
            reads.append(node.lineno)
    allowed = {("dxgemm.pipelines.workers", "PYTHONPATH")}  # handed on to the compiler workers
    source = MODULES[module].read_text(encoding="utf-8").splitlines()
    reads = [n for n in reads if not any(module == m and var in source[n - 1] for m, var in allowed)]
    assert reads == [], f"{module} reads the environment at lines {reads}: read it in dxgemm.runtime.env"


def test_module_names_are_unique():
    """One module per name across the packages (``kernels`` and ``_arrays`` were two each)."""
    names: dict[str, list[str]] = {}
    for module in MODULES:
        leaf = module.rpartition(".")[2]
        if MODULES[module].name != "__init__.py" and leaf not in ("__main__",):
            names.setdefault(leaf, []).append(module)
    packages = {m.rpartition(".")[2] for m in MODULES if MODULES[m].name == "__init__.py"}
    clashes = {leaf: mods for leaf, mods in names.items() if len(mods) > 1 or leaf in packages}
    assert clashes == {}


def test_experiment_switches_are_gone():
    """The A/B switches of past experiments steer nothing: the variables are named nowhere in dxgemm."""
    retired = ("DXGEMM_FLOAT32_PIPELINE", "DXGEMM_PIPELINE_STORE", "DXGEMM_WALK_UNROLL", "DXGEMM_WALK_PRELOAD",
               "DXGEMM_SPLIT_K", "DXGEMM_K_TAIL", "DXGEMM_TMA_EDGES", "DXGEMM_TRAIT_CACHE")
    found = [(m, v) for m, path in MODULES.items() for v in retired if v in path.read_text(encoding="utf-8")]
    assert found == []
