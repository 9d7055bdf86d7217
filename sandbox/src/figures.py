# Vivarium's matplotlib backend, `vivarium_figures` (MPLBACKEND=module://vivarium_figures
# in the sandbox; this file is /etc/vivarium/vivarium_figures.py on the read-only root,
# found by the bootstraps' finder, sandbox/src/plan.rs FIGURES_FINDER). Agg, plus what
# matplotlib-inline does for a notebook: every figure the code shows (`plt.show()`) or
# leaves open when the job, or a session's cell, ends is saved as a PNG and closed, so a
# session does not pile them up. They go to /work/out/figure-N.png (N counting on from 1
# through the process's life, skipping any name that exists), where the collection of
# the job's outputs finds them (the daemon always asks for `out/figure-*.png`).
#
# The figure's size is the rc's (Vivarium's /etc/matplotlibrc: 6.4 x 4.8 in at 150 dpi,
# 960 x 720 px); nothing is cropped (no bbox_inches="tight"), so a default figure is
# that size exactly.
import atexit
import os

from matplotlib.backends.backend_agg import FigureCanvasAgg, FigureManagerBase

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase

OUT = "/work/out"
_next = [1]


def _save(figure):
    # One figure to the next free out/figure-N.png: made new (O_EXCL) in out/ opened
    # without following a link, so nothing the code left there is written through.
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.mkdir(OUT)
    except FileExistsError:
        pass
    out = os.open(OUT, flags)
    try:
        while True:
            name = "figure-%d.png" % _next[0]
            _next[0] += 1
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644, dir_fd=out)
            except FileExistsError:
                continue
            with os.fdopen(fd, "wb") as f:
                figure.savefig(f, format="png")
            return name
    finally:
        os.close(out)


def flush_figures():
    # Save every open figure, in the order they were made, and close them all.
    from matplotlib import pyplot
    from matplotlib._pylab_helpers import Gcf

    try:
        for manager in sorted(Gcf.get_all_fig_managers(), key=lambda m: m.num):
            try:
                _save(manager.canvas.figure)
            except Exception as e:  # a full disk, a broken figure: say so, go on
                os.write(2, ("vivarium: figure %s was not saved: %s\n" % (
                    manager.num, e)).encode("utf-8", "replace"))
    finally:
        pyplot.close("all")


def show(*args, **kwargs):
    # plt.show(): the open figures are saved and closed (a block= argument is moot).
    flush_figures()


# At the job's end (the interpreter's atexit, which the warm bootstrap's exit runs too)
# the figures still open; a session's cell loop calls flush_figures after each cell.
atexit.register(flush_figures)
