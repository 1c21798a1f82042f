"""The Python API: run cells and sweeps, read results as DataFrames, use a mechanism on one's own images.

For notebooks and scripts, as lm-evaluation-harness's ``simple_evaluate`` and timm's
``create_model``::

    import bench

    mech = bench.load_mechanism("dp_pix", epsilon=3, block=4)
    private = mech.apply(images, seed=0)                     # a user's uint8 [N, C, H, W] tensor
    result = bench.run("dp_pix", "fewshot_synth_faces", {"epsilon": 3, "block": 4}, seed=0, profile="quick")
    result.run_id                                             # its MLflow run
    table = bench.grid("fewshot_synth_faces", "dp_pix", {"epsilon": [1, 3], "block": 4}, seeds=[0, 1])
    table = bench.results("results", mechanism="dp_pix")     # one row per cell, every metric a column
    groups = bench.group_results("results")                  # one row per cell, attack and demographic group
    board = bench.leaderboard("results")                      # the boards' standings

The default profile of ``run``, ``grid`` and ``tune`` is ``smoke``: the cheapest cell
(minutes on a CPU) that checks a set-up end to end, whose numbers are not comparable;
pass ``profile="quick"`` (the command line's default) or ``"paper"`` for results.
``bench.run`` takes the same single path as ``bench run`` (validation first, the cell lock,
a FINISHED cell reused, MLflow logging) and returns the :class:`~bench.core.interfaces.Result`
with its ``run_id``; errors a user can cause raise :class:`~bench.errors.BenchError`
before any work. Importing ``bench`` starts nothing: no thread, no environment change.
"""

from bench.api.cells import RunResult, group_results, leaderboard, results, run, runs
from bench.api.mechanism import MechanismHandle, list_mechanisms, load_mechanism
from bench.api.sweeps import TuneResult, grid, tune

__all__ = ["MechanismHandle", "RunResult", "TuneResult", "grid", "group_results", "leaderboard", "list_mechanisms",
           "load_mechanism", "results", "run", "runs", "tune"]
