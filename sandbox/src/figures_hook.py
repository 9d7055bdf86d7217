# The figures hook (sandbox/src/figures.py), first on sys.meta_path in every sandboxed
# interpreter (a cold job's stub, the warm and zygote bootstraps, the session loop):
# when `matplotlib` is imported with the sandbox's default backend (MPLBACKEND=Agg, from
# the environment, which subprocesses inherit as it is), its backend becomes
# module://vivarium_figures, found here alone (a file on the read-only root). Any other
# import costs one call that returns None; a backend the code picks itself is kept.
import sys


class _VivariumFigures:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "vivarium_figures":
            return __import__("_frozen_importlib_external").spec_from_file_location(
                name, "/etc/vivarium/vivarium_figures.py")
        if name != "matplotlib":
            return None
        for finder in sys.meta_path:
            if finder is not _VivariumFigures and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_choose(module):
            exec_module(module)
            if __import__("os").environ.get("MPLBACKEND", "").lower() == "agg":
                module.rcParams["backend"] = "module://vivarium_figures"

        spec.loader.exec_module = exec_and_choose
        return spec


sys.meta_path.insert(0, _VivariumFigures)
