"""What running a submitted mechanism isolated costs a smoke cell's release stage (issue 62 part 6).

A shipped mechanism's module is copied into one file and registered under another name; the
release stage of a smoke cell of ``fewshot_synth_faces`` (:func:`bench.cell.release.release`:
every split through the mechanism, written to a fresh cache) is timed with the file imported
into this process (as ``bench run --mechanism-file``) and with it in an isolated worker
(:mod:`bench.testing.isolated`, as ``bench submit`` and ``bench leaderboard verify`` run it),
and the two releases are compared byte for byte.

    .venv/bin/python benchmarks/isolation_overhead.py [--mechanism dp_pix] [--repeats 5]

It prints the median release time each way, the worker's start-up, and whether the bytes match.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this file's folder comes first on sys.path and benchmarks/mechanisms.py
# would shadow the mechanisms package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)
PARAMS = {"dp_pix": {"epsilon": 1.0, "block": 4}, "gaussian_noise": {"sigma": 30.0}, "blur": {"radius": 2.0},
          "pixelate": {"block": 8}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mechanism", default="dp_pix", choices=sorted(PARAMS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cache-dir", type=Path, default=None, help="where the smoke data is generated (kept)")
    args = parser.parse_args()

    import torch

    from bench.cell.data import cell_data
    from bench.cell.plan import RunConfig, plan, run_context
    from bench.cell.release import release
    from bench.core.registry import load_file, scoped
    from bench.testing.isolated import close_all, load_isolated

    work = Path(tempfile.mkdtemp(prefix="bench-isolation-overhead-"))
    source = (ROOT / "mechanisms" / f"{args.mechanism}.py").read_text(encoding="utf-8")
    files = {}
    for tag in ("in-process", "isolated"):  # the same code under two names: one imported here, one isolated
        name = f"{'file' if tag == 'in-process' else 'iso'}_{args.mechanism}"
        files[tag] = (work / f"{name}.py", name)
        files[tag][0].write_text(source.replace(f'@register_mechanism("{args.mechanism}")',
                                                f'@register_mechanism("{name}")'))
    cache = args.cache_dir or work / "cache"
    times: dict[str, list[float]] = {"in-process": [], "isolated": []}
    released: dict[str, dict] = {}

    with scoped():
        load_file(files["in-process"][0])
        started = time.perf_counter()
        kind = load_isolated([files["isolated"][0]])["kind"]
        startup = time.perf_counter() - started
        planned, clean = {}, None
        for tag, (_path, name) in files.items():
            config = RunConfig(task="fewshot_synth_faces", mechanism=name, params=PARAMS[args.mechanism], seed=0,
                               profile="smoke", device="cpu", results_dir=work / "results", cache_dir=cache,
                               attacks=())
            planned[tag] = plan(config)
            clean = clean or cell_data(planned[tag])
        print(f"splits: {({n: tuple(s.images.shape) for n, s in clean.sets.items()})}", file=sys.stderr)
        for k in range(args.repeats):  # interleaved, so that a busy machine slows both alike
            for tag, found in times.items():
                ctx = run_context(planned[tag], lambda _line: None, None)
                ctx.cache_dir = work / f"releases-{tag}-{k}"  # a fresh release every time (the data stays cached)
                started = time.perf_counter()
                out = release(planned[tag], clean, ctx, lambda _line: None)
                found.append(time.perf_counter() - started)
                released[tag] = {n: s.images[:] for n, s in out.splits.sets.items()}
        close_all()
    same = all(torch.equal(released["in-process"][n], released["isolated"][n]) for n in released["in-process"])
    inside, isolated = (statistics.median(times[t]) for t in ("in-process", "isolated"))
    print(f"{args.mechanism} release stage of a smoke fewshot_synth_faces cell ({args.repeats} runs each): median "
          f"in-process {inside:.3f} s, isolated ({kind}) {isolated:.3f} s ({isolated - inside:+.3f} s); fastest "
          f"{min(times['in-process']):.3f} s and {min(times['isolated']):.3f} s; worker start-up {startup:.1f} s; "
          f"released bytes {'identical' if same else 'DIFFERENT'}")
    for tag, found in times.items():
        print(f"  {tag}: {', '.join(f'{t:.3f}' for t in found)}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
